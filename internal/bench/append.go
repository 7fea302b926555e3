package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
)

func init() { Register(appendWorkload{}) }

// appendWorkload measures append throughput and latency through the SDK:
// Clients clients, each appending RecordBytes-byte records, paced open loop
// at Rate in total or, with Rate 0, closed loop with Inflight appends in
// flight per client.
type appendWorkload struct{}

func (appendWorkload) Name() string { return "append" }

func (appendWorkload) Check(p Params) error {
	var errs []error
	if p.Clients < 1 || p.Clients > clientsMax {
		errs = append(errs, fmt.Errorf("clients must be in [1, %d], got %d", clientsMax, p.Clients))
	} else if err := CheckRate(p.Rate, p.Clients, p.Duration); err != nil {
		errs = append(errs, err)
	}
	if p.Rate == 0 && (p.Inflight < 1 || p.Inflight > inflightMax) {
		errs = append(errs, fmt.Errorf("inflight must be in [1, %d] in closed loop, got %d", inflightMax, p.Inflight))
	}
	recordMax := config.DefaultRecordBytesMax
	if p.Cluster != nil {
		recordMax = p.Cluster.RecordBytesMax
	}
	if p.RecordBytes < 1 || p.RecordBytes > recordMax {
		errs = append(errs, fmt.Errorf("record bytes must be in [1, %d] (the cluster's record_bytes_max), got %d", recordMax, p.RecordBytes))
	}
	return errors.Join(errs...)
}

// appendStats collects one run's measurements; done callbacks update it
// from the clients' goroutines.
type appendStats struct {
	warmEnd, end time.Time
	latency      *Latency
	acked        atomic.Int64 // acknowledged inside the measured window
	errors       atomic.Int64 // failed appends started in the measured window
	firstErr     atomic.Pointer[error]
	pending      sync.WaitGroup
}

func (s *appendStats) done(start time.Time) func(client.Ack, error) {
	s.pending.Add(1)
	return func(_ client.Ack, err error) {
		defer s.pending.Done()
		now := time.Now()
		measured := !start.Before(s.warmEnd) && start.Before(s.end)
		if err != nil {
			if measured {
				s.errors.Add(1)
			}
			s.firstErr.CompareAndSwap(nil, &err)
			return
		}
		if measured {
			s.latency.Record(now.Sub(start))
		}
		if !now.Before(s.warmEnd) && now.Before(s.end) {
			s.acked.Add(1)
		}
	}
}

func (appendWorkload) Run(ctx context.Context, t *Target, p Params) (*Result, error) {
	clients := make([]*client.Client, 0, p.Clients)
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	for range p.Clients {
		cl, err := t.Dial(ctx)
		if err != nil {
			return nil, err
		}
		clients = append(clients, cl)
	}
	shards, replicas := p.Shards, p.Replicas
	if t.Embedded == nil {
		var err error
		if shards, replicas, err = shape(ctx, clients[0]); err != nil {
			return nil, err
		}
	}
	payload := make([]byte, p.RecordBytes)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	rec := client.Record{Payload: payload}

	start := time.Now()
	st := &appendStats{
		warmEnd: start.Add(p.Warmup),
		end:     start.Add(p.Warmup + p.Duration),
		latency: NewLatency(),
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var gens sync.WaitGroup
	for i, cl := range clients {
		gens.Add(1)
		go func() {
			defer gens.Done()
			if p.Rate > 0 {
				openLoop(runCtx, cl, rec, NewPacer(Schedule{Start: start, Rate: p.Rate}, i, p.Clients), st)
			} else {
				closedLoop(runCtx, cl, rec, p.Inflight, st)
			}
		}()
	}

	// Measure CPU over the window only; warm-up and drain are excluded.
	var cpu0, cpu1 time.Duration
	var cpuErr error
	if err := sleepUntil(ctx, st.warmEnd); err == nil {
		cpu0, cpuErr = CPUTime()
		if err := sleepUntil(ctx, st.end); err == nil && cpuErr == nil {
			cpu1, cpuErr = CPUTime()
		}
	}
	gens.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cpuErr != nil {
		return nil, cpuErr
	}
	drained := make(chan struct{})
	go func() { st.pending.Wait(); close(drained) }()
	timer := time.NewTimer(drainTimeout)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		return nil, fmt.Errorf("appends still unacknowledged %v after the run", drainTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if st.acked.Load() == 0 {
		if e := st.firstErr.Load(); e != nil {
			return nil, fmt.Errorf("no append succeeded in the measured window: %w", *e)
		}
		return nil, errors.New("no append was acknowledged in the measured window")
	}
	return &Result{
		Workload:        "append",
		Mode:            "eager",
		Shards:          shards,
		Replicas:        replicas,
		RecordBytes:     p.RecordBytes,
		Rate:            Ptr(p.Rate),
		Clients:         p.Clients,
		DurationS:       round(p.Duration.Seconds(), 3),
		ThroughputRPS:   Ptr(round(float64(st.acked.Load())/p.Duration.Seconds(), 1)),
		AppendLatencyUS: st.latency.Summary(),
		Errors:          st.errors.Load(),
		CPUSeconds:      Ptr(round((cpu1 - cpu0).Seconds(), 3)),
	}, nil
}

// openLoop issues appends at the pacer's times until the run ends; an
// append's latency counts from when it was due.
func openLoop(ctx context.Context, cl *client.Client, rec client.Record, pc *Pacer, st *appendStats) {
	for {
		at := pc.Next()
		if !at.Before(st.end) {
			return
		}
		if err := sleepUntil(ctx, at); err != nil {
			return
		}
		cl.AppendAsync(ctx, rec, st.done(at))
	}
}

// closedLoop keeps inflight appends in flight until the run ends.
func closedLoop(ctx context.Context, cl *client.Client, rec client.Record, inflight int, st *appendStats) {
	slots := make(chan struct{}, inflight)
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		now := time.Now()
		if !now.Before(st.end) {
			return
		}
		done := st.done(now)
		cl.AppendAsync(ctx, rec, func(a client.Ack, err error) {
			done(a, err)
			<-slots
		})
	}
}
