package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// AllOptions configure RunAll.
type AllOptions struct {
	// Out is the directory the outputs go to; it is created if missing.
	Out string
	// Base holds the parameters every job starts from: Modes, Replicas,
	// OrderingInterval, Fsync, RecordBytes, Rate, Subscribers, Seed,
	// Warmup, Duration, Logger and Progress. Each job then sets its own
	// sweep (shards, compute) and may lengthen Duration.
	Base Params
	// Command is the command line, quoted in the report.
	Command string
}

// allJob is one workload run of `all`: its output files are Name.json,
// Name.svg and Name.png.
type allJob struct {
	Name     string
	Workload string
	// Edit sets the job's own parameters on top of the base ones.
	Edit func(p *Params)
	// Paper lists the papers' headline numbers for this figure, each with
	// its section and figure.
	Paper []string
	// Target is what issue 4 asks of the result, if anything.
	Target string
}

// allJobs are the workloads of `all`, in the order of SpecLog §6.
var allJobs = []allJob{
	{
		Name: "e2e", Workload: "e2e",
		Edit: func(p *Params) { p.Shards = []int{2, 4}; p.Compute = []time.Duration{1500 * time.Microsecond} },
		Paper: []string{
			"SpecLog §6.1, Fig. 7(a): Belfast delivers records 3.2×–3.5× earlier than Scalog (2 and 4 shards, 1.5 ms compute per batch).",
			"SpecLog §6.1, Fig. 7(b): mean e2e latency 1.6× lower; p99 e2e 1.4× lower with 2 shards and 1.17× with 4.",
		},
		Target: "speculative delivery ≥ 3× earlier and e2e ≥ 1.5× lower than eager with 2 and 4 shards at 1.5 ms compute.",
	},
	{
		Name: "compute", Workload: "e2e",
		Edit: func(p *Params) {
			p.Shards = []int{4}
			p.Compute = []time.Duration{500 * time.Microsecond, 1500 * time.Microsecond, 4 * time.Millisecond}
		},
		Paper: []string{
			"SpecLog §6.2, Fig. 8(b): the e2e benefit is 1.17× with 0.5 ms compute and 1.63× with 1.5 ms (4 shards); it approaches 1× as compute grows to 50 ms.",
			"SpecLog §6.2, Fig. 8(c): Scalog's e2e is delivery + downstream queue + compute; Belfast adds wait-for-confirm, which shrinks as compute grows.",
		},
	},
	{
		Name: "append", Workload: "append",
		Edit: func(p *Params) { p.Shards = []int{1, 2, 4} },
		Paper: []string{
			"SpecLog §6.3, Fig. 9: Belfast's append latency is above Scalog's by 5.8% with 10 shards (2, 4 and 10 shards, a few upstream clients).",
			"Scalog §6.3: one shard (f = 1) peaks at 18.7K writes/s of 4 KB; client-perceived write latency 1.3 ms without aggregators (0.1 ms interleaving interval).",
		},
		Target: "speculative append p50 within 10% of eager.",
	},
	{
		Name: "burst", Workload: "burst",
		Edit: func(p *Params) { p.Duration *= 2 },
		Paper: []string{
			"SpecLog §6.4, Fig. 10(a): with 2 shards and 0.8 ms compute, a burst on one shard raises e2e latency briefly; Belfast stays below Scalog throughout, and without lag-fix the lag persists after the burst.",
		},
	},
	{
		Name: "ratechange", Workload: "ratechange",
		Edit: func(p *Params) { p.Duration *= 2 },
		Paper: []string{
			"SpecLog §6.5, Fig. 11: after a sustained rate increase on one shard, quota changes keep R+N close to R (no-ops N/R < 5% in all experiments); without them the sequencer load is about 2× and e2e latency higher. Belfast's R matches Scalog's.",
		},
	},
	{
		Name: "window", Workload: "window",
		Paper: []string{
			"SpecLog §6.6, Fig. 12: 2 shards at 20K records/s, 1.5 ms compute: a window of 5 cuts costs about one ordering interval of waiting per window, at a window of 100 the waiting is about 0.07% of the ordering interval; e2e stays under Scalog's 5.9 ms at every window size.",
		},
	},
	{
		Name: "elastic", Workload: "elastic",
		Edit: func(p *Params) { p.Duration *= 2 },
		Paper: []string{
			"SpecLog §6.7, Fig. 13: adding two shards and removing them causes no downtime and no misspeculation; the new shards' throughput arrives < 100 ms later than in Scalog.",
			"Scalog §6.1, Fig. 3: with 6 shards at 50K writes/s, adding or finalizing a shard leaves throughput unaffected (Corfu stops for about 30 ms).",
		},
	},
	{
		Name: "scale", Workload: "scale",
		Edit: func(p *Params) { p.Shards = []int{1, 2, 4}; p.Rate = 0 },
		Paper: []string{
			"SpecLog §6.8, Fig. 14(a, b): throughput grows with shards like Scalog's, with e2e latency 1.66× lower than Scalog's at 2 shards and 1.4× at 10 (1.2 ms compute).",
		},
		Target: "throughput scaling with shards until the machine's cores saturate.",
	},
	{
		Name: "scale-emulated", Workload: "scale",
		Edit: func(p *Params) {
			p.Emulate = []int{40}
			p.Rate = 40 * emulatedShardRate
			p.Compute, p.Subscribers = nil, 0
		},
		Paper: []string{
			"SpecLog §6.8, Fig. 14(d): with emulated shards, Belfast keeps its latency benefit over Scalog up to 40 shards, with staggered cuts (groups of shards take turns in the cuts).",
			"Scalog §6.3, Fig. 5: emulated shards at 15K writes/s each reach 2.34M writes/s, and about 3,500 shards (52M writes/s) before Paxos saturates.",
		},
		Target: "emulated ordering layer sustaining ≥ 40 shards at a 1 ms interval.",
	},
	{
		Name: "straggler", Workload: "straggler",
		Paper: []string{
			"SpecLog §6.9, Fig. 15: when one shard's reports are delayed, e2e latency rises until the sequencer sets the straggler's quota to zero for the next five windows; then it is low again.",
		},
	},
	{
		Name: "failure", Workload: "failure",
		Edit: func(p *Params) { p.Duration = max(2*p.Duration, 6*time.Second) },
		Paper: []string{
			"SpecLog §6.11, Fig. 17: a 3-way replicated shard masks a replica failure; a whole-shard failure causes misspeculations until the view change, failure detection dominates recovery, and rollback time is marginal.",
			"Scalog §6.2, Fig. 4: killing the Paxos leader (at t = 2 s, 6 shards, 50K writes/s) dips throughput, then a catch-up spike leaves the total unaffected; after a storage server failure, throughput is restored after slightly more than the 1 s failure timeout.",
		},
	},
}

// emulatedShardRate is the records/s each emulated shard of `all` takes.
const emulatedShardRate = 1000

// allEntry is one job's outcome.
type allEntry struct {
	job     allJob
	params  Params
	report  *Report
	skipped error // the job's parameters were refused (e.g. it needs spec)
	failed  error // the run failed
	files   []string
}

// RunAll runs a short version of every workload and writes, into o.Out,
// NAME.json (the JSON lines of `augur bench NAME`), NAME.svg and NAME.png
// (its figure) for each, and REPORT.md, which lays the figures next to the
// papers' headline numbers. A workload that cannot run (one needing mode
// spec while it is not available) is listed in the report as not run; a
// run that fails is reported there too, and RunAll then returns an error
// after writing everything else.
func RunAll(ctx context.Context, o AllOptions) error {
	if o.Out == "" {
		return errors.New("all: name an output directory (--out DIR)")
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("all: %w", err)
	}
	var entries []*allEntry
	var failed []error
	for _, job := range allJobs {
		e := &allEntry{job: job}
		entries = append(entries, e)
		p, err := allParams(job, o.Base)
		if err != nil {
			return err
		}
		e.params = p
		if _, err := Check(job.Workload, p); err != nil {
			e.skipped = err
			if o.Base.Progress != nil {
				fmt.Fprintf(o.Base.Progress, "bench all: %s not run: %v\n", job.Name, err)
			}
			continue
		}
		rep, err := Run(ctx, job.Workload, p)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		e.report = rep
		if err != nil {
			e.failed = err
			failed = append(failed, fmt.Errorf("%s: %w", job.Name, err))
		}
		if rep == nil || len(rep.Points) == 0 {
			continue
		}
		if e.files, err = writeJobOutputs(o.Out, job.Name, rep); err != nil {
			return err
		}
	}
	var buf bytes.Buffer
	writeReport(&buf, o, entries)
	if err := os.WriteFile(filepath.Join(o.Out, "REPORT.md"), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("all: %w", err)
	}
	if len(failed) > 0 {
		return fmt.Errorf("all: %d workloads failed (see %s): %w", len(failed), filepath.Join(o.Out, "REPORT.md"), errors.Join(failed...))
	}
	return nil
}

// allParams returns job's parameters: its workload's defaults, the base
// parameters, then the job's edits.
func allParams(job allJob, base Params) (Params, error) {
	p, err := DefaultParams(job.Workload)
	if err != nil {
		return Params{}, err
	}
	p.Modes = base.Modes
	p.Replicas = base.Replicas
	p.OrderingInterval = base.OrderingInterval
	p.Fsync = base.Fsync
	p.RecordBytes = base.RecordBytes
	p.Rate = base.Rate
	if p.Subscribers > 0 {
		p.Subscribers = base.Subscribers
	}
	p.Seed = base.Seed
	p.Warmup = base.Warmup
	p.Duration = base.Duration
	p.Logger = base.Logger
	p.Progress = base.Progress
	if job.Edit != nil {
		job.Edit(&p)
	}
	return p, nil
}

// writeJobOutputs writes a job's JSON and figures and returns their names.
func writeJobOutputs(dir, name string, rep *Report) ([]string, error) {
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		return nil, err
	}
	files := []string{name + ".json", name + ".svg", name + ".png"}
	if err := os.WriteFile(filepath.Join(dir, files[0]), buf.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("all: %w", err)
	}
	for _, f := range files[1:] {
		if err := WritePlot(filepath.Join(dir, f), rep); err != nil {
			return nil, fmt.Errorf("all: %w", err)
		}
	}
	return files, nil
}
