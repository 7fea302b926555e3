package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/bench"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/devcluster"
	"github.com/augur-log/augur/internal/mode"
)

// Bounds of the demo.
const (
	// demoHeaderBytes is the payload prefix the demo writes: the append's
	// start time (unix nanos), the appender and its sequence number.
	demoHeaderBytes = 8 + 4 + 8
	demoClientsMax  = 64
	// demoDrainTimeout bounds the wait for the last acks and deliveries.
	demoDrainTimeout = 30 * time.Second
	// demoShowEntries is how many entries of the sequence are printed at
	// each end.
	demoShowEntries = 4
)

type demoFlags struct {
	mode        string
	duration    time.Duration
	shards      int
	replicas    int
	appenders   int
	subscribers int
	recordBytes int
	rate        int
	insecure    bool
}

func newDemoCmd() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start a cluster in this process, append and subscribe through the SDK, and summarize",
		Long: `Start a whole cluster in this process (3 ordering replicas, --shards shards of
--replicas replicas), append to it at --rate from --appenders clients while
--subscribers clients follow the log from position 0, then print throughput,
append latency (append start to ack), delivery latency (append start to a
subscriber's receipt), and check that every subscriber received the identical
sequence.

In --mode spec (the default) the cluster orders speculatively: every other
subscriber takes records as soon as they are durable, at predicted
positions, and the others take only confirmed records, as eager order
delivers them; the demo prints both delivery latencies side by side, and
how much of the run the cluster speculated. Where shards get too few records
per ordering interval, its leader makes eager cuts instead (filling the empty
slots of every cut would cost more than speculation saves), and both
latencies are eager order's; with --shards 1 it always speculates.
--mode eager runs Scalog's eager order only. --mode lazy runs LazyLog's
lazy order: appends return after one round trip, before they are ordered,
and subscribers see them once stable-gp covers them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			return runDemo(cmd.Context(), f, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.mode, "mode", mode.SpecName, "ordering mode of the cluster: spec, eager or lazy")
	fs.IntVar(&f.shards, "shards", devcluster.DefaultShards, "storage shards of the cluster")
	fs.IntVar(&f.replicas, "replicas", devcluster.DefaultReplicas, fmt.Sprintf("storage servers per shard (%d or %d)", config.GroupServersMin, config.GroupServersMax))
	fs.DurationVar(&f.duration, "duration", 5*time.Second, "how long to append")
	fs.IntVar(&f.appenders, "appenders", 4, "appending clients")
	fs.IntVar(&f.subscribers, "subscribers", 2, "subscribing clients, each from position 0")
	fs.IntVar(&f.recordBytes, "record-bytes", 4096, "payload bytes per record")
	fs.IntVar(&f.rate, "rate", 2000, "appends per second over all appenders (open loop)")
	fs.BoolVar(&f.insecure, "insecure", false, "run the cluster plaintext (default: TLS with certificates generated in its temporary directory)")
	cmd.AddCommand(newDemoPlayerCmd())
	return cmd
}

func (f demoFlags) check() error {
	var errs []error
	if _, err := mode.Lookup(f.mode); err != nil {
		errs = append(errs, fmt.Errorf("--mode: %w", err))
	}
	if f.shards < 1 || f.shards > devcluster.ShardsMax {
		errs = append(errs, fmt.Errorf("--shards must be in [1, %d], got %d", devcluster.ShardsMax, f.shards))
	}
	if f.replicas < config.GroupServersMin || f.replicas > config.GroupServersMax {
		errs = append(errs, fmt.Errorf("--replicas must be %d or %d, got %d", config.GroupServersMin, config.GroupServersMax, f.replicas))
	}
	if f.duration <= 0 {
		errs = append(errs, fmt.Errorf("--duration must be positive, got %v", f.duration))
	}
	if f.appenders < 1 || f.appenders > demoClientsMax {
		errs = append(errs, fmt.Errorf("--appenders must be in [1, %d], got %d", demoClientsMax, f.appenders))
	}
	if f.subscribers < 1 || f.subscribers > demoClientsMax {
		errs = append(errs, fmt.Errorf("--subscribers must be in [1, %d], got %d", demoClientsMax, f.subscribers))
	}
	if f.recordBytes < demoHeaderBytes || f.recordBytes > 1<<20 {
		errs = append(errs, fmt.Errorf("--record-bytes must be in [%d, %d] (the demo stamps each record with %d bytes), got %d",
			demoHeaderBytes, 1<<20, demoHeaderBytes, f.recordBytes))
	}
	if f.rate <= 0 {
		errs = append(errs, fmt.Errorf("--rate must be positive, got %d", f.rate))
	} else if f.duration > 0 && f.appenders >= 1 {
		if err := bench.CheckRate(f.rate, f.appenders, f.duration); err != nil {
			errs = append(errs, fmt.Errorf("--rate: %w", err))
		}
	}
	return errors.Join(errs...)
}

// demoRecord identifies one appended record.
type demoRecord struct {
	appender uint32
	seq      uint64
}

func (r demoRecord) String() string { return fmt.Sprintf("a%d#%d", r.appender, r.seq) }

func encodeDemo(buf []byte, at time.Time, r demoRecord) {
	binary.BigEndian.PutUint64(buf[0:8], uint64(at.UnixNano()))
	binary.BigEndian.PutUint32(buf[8:12], r.appender)
	binary.BigEndian.PutUint64(buf[12:20], r.seq)
	for i := demoHeaderBytes; i < len(buf); i++ {
		buf[i] = byte('a' + i%26)
	}
}

func decodeDemo(p []byte) (time.Time, demoRecord, bool) {
	if len(p) < demoHeaderBytes {
		return time.Time{}, demoRecord{}, false
	}
	at := time.Unix(0, int64(binary.BigEndian.Uint64(p[0:8])))
	return at, demoRecord{appender: binary.BigEndian.Uint32(p[8:12]), seq: binary.BigEndian.Uint64(p[12:20])}, true
}

// demoSub is one subscriber's view of the log.
type demoSub struct {
	mu      sync.Mutex
	entries []demoEntry
	last    int64 // highest position received, -1 before any
	target  int64 // position to reach, -1 until the appends are done
	reached chan struct{}
	err     error
	// speculative subscribers only
	speculative bool
	rollbacks   int
}

type demoEntry struct {
	pos   uint64
	shard uint32
	rec   demoRecord
	ok    bool // the payload carried the demo's header
	sum   [sha256.Size]byte
}

func (s *demoSub) add(e demoEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = append(s.entries, e)
	s.last = int64(e.pos)
	s.checkLocked()
}

// rollBack drops the entries from position pos on: fail_spec(pos).
func (s *demoSub) rollBack(pos uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.entries) > 0 && s.entries[len(s.entries)-1].pos >= pos {
		s.entries = s.entries[:len(s.entries)-1]
	}
	s.last = -1
	if n := len(s.entries); n > 0 {
		s.last = int64(s.entries[n-1].pos)
	}
	s.rollbacks++
}

func (s *demoSub) setTarget(t int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.target = t
	s.checkLocked()
}

func (s *demoSub) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	select {
	case <-s.reached:
	default:
		close(s.reached)
	}
}

func (s *demoSub) checkLocked() {
	if s.target >= 0 && s.last >= s.target {
		select {
		case <-s.reached:
		default:
			close(s.reached)
		}
	}
}

func runDemo(ctx context.Context, f demoFlags, out io.Writer) error {
	shards := fmt.Sprintf("%d shards", f.shards)
	if f.shards == 1 {
		shards = "1 shard"
	}
	fmt.Fprintf(out, "augur demo: starting a cluster in this process: %d ordering replicas, %s × %d replicas on 127.0.0.1\n",
		devcluster.DefaultOrderingReplicas, shards, f.replicas)
	md, err := mode.Lookup(f.mode)
	if err != nil {
		return err
	}
	if f.insecure {
		warnInsecure(out, slog.Default())
	}
	dc, err := devcluster.Start(ctx, devcluster.Options{Logger: slog.Default(), Mode: f.mode, Shards: f.shards, Replicas: f.replicas, TLS: !f.insecure})
	if err != nil {
		return err
	}
	defer dc.Close()
	readyCtx, cancel := context.WithTimeout(ctx, devReadyTimeout)
	err = dc.WaitReady(readyCtx)
	cancel()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "cluster %q ready; ordering at %s\n", dc.ClusterID, strings.Join(dc.OrderingAddrs(), ","))
	printConnect(out, dc)

	var closers []*client.Client
	defer func() {
		for _, cl := range closers {
			cl.Close()
		}
	}()
	dial := func() (*client.Client, error) {
		cl, err := dc.Dial(ctx)
		if err == nil {
			closers = append(closers, cl)
		}
		return cl, err
	}

	// Subscribers first, from position 0, so they see every record. In
	// speculative mode every other one takes confirmed records only: the
	// eager view of the same log.
	delivery := bench.NewLatency()     // eager, or confirmed-only
	specDelivery := bench.NewLatency() // speculative
	confirm := bench.NewLatency()      // speculative: append start -> confirm_spec
	subCtx, stopSubs := context.WithCancel(ctx)
	defer stopSubs()
	subs := make([]*demoSub, f.subscribers)
	var subsDone sync.WaitGroup
	for i := range subs {
		cl, err := dial()
		if err != nil {
			return err
		}
		s := &demoSub{last: -1, target: -1, reached: make(chan struct{}), speculative: md.Speculative() && i%2 == 0}
		subs[i] = s
		next, closeSub, err := demoEvents(subCtx, cl, s.speculative)
		if err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
		subsDone.Add(1)
		go func() {
			defer subsDone.Done()
			defer closeSub()
			// unconfirmed holds what a speculative subscriber delivered,
			// to time its confirmation.
			type sent struct {
				pos uint64
				at  time.Time
			}
			var unconfirmed []sent
			for {
				ev, err := next(subCtx)
				if err != nil {
					if subCtx.Err() == nil {
						s.fail(fmt.Errorf("subscriber %d: %w", i+1, err))
					}
					return
				}
				now := time.Now()
				switch ev.Kind {
				case client.EventFail:
					s.rollBack(ev.Position)
					for len(unconfirmed) > 0 && unconfirmed[len(unconfirmed)-1].pos >= ev.Position {
						unconfirmed = unconfirmed[:len(unconfirmed)-1]
					}
					continue
				case client.EventConfirm:
					for len(unconfirmed) > 0 && unconfirmed[0].pos < ev.Position {
						confirm.Record(now.Sub(unconfirmed[0].at))
						unconfirmed = unconfirmed[1:]
					}
					continue
				}
				e := ev.Entry
				at, rec, ok := decodeDemo(e.Record.Payload)
				if ok {
					if s.speculative {
						specDelivery.Record(now.Sub(at))
						if ev.Speculative {
							unconfirmed = append(unconfirmed, sent{e.Position, at})
						} else {
							confirm.Record(now.Sub(at))
						}
					} else {
						delivery.Record(now.Sub(at))
					}
				}
				s.add(demoEntry{pos: e.Position, shard: e.Shard, rec: rec, ok: ok, sum: entrySum(e)})
			}
		}()
	}

	appenders := make([]*client.Client, f.appenders)
	for i := range appenders {
		if appenders[i], err = dial(); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "appending %d-byte records at %d/s from %d clients for %v; %d subscribers follow from position 0\n",
		f.recordBytes, f.rate, f.appenders, f.duration, f.subscribers)

	// How much of the run the cluster speculated: its leader makes eager
	// cuts where fills would cost more than speculation saves.
	var spec0, spec1 bench.Counters
	if md.Speculative() {
		if spec0, err = bench.SpecCounters(devcluster.DefaultOrderingReplicas); err != nil {
			return err
		}
	}
	appendLat := bench.NewLatency()
	var (
		acksMu sync.Mutex
		acks   = map[demoRecord]uint64{} // record -> position
		// unordered: the cluster acknowledges appends before it orders
		// them (lazy order), so acks carries no positions.
		unordered atomic.Bool
		failed    atomic.Int64
		firstErr  atomic.Pointer[error]
		pending   sync.WaitGroup
		gens      sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(f.duration)
	sched := bench.Schedule{Start: start, Rate: f.rate}
	for i, cl := range appenders {
		gens.Add(1)
		go func() {
			defer gens.Done()
			pacer := bench.NewPacer(sched, i, f.appenders)
			alarm := bench.NewAlarm()
			defer alarm.Close()
			for seq := uint64(0); ; seq++ {
				at := pacer.Next()
				if !at.Before(end) {
					return
				}
				if alarm.SleepUntil(ctx, at) != nil {
					return
				}
				rec := demoRecord{appender: uint32(i), seq: seq}
				payload := make([]byte, f.recordBytes)
				encodeDemo(payload, at, rec)
				pending.Add(1)
				cl.AppendAsync(ctx, client.Record{Payload: payload}, func(a client.Ack, err error) {
					defer pending.Done()
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, &err)
						return
					}
					appendLat.Record(time.Since(at))
					acksMu.Lock()
					acks[rec] = a.Position
					acksMu.Unlock()
					if a.Unordered {
						unordered.Store(true)
					}
				})
			}
		}()
	}
	gens.Wait()
	if err := waitGroup(ctx, &pending, demoDrainTimeout); err != nil {
		return fmt.Errorf("waiting for the last acks: %w", err)
	}
	if md.Speculative() {
		if spec1, err = bench.SpecCounters(devcluster.DefaultOrderingReplicas); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if len(acks) == 0 {
		if e := firstErr.Load(); e != nil {
			return fmt.Errorf("no append succeeded: %w", *e)
		}
		return errors.New("no append succeeded")
	}
	last := int64(-1)
	for _, pos := range acks {
		last = max(last, int64(pos))
	}
	if unordered.Load() {
		// Every acknowledged append lies below the durable tail.
		tail, err := appenders[0].CheckTail(ctx)
		if err != nil {
			return fmt.Errorf("check tail: %w", err)
		}
		last = int64(tail) - 1
	}
	for _, s := range subs {
		s.setTarget(last)
	}
	drain := time.NewTimer(demoDrainTimeout)
	defer drain.Stop()
	for i, s := range subs {
		select {
		case <-s.reached:
		case <-drain.C:
			s.mu.Lock()
			got := s.last
			s.mu.Unlock()
			return fmt.Errorf("subscriber %d reached position %d, not %d, within %v", i+1, got, last, demoDrainTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	stopSubs()
	subsDone.Wait()

	// Summary.
	n := int64(len(acks))
	fmt.Fprintln(out)
	fmt.Fprintf(out, "appends           %d acknowledged in %.2fs: %.0f appends/s (offered %d/s)", n, f.duration.Seconds(), float64(n)/f.duration.Seconds(), f.rate)
	if k := failed.Load(); k > 0 {
		fmt.Fprintf(out, ", %d FAILED (first: %v)", k, *firstErr.Load())
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "append latency    p50 %-9s p99 %-9s (append start -> ack)\n",
		fmtLatency(appendLat.Quantile(0.5)), fmtLatency(appendLat.Quantile(0.99)))
	if md.Speculative() {
		fmt.Fprintf(out, "delivery latency  p50 %-9s p99 %-9s speculative (append start -> record delivered, position predicted)\n",
			fmtLatency(specDelivery.Quantile(0.5)), fmtLatency(specDelivery.Quantile(0.99)))
		fmt.Fprintf(out, "                  p50 %-9s p99 %-9s confirmed only, as eager order delivers (append start -> record delivered)\n",
			fmtLatency(delivery.Quantile(0.5)), fmtLatency(delivery.Quantile(0.99)))
		fmt.Fprintf(out, "confirm latency   p50 %-9s p99 %-9s speculative (append start -> confirm_spec covers it)\n",
			fmtLatency(confirm.Quantile(0.5)), fmtLatency(confirm.Quantile(0.99)))
		rollbacks := 0
		for _, s := range subs {
			rollbacks += s.rollbacks
		}
		fmt.Fprintf(out, "misspeculations   %d fail_spec events (fix-ante ordering predicts right unless a whole shard fails)\n", rollbacks)
		if pct := bench.PredeterminedPercent(spec0, spec1); pct != nil {
			perInterval := float64(f.rate) / float64(f.shards) * dc.Config().OrderingInterval.D().Seconds()
			printSpeculation(out, *pct, perInterval)
		}
	} else {
		fmt.Fprintf(out, "delivery latency  p50 %-9s p99 %-9s (append start -> subscriber receives)\n",
			fmtLatency(delivery.Quantile(0.5)), fmtLatency(delivery.Quantile(0.99)))
	}

	if unordered.Load() {
		cl := appenders[0]
		if st, err := cl.Status(ctx); err == nil && st.GetLazy() != nil {
			reps, _ := cl.SequencingStatus(ctx)
			var stable uint64
			for _, q := range reps {
				stable = max(stable, q.GetStableGp())
			}
			fmt.Fprintf(out, "sequencing        view %d, %d replicas, stable-gp %d (appends are acknowledged before they are ordered)\n",
				st.GetLazy().GetView(), len(st.GetLazy().GetReplicas()), stable)
		}
	}
	return checkDemoSequences(out, subs, acks, unordered.Load(), failed.Load())
}

// printSpeculation says how much of the run the cluster speculated: pct of
// its cuts were predetermined by lease windows, with perInterval records
// per shard per ordering interval offered.
func printSpeculation(out io.Writer, pct, perInterval float64) {
	fmt.Fprintf(out, "speculation       %.0f%% of the cuts were predetermined by lease windows\n", pct)
	if pct >= 50 {
		return
	}
	fmt.Fprintf(out, "                  at the %.1f records per shard per ordering interval offered, cuts would wait for\n", perInterval)
	fmt.Fprintln(out, "                  shards to fill their empty slots with no-ops, which costs more than speculation")
	fmt.Fprintln(out, "                  saves: the leader made eager cuts for most of the run, and most deliveries came")
	fmt.Fprintln(out, "                  when eager order makes them (one shard, or more records per shard, speculates:")
	fmt.Fprintln(out, "                  try --shards 1)")
}

// demoEvents subscribes from position 0: speculatively, or to confirmed
// records only (on an eager cluster, a plain subscription).
func demoEvents(ctx context.Context, cl *client.Client, speculative bool) (func(context.Context) (client.Event, error), func(), error) {
	st, err := cl.Status(ctx)
	if err != nil {
		return nil, nil, err
	}
	if !mode.FromStatus(st).Speculative() {
		sub, err := cl.Subscribe(ctx, 0, client.Filter{})
		if err != nil {
			return nil, nil, err
		}
		next := func(ctx context.Context) (client.Event, error) {
			e, err := sub.Next(ctx)
			return client.Event{Kind: client.EventDeliver, Entry: e, Position: e.Position}, err
		}
		return next, sub.Close, nil
	}
	sub, err := cl.SubscribeSpec(ctx, 0, client.Filter{}, !speculative)
	if err != nil {
		return nil, nil, err
	}
	return sub.Next, sub.Close, nil
}

// checkDemoSequences verifies that every subscriber received the same
// sequence and that it holds every acknowledged record at its position.
func checkDemoSequences(out io.Writer, subs []*demoSub, acks map[demoRecord]uint64, unordered bool, failed int64) error {
	for i, s := range subs {
		if s.err != nil {
			return s.err
		}
		if i > 0 {
			if err := sameSequence(subs[0].entries, s.entries); err != nil {
				return fmt.Errorf("subscribers 1 and %d differ: %w", i+1, err)
			}
		}
	}
	seq := subs[0].entries
	at := make(map[uint64]demoEntry, len(seq))
	for i, e := range seq {
		if i > 0 && e.pos <= seq[i-1].pos {
			return fmt.Errorf("positions go backwards: %d after %d", e.pos, seq[i-1].pos)
		}
		at[e.pos] = e
	}
	if unordered {
		held := make(map[demoRecord]int, len(seq))
		for _, e := range seq {
			if e.ok {
				held[e.rec]++
			}
		}
		for rec := range acks {
			if held[rec] != 1 {
				return fmt.Errorf("record %v was acknowledged but the subscribers received it %d times", rec, held[rec])
			}
		}
		acks = nil
	}
	for rec, pos := range acks {
		e, ok := at[pos]
		if !ok {
			return fmt.Errorf("record %v was acknowledged at position %d but no subscriber received that position", rec, pos)
		}
		if !e.ok || e.rec != rec {
			return fmt.Errorf("position %d holds %v, but %v was acknowledged there", pos, e.rec, rec)
		}
	}
	digest := sha256.New()
	for _, e := range seq {
		digest.Write(e.sum[:])
	}
	dense := "dense"
	if len(seq) > 0 && seq[len(seq)-1].pos-seq[0].pos+1 != uint64(len(seq)) {
		dense = "with gaps"
	}
	fmt.Fprintf(out, "subscribers       all %d received the identical sequence: %d records, positions %d..%d (%s), sha256 %x\n",
		len(subs), len(seq), seq[0].pos, seq[len(seq)-1].pos, dense, digest.Sum(nil)[:8])
	if unordered {
		fmt.Fprintf(out, "                  every acknowledged record is in it exactly once\n")
	} else {
		fmt.Fprintf(out, "                  every acknowledged record is at its acknowledged position\n")
	}
	fmt.Fprintf(out, "sequence          %s\n", showSequence(seq))
	if failed > 0 {
		return fmt.Errorf("%d appends failed", failed)
	}
	return nil
}

func sameSequence(a, b []demoEntry) error {
	for i := range min(len(a), len(b)) {
		if a[i].pos != b[i].pos || a[i].shard != b[i].shard || a[i].sum != b[i].sum {
			return fmt.Errorf("entry %d: position %d shard %d (%v) vs position %d shard %d (%v)",
				i, a[i].pos, a[i].shard, a[i].rec, b[i].pos, b[i].shard, b[i].rec)
		}
	}
	if len(a) != len(b) {
		return fmt.Errorf("%d entries vs %d", len(a), len(b))
	}
	return nil
}

// showSequence prints the first and last entries as position:shard:record.
func showSequence(seq []demoEntry) string {
	show := func(es []demoEntry) string {
		var parts []string
		for _, e := range es {
			parts = append(parts, fmt.Sprintf("%d:s%d:%v", e.pos, e.shard, e.rec))
		}
		return strings.Join(parts, " ")
	}
	if len(seq) <= 2*demoShowEntries {
		return show(seq)
	}
	return show(seq[:demoShowEntries]) + " ... " + show(seq[len(seq)-demoShowEntries:])
}

func entrySum(e client.Entry) [sha256.Size]byte {
	h := sha256.New()
	var hdr [12]byte
	binary.BigEndian.PutUint64(hdr[0:8], e.Position)
	binary.BigEndian.PutUint32(hdr[8:12], e.Shard)
	h.Write(hdr[:])
	h.Write([]byte(e.Record.Key))
	h.Write(e.Record.Payload)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

func fmtLatency(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
}

// waitGroup waits for wg, at most timeout or until ctx ends.
func waitGroup(ctx context.Context, wg *sync.WaitGroup, timeout time.Duration) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("still waiting after %v", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}
