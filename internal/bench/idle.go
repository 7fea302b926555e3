package bench

import (
	"context"
	"time"
)

func init() { Register(idleWorkload{}) }

// idleWorkload measures what an embedded cluster costs while nobody uses
// it: heartbeats, raft ticks and the ordering loop.
type idleWorkload struct{}

func (idleWorkload) Name() string { return "idle" }

func (idleWorkload) Defaults(p *Params) {
	p.Subscribers = 0
}

func (idleWorkload) Check(p Params) error {
	return needEmbedded("idle", "measures this process's CPU", p)
}

func (idleWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	p := e.Params
	// Let start-up settle (registration, first elections) before measuring.
	if err := sleepUntil(ctx, time.Now().Add(p.Warmup)); err != nil {
		return nil, err
	}
	cpu0, err := SampleCPU()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := sleepUntil(ctx, start.Add(p.Duration)); err != nil {
		return nil, err
	}
	cpu1, err := SampleCPU()
	if err != nil {
		return nil, err
	}
	wall := time.Since(start)
	cpuTime, host := cpu1.Since(cpu0)
	cpu := cpuTime.Seconds()
	return &Result{
		Replicas:            p.Replicas,
		DurationS:           round(wall.Seconds(), 3),
		CPUSeconds:          Ptr(round(cpu, 3)),
		CPUPercentOfOneCore: Ptr(round(100*cpu/wall.Seconds(), 2)),
		StealPercent:        host.Steal,
		IOWaitPercent:       host.IOWait,
	}, nil
}
