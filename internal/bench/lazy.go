package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/stagetime"
)

func init() { Register(lazyAppendWorkload{}) }

// lazyAppendWorkload sets lazy order's appends beside eager order's (the
// LazyLog paper's Fig. 6–8): open-loop appends at Rate with no consumers,
// under each durability setting, on 1 and 3 shards. Every result carries
// the gRPC floor measured in the same run; the comparison lines give
// eager ÷ lazy append latency. --record-bytes 100 runs the small records.
type lazyAppendWorkload struct{}

func (lazyAppendWorkload) Name() string { return "lazy-append" }

func (lazyAppendWorkload) Defaults(p *Params) {
	p.Modes = []string{"eager", "lazy"}
	p.Shards = []int{1, 3}
	p.Durability = []string{DurabilityDefault, DurabilityOptOut}
	p.Subscribers = 0
}

func (lazyAppendWorkload) Check(p Params) error { return checkLoad(p, false) }

func (lazyAppendWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	return runLoad(ctx, e, loadSpec{})
}

func init() { Register(lazyReadsWorkload{}) }

// lazyReadLags are the reader lags of lazy-reads: how long after a record
// is durable (CheckTail names it) each reader asks for it.
var lazyReadLags = []time.Duration{0, time.Millisecond, 3 * time.Millisecond}

// lazyReadsWorkload measures reads of a lazy cluster behind open-loop
// appends (LazyLog Fig. 9): three readers each repeatedly learn the
// durable tail, wait their lag (0, 1 or 3 ms), and read the last durable
// position; a read below stable-gp is served at once (fast path), one
// above it waits for stable-gp (slow path). The result lists, per lag,
// the read latency and how many reads took each path.
type lazyReadsWorkload struct{}

func (lazyReadsWorkload) Name() string { return "lazy-reads" }

func (lazyReadsWorkload) Defaults(p *Params) {
	p.Modes = []string{"lazy"}
	p.Subscribers = 0
}

func (lazyReadsWorkload) Check(p Params) error {
	var errs []error
	if p.Rate <= 0 {
		errs = append(errs, errors.New("lazy-reads needs an open-loop --rate"))
	}
	for _, m := range p.Modes {
		if m != "lazy" {
			errs = append(errs, fmt.Errorf("lazy-reads reads a lazy cluster; --modes %s", m))
		}
	}
	return errors.Join(append(errs, checkLoad(p, false))...)
}

func (lazyReadsWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	p := e.Params
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var clients []*client.Client
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	dial := func() (*client.Client, error) {
		cl, err := e.Target.Dial(ctx)
		if err == nil {
			clients = append(clients, cl)
		}
		return cl, err
	}
	start := time.Now()
	warmEnd := start.Add(p.Warmup)
	end := warmEnd.Add(p.Duration)
	payload, _ := filler(p.Seed, p.RecordBytes)
	var acked, failed atomic.Int64
	var wg sync.WaitGroup
	if p.Stages && e.Target.Embedded != nil {
		// Time the stages of stable-gp's lag over the window.
		wg.Go(func() {
			if sleepUntil(runCtx, warmEnd) != nil {
				return
			}
			stagetime.Start()
			_ = sleepUntil(runCtx, end)
			stagetime.Stop()
		})
	}
	sched := Schedule{Start: start, Rate: p.Rate}
	for i := range p.Clients {
		cl, err := dial()
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			pacer := NewPacer(sched, i, p.Clients)
			alarm := NewAlarm()
			defer alarm.Close()
			for {
				at := pacer.Next()
				if !at.Before(end) || alarm.SleepUntil(runCtx, at) != nil {
					return
				}
				cl.AppendAsync(runCtx, client.Record{Payload: payload}, func(_ client.Ack, err error) {
					if err != nil {
						failed.Add(1)
					} else if t := time.Now(); !t.Before(warmEnd) && t.Before(end) {
						acked.Add(1)
					}
				})
			}
		})
	}
	type reader struct {
		lag        time.Duration
		lat        *Latency
		fast, slow uint64
		errs       int64
	}
	readers := make([]*reader, len(lazyReadLags))
	for i, lag := range lazyReadLags {
		cl, err := dial()
		if err != nil {
			return nil, err
		}
		r := &reader{lag: lag, lat: NewLatency()}
		readers[i] = r
		wg.Go(func() {
			for time.Now().Before(end) && runCtx.Err() == nil {
				tail, err := cl.CheckTail(runCtx)
				if err != nil || tail == 0 {
					continue
				}
				if r.lag > 0 {
					t := time.NewTimer(r.lag)
					select {
					case <-t.C:
					case <-runCtx.Done():
						t.Stop()
						return
					}
				}
				inWindow := !time.Now().Before(warmEnd)
				f0, s0 := cl.LazyReadPaths()
				rctx, rcancel := context.WithTimeout(runCtx, time.Second)
				began := time.Now()
				_, err = cl.Read(rctx, tail-1)
				took := time.Since(began)
				rcancel()
				if !inWindow {
					continue
				}
				if err != nil {
					r.errs++
					continue
				}
				f1, s1 := cl.LazyReadPaths()
				r.lat.Record(took)
				// A read of a position not stable yet may be held at one
				// shard and then served at the shard that has it: it
				// took the slow path if any of its requests waited.
				switch {
				case s1 > s0:
					r.slow++
				case f1 > f0:
					r.fast++
				}
			}
		})
	}
	wg.Wait()
	res := &Result{
		DurationS:     round(p.Duration.Seconds(), 3),
		ThroughputRPS: Ptr(round(float64(acked.Load())/p.Duration.Seconds(), 1)),
		Errors:        failed.Load(),
	}
	for _, r := range readers {
		lr := LazyReads{LagMS: round(float64(r.lag)/float64(time.Millisecond), 3), Fast: int64(r.fast), Slow: int64(r.slow), Errors: r.errs}
		if r.lat.Count() > 0 {
			lr.LatencyUS = r.lat.Summary()
		}
		if n := r.fast + r.slow; n > 0 {
			lr.FastPercent = round(100*float64(r.fast)/float64(n), 2)
		}
		res.LazyReads = append(res.LazyReads, lr)
	}
	if p.Stages && e.Target.Embedded != nil {
		res.StagesUS = stagetime.Summaries()
	}
	return res, nil
}

func init() { Register(lazyReconfigWorkload{}) }

// lazyReconfigWorkload records lazy appends over time across a crash of
// the sequencing leader (LazyLog §6.10): at a third of the window the
// leader stops, the ordering layer seals its view, flushes the survivor's
// ring and starts a view without it; at two thirds it restarts and comes
// back in a later view. The time series shows the pause and the recovery.
type lazyReconfigWorkload struct{}

func (lazyReconfigWorkload) Name() string { return "lazy-reconfig" }

func (lazyReconfigWorkload) Defaults(p *Params) {
	p.Modes = []string{"lazy"}
	p.Subscribers = 0
}

func (lazyReconfigWorkload) Check(p Params) error {
	errs := []error{needEmbedded("lazy-reconfig", "stops and restarts a sequencing replica", p), checkLoad(p, false)}
	for _, m := range p.Modes {
		if m != "lazy" {
			errs = append(errs, fmt.Errorf("lazy-reconfig crashes a sequencing replica of a lazy cluster; --modes %s", m))
		}
	}
	return errors.Join(errs...)
}

func (lazyReconfigWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	dc := e.Target.Embedded
	if dc == nil {
		return nil, errors.New("lazy-reconfig needs the embedded cluster")
	}
	var mu sync.Mutex
	var leader string
	d := e.Params.Duration
	actions := []action{
		{At: d / 3, What: "stop the sequencing leader", Do: func(ctx context.Context) (string, error) {
			cl, err := e.Target.Dial(ctx)
			if err != nil {
				return "", err
			}
			defer cl.Close()
			st, err := cl.Status(ctx)
			if err != nil {
				return "", err
			}
			reps := st.GetLazy().GetReplicas()
			if len(reps) == 0 {
				return "", errors.New("no sequencing view")
			}
			mu.Lock()
			leader = reps[0].GetId()
			mu.Unlock()
			return " " + reps[0].GetId(), dc.StopSequencing(reps[0].GetId())
		}},
		{At: 2 * d / 3, What: "restart it", Do: func(context.Context) (string, error) {
			mu.Lock()
			id := leader
			mu.Unlock()
			return " " + id, dc.StartSequencing(id)
		}},
	}
	return runLoad(ctx, e, loadSpec{Actions: actions, Series: true})
}
