package bench

import (
	"context"
	"errors"
	"time"
)

func init() { Register(idleWorkload{}) }

// idleWorkload measures what an embedded cluster costs while nobody uses
// it: heartbeats, raft ticks and the ordering loop.
type idleWorkload struct{}

func (idleWorkload) Name() string { return "idle" }

func (idleWorkload) Check(p Params) error {
	if p.Cluster != nil {
		return errors.New("idle measures this process's CPU, so it needs the embedded cluster; drop --cluster")
	}
	return nil
}

func (idleWorkload) Run(ctx context.Context, t *Target, p Params) (*Result, error) {
	// Let start-up settle (registration, first elections) before measuring.
	if err := sleepUntil(ctx, time.Now().Add(p.Warmup)); err != nil {
		return nil, err
	}
	cpu0, err := CPUTime()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := sleepUntil(ctx, start.Add(p.Duration)); err != nil {
		return nil, err
	}
	cpu1, err := CPUTime()
	if err != nil {
		return nil, err
	}
	wall := time.Since(start)
	cpu := (cpu1 - cpu0).Seconds()
	return &Result{
		Workload:            "idle",
		Shards:              p.Shards,
		Replicas:            p.Replicas,
		DurationS:           round(wall.Seconds(), 3),
		CPUSeconds:          Ptr(round(cpu, 3)),
		CPUPercentOfOneCore: Ptr(round(100*cpu/wall.Seconds(), 2)),
	}, nil
}
