// Package playerd is augur's player server: it drives the pure core of
// internal/player with real fetchers (the Go SDK), real target streams (the
// Target gRPC service) and a health checker. The goroutines map onto the
// paper's completion-queue design as the player package's doc describes:
// one event loop owns the core; the main fetcher, one recovery fetcher per
// recovering target, and one writer and one reader per connected target
// turn blocking calls into events on channels the loop reads.
package playerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/metrics"
	"github.com/augur-log/augur/internal/player"
)

// Defaults for the server's named bounds.
const (
	// DefaultAckTimeout: a target that holds unacknowledged batches and
	// acknowledges none for this long is taken for down (a stuck apply, a
	// half-open connection) and recovers on a fresh stream.
	DefaultAckTimeout = 5 * time.Second
	// DefaultFullTimeout: a target whose normal queue stays full for this
	// long, holding the main stream back for every other target, is
	// suspended; it catches up through a recovery fetch instead.
	DefaultFullTimeout = 10 * time.Second
	// DefaultConnectTimeout bounds one LastApplied call of a (re)connect.
	DefaultConnectTimeout = 2 * time.Second
	// DefaultReconnectMin and DefaultReconnectMax bound the backoff between
	// connection attempts to a down target.
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 5 * time.Second
	// DefaultRecoveryChunk is how many positions a recovery fetcher reads
	// at a time: the most it holds in memory for one target.
	DefaultRecoveryChunk = 256
	// fetchRetry paces a fetcher's retries after the log refused it.
	fetchRetry = 200 * time.Millisecond
	// eventsBuffer lets the fetchers and stream goroutines run a little
	// ahead of the loop.
	eventsBuffer = 1024
)

// TargetSpec names one target and where its Target service listens.
type TargetSpec struct {
	Name string `yaml:"name"`
	Addr string `yaml:"addr"`
}

// Config configures a Server.
type Config struct {
	Targets []TargetSpec
	// Core holds the routing and the core's bounds; its Targets are filled
	// from Targets.
	Core           player.Config
	AckTimeout     time.Duration
	FullTimeout    time.Duration
	ConnectTimeout time.Duration
	ReconnectMin   time.Duration
	ReconnectMax   time.Duration
	RecoveryChunk  int
	// Creds secure the connections to the targets; nil is plaintext.
	Creds credentials.TransportCredentials
}

func (c Config) withDefaults() Config {
	c.Core.Targets = c.Core.Targets[:0:0]
	for _, t := range c.Targets {
		c.Core.Targets = append(c.Core.Targets, t.Name)
	}
	c.Core = c.Core.WithDefaults()
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&c.AckTimeout, DefaultAckTimeout}, {&c.FullTimeout, DefaultFullTimeout},
		{&c.ConnectTimeout, DefaultConnectTimeout},
		{&c.ReconnectMin, DefaultReconnectMin}, {&c.ReconnectMax, DefaultReconnectMax},
	} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if c.RecoveryChunk <= 0 {
		c.RecoveryChunk = DefaultRecoveryChunk
	}
	return c
}

// Server is one run of the player.
type Server struct {
	cfg  Config
	log  Log
	core *player.Core
	ts   []*target
	// events carries every completion to the loop; mainCh the main
	// stream's entries, read only while the core lets the main fetcher go.
	events chan event
	mainCh chan player.Entry
	ctx    context.Context
	wg     sync.WaitGroup
	status atomic.Pointer[Status]
}

// target is the loop's view of one target.
type target struct {
	id     player.TargetID
	spec   TargetSpec
	cc     *grpc.ClientConn
	client pb.TargetClient
	// up is set while a stream opened under term is bound; sendCh feeds its
	// writer and cancel closes it.
	up     bool
	term   player.Term
	sendCh chan player.Send
	cancel context.CancelFunc
	// connecting is set while a connection attempt is under way; backoff
	// is the delay before the next one.
	connecting bool
	backoff    time.Duration
	// waitingAck is set while batches are unacknowledged; lastProgress is
	// when the target last acknowledged, or when it started owing one.
	waitingAck   bool
	lastProgress time.Time
	// fullSince is when the normal queue was first seen full, zero when
	// it is not.
	fullSince time.Time
	rec       *recovery
	lastAck   player.Index
}

// recovery is a running recovery fetch. The fetcher hands over one chunk of
// entries at a time and waits on more; the loop feeds the chunk to the core
// while the core lets it, then asks for more.
type recovery struct {
	term   player.Term
	cancel context.CancelFunc
	more   chan struct{}
	chunk  []client.Entry
	have   bool
	pos    int
}

type eventKind uint8

const (
	evWriteDone eventKind = iota
	evAck
	evBroken
	evConnected
	evConnectFailed
	evRecChunk
	evRecDone
)

type event struct {
	kind    eventKind
	id      player.TargetID
	term    player.Term
	index   player.Index
	err     error
	conn    *conn
	entries []client.Entry
}

// conn is a fresh connection: the target's LastApplied answer and the Apply
// stream opened after it.
type conn struct {
	lastApplied player.Index
	stream      pb.Target_ApplyClient
	cancel      context.CancelFunc
}

// New checks cfg and returns a server reading log.
func New(cfg Config, log Log) (*Server, error) {
	cfg = cfg.withDefaults()
	core, err := player.New(cfg.Core)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, core: core, events: make(chan event, eventsBuffer), mainCh: make(chan player.Entry)}
	for i, spec := range cfg.Targets {
		if spec.Addr == "" {
			return nil, fmt.Errorf("target %q has no address", spec.Name)
		}
		// gRPC's own reconnect backoff (1 s growing to 2 min) would delay a
		// returning target long after this server's backoff asks for it.
		creds := cfg.Creds
		if creds == nil {
			creds = insecure.NewCredentials()
		}
		cc, err := grpc.NewClient(spec.Addr, grpc.WithTransportCredentials(creds),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: cfg.ReconnectMin, Multiplier: 2, Jitter: 0.2, MaxDelay: cfg.ReconnectMax},
				MinConnectTimeout: cfg.ConnectTimeout,
			}))
		if err != nil {
			s.closeConns()
			return nil, fmt.Errorf("target %q: %w", spec.Name, err)
		}
		s.ts = append(s.ts, &target{id: player.TargetID(i), spec: spec, cc: cc, client: pb.NewTargetClient(cc), backoff: cfg.ReconnectMin})
	}
	s.publish()
	return s, nil
}

func (s *Server) closeConns() {
	for _, t := range s.ts {
		t.cc.Close()
	}
}

// Run plays the log to the targets until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	s.ctx = ctx
	defer func() {
		cancel()
		s.wg.Wait()
		s.closeConns()
	}()

	// Algorithm 5's player restart: ask every target where it stands.
	conns := make([]*conn, len(s.ts))
	var wg sync.WaitGroup
	for i, t := range s.ts {
		wg.Go(func() {
			c, err := s.connect(ctx, t)
			if err != nil {
				slog.Warn("player: target not up at start", "target", t.spec.Name, "err", err)
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	la := map[player.TargetID]player.Index{}
	for i, c := range conns {
		if c != nil {
			la[player.TargetID(i)] = c.lastApplied
		}
	}
	out := s.core.Step(player.PlayerRestart{LastApplied: la})
	for i, c := range conns {
		if c != nil {
			s.bind(s.ts[i], c)
		} else {
			s.scheduleConnect(s.ts[i], 0)
		}
	}
	s.apply(out)
	s.publish()
	slog.Info("player started", "main_from", s.core.CurrentIndex()+1, "targets_up", len(la))

	tick := time.NewTicker(min(s.cfg.AckTimeout, s.cfg.FullTimeout) / 4)
	defer tick.Stop()
	for {
		var mainCh chan player.Entry
		if !s.core.MainWait() {
			mainCh = s.mainCh
		}
		select {
		case <-ctx.Done():
			for _, t := range s.ts {
				if t.up {
					t.cancel()
				}
				if t.rec != nil {
					t.rec.cancel()
				}
			}
			return nil
		case e := <-mainCh:
			s.step(player.EntryFetched{Stream: player.Main, Entry: e})
		case ev := <-s.events:
			s.handle(ev)
		case now := <-tick.C:
			s.health(now)
			s.publish()
		}
		s.feedRecoveries()
	}
}

// step feeds the core one event and carries out its output.
func (s *Server) step(ev player.Event) { s.apply(s.core.Step(ev)) }

// apply carries out an Output in the order its fields' comments ask.
func (s *Server) apply(out *player.Output) {
	if out.StartMain != 0 {
		from := uint64(out.StartMain - 1)
		s.wg.Go(func() { s.mainFetcher(from) })
	}
	for _, f := range out.StopRecovery {
		if t := s.ts[f.Target]; t.rec != nil && t.rec.term == f.Term {
			t.rec.cancel()
			t.rec = nil
		}
	}
	for _, f := range out.StartRecovery {
		s.startRecovery(f)
	}
	now := time.Now()
	for _, snd := range out.Sends {
		t := s.ts[snd.Target]
		if !t.up || t.term != snd.Term {
			continue
		}
		select {
		case t.sendCh <- snd:
		default:
			panic("playerd: a target's writer has more sends than the core allows in flight")
		}
		if !t.waitingAck {
			t.waitingAck, t.lastProgress = true, now
		}
		metrics.PlayerEntriesSent.WithLabelValues(t.spec.Name).Add(float64(len(snd.Batch.Messages)))
	}
	if len(out.Misbehaving) == 0 {
		return
	}
	// down steps the core again, which reuses out: copy the ids first.
	bad := append([]player.TargetID(nil), out.Misbehaving...)
	for _, id := range bad {
		s.down(s.ts[id], errors.New("acknowledged an index it was never sent"))
	}
}

func (s *Server) handle(ev event) {
	t := s.ts[ev.id]
	live := t.up && t.term == ev.term
	switch ev.kind {
	case evWriteDone:
		s.step(player.WriteDone{Target: ev.id, Term: ev.term})
	case evAck:
		if live {
			t.lastProgress = time.Now()
			metrics.PlayerBatchesAcked.WithLabelValues(t.spec.Name).Inc()
		}
		s.step(player.AckReceived{Target: ev.id, Term: ev.term, Index: ev.index})
		if live {
			t.waitingAck = s.core.Status(ev.id).Inflight > 0
		}
	case evBroken:
		if live {
			s.down(t, ev.err)
		}
	case evConnected:
		t.connecting = false
		if t.up {
			ev.conn.cancel()
			return
		}
		out := s.core.Step(player.TargetUp{Target: ev.id, LastApplied: ev.conn.lastApplied})
		// Bind the stream to the new term before carrying out the output,
		// which may already hold sends for it.
		s.bind(t, ev.conn)
		s.apply(out)
		slog.Info("player: target up", "target", t.spec.Name, "term", t.term, "last_applied", ev.conn.lastApplied)
	case evConnectFailed:
		t.connecting = false
		t.backoff = min(2*t.backoff, s.cfg.ReconnectMax)
		s.scheduleConnect(t, t.backoff)
	case evRecChunk:
		if t.rec != nil && t.rec.term == ev.term {
			t.rec.chunk, t.rec.have, t.rec.pos = ev.entries, true, 0
		}
	case evRecDone:
		if t.rec != nil && t.rec.term == ev.term {
			t.rec.cancel()
			t.rec = nil
			s.step(player.RecoveryFetchDone{Target: ev.id, Term: ev.term})
		}
	}
}

// bind makes c the target's stream under the core's current term and
// starts its writer and reader.
func (s *Server) bind(t *target, c *conn) {
	t.up, t.term, t.cancel = true, s.core.Term(t.id), c.cancel
	t.sendCh = make(chan player.Send, s.cfg.Core.InflightBatchesMax)
	t.waitingAck, t.fullSince, t.backoff = false, time.Time{}, s.cfg.ReconnectMin
	metrics.PlayerTargetUp.WithLabelValues(t.spec.Name).Set(1)
	id, term, ch, prev := t.id, t.term, t.sendCh, uint64(c.lastApplied)
	s.wg.Go(func() { s.writer(c, id, term, ch, prev) })
	s.wg.Go(func() { s.reader(c, id, term) })
}

// down closes the target's stream, then suspends it in the core, and
// schedules a reconnect: the stream must be closed before TargetDown so
// that nothing it carried is applied after the next LastApplied.
func (s *Server) down(t *target, cause error) {
	if !t.up {
		return
	}
	slog.Warn("player: target down", "target", t.spec.Name, "term", t.term, "err", cause)
	t.cancel()
	t.up, t.sendCh, t.waitingAck = false, nil, false
	if t.rec != nil {
		t.rec.cancel()
		t.rec = nil
	}
	metrics.PlayerTargetUp.WithLabelValues(t.spec.Name).Set(0)
	metrics.PlayerTargetDowns.WithLabelValues(t.spec.Name).Inc()
	s.step(player.TargetDown{Target: t.id})
	s.scheduleConnect(t, t.backoff)
}

// health is the health checker's clock: a target that owes an
// acknowledgement for too long, or whose queue stayed full too long, goes
// down.
func (s *Server) health(now time.Time) {
	for _, t := range s.ts {
		if !t.up {
			continue
		}
		if t.waitingAck && now.Sub(t.lastProgress) > s.cfg.AckTimeout {
			s.down(t, fmt.Errorf("no acknowledgement for %v", s.cfg.AckTimeout))
			continue
		}
		if !s.core.NormalFull(t.id) {
			t.fullSince = time.Time{}
		} else if t.fullSince.IsZero() {
			t.fullSince = now
		} else if now.Sub(t.fullSince) > s.cfg.FullTimeout {
			s.down(t, fmt.Errorf("queue full for %v", s.cfg.FullTimeout))
		}
	}
}

// scheduleConnect starts a connection attempt after delay.
func (s *Server) scheduleConnect(t *target, delay time.Duration) {
	if t.connecting {
		return
	}
	t.connecting = true
	id := t.id
	s.wg.Go(func() {
		if delay > 0 {
			timer := time.NewTimer(delay)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-s.ctx.Done():
				return
			}
		}
		c, err := s.connect(s.ctx, t)
		if err != nil {
			slog.Debug("player: connect failed", "target", t.spec.Name, "err", err)
			s.post(event{kind: evConnectFailed, id: id, err: err})
			return
		}
		if !s.post(event{kind: evConnected, id: id, conn: c}) {
			c.cancel()
		}
	})
}

// connect asks the target where it stands, then opens a stream. It reads
// only t's immutable fields, so it may run off the loop.
func (s *Server) connect(ctx context.Context, t *target) (*conn, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	r, err := t.client.LastApplied(cctx, &pb.LastAppliedRequest{})
	cancel()
	if err != nil {
		return nil, err
	}
	sctx, scancel := context.WithCancel(ctx)
	stream, err := t.client.Apply(sctx)
	if err != nil {
		scancel()
		return nil, err
	}
	return &conn{lastApplied: player.Index(r.Index), stream: stream, cancel: scancel}, nil
}

// post hands ev to the loop; it reports false when the server stopped.
func (s *Server) post(ev event) bool {
	select {
	case s.events <- ev:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// writer writes the target's batches on its stream, one at a time, each
// naming the index the previous one ended at.
func (s *Server) writer(c *conn, id player.TargetID, term player.Term, ch <-chan player.Send, prev uint64) {
	ctx := c.stream.Context()
	for {
		var snd player.Send
		select {
		case snd = <-ch:
		case <-ctx.Done():
			return
		}
		// One slab of entries per batch rather than one allocation each.
		slab := make([]pb.TargetEntry, len(snd.Batch.Messages))
		msg := &pb.ApplyBatch{PrevIndex: prev, Entries: make([]*pb.TargetEntry, len(slab))}
		for i, m := range snd.Batch.Messages {
			e := &slab[i]
			e.Index, e.Empty, e.Key, e.Payload = uint64(m.Index), m.Empty, m.Key, m.Payload
			msg.Entries[i] = e
		}
		prev = uint64(snd.Batch.Last())
		if err := c.stream.Send(msg); err != nil {
			s.post(event{kind: evBroken, id: id, term: term, err: fmt.Errorf("send: %w", err)})
			return
		}
		if !s.post(event{kind: evWriteDone, id: id, term: term}) {
			return
		}
	}
}

// reader turns the stream's acknowledgements into events.
func (s *Server) reader(c *conn, id player.TargetID, term player.Term) {
	for {
		ack, err := c.stream.Recv()
		if err != nil {
			s.post(event{kind: evBroken, id: id, term: term, err: fmt.Errorf("receive: %w", err)})
			return
		}
		if !s.post(event{kind: evAck, id: id, term: term, index: player.Index(ack.Index)}) {
			return
		}
	}
}

// mainFetcher reads the log from position from on and hands every position
// to the loop in order, a no-op for each position the subscription skips.
func (s *Server) mainFetcher(from uint64) {
	ctx := s.ctx
	next := from
	send := func(e player.Entry) bool {
		select {
		case s.mainCh <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		sub, err := s.log.Subscribe(ctx, next)
		if err != nil {
			slog.Warn("player: subscribe", "from", next, "err", err)
			sleep(ctx, fetchRetry)
			continue
		}
		for {
			e, err := sub.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					slog.Warn("player: main stream", "at", next, "err", err)
				}
				break
			}
			if e.Position < next {
				continue
			}
			for ; next < e.Position; next++ {
				if !send(player.Entry{Index: player.Index(next + 1), Noop: true}) {
					sub.Close()
					return
				}
			}
			if !send(entryOf(e)) {
				sub.Close()
				return
			}
			next++
		}
		sub.Close()
		sleep(ctx, fetchRetry)
	}
}

func entryOf(e client.Entry) player.Entry {
	return player.Entry{Index: player.Index(e.Position + 1), Key: e.Record.Key, Tags: e.Record.Tags, Payload: e.Record.Payload}
}

// startRecovery starts the fetcher of f: it reads positions [From-1, To-1]
// chunk by chunk, handing a chunk over only when the loop asked for more.
func (s *Server) startRecovery(f player.RecoveryFetch) {
	t := s.ts[f.Target]
	if t.rec != nil {
		t.rec.cancel()
	}
	ctx, cancel := context.WithCancel(s.ctx)
	rec := &recovery{term: f.Term, cancel: cancel, more: make(chan struct{}, 1)}
	t.rec = rec
	metrics.PlayerRecoveries.WithLabelValues(t.spec.Name).Inc()
	id, chunk := f.Target, uint64(s.cfg.RecoveryChunk)
	pos, end := uint64(f.From-1), uint64(f.To)
	s.wg.Go(func() {
		for pos < end {
			n := min(chunk, end-pos)
			es, err := s.log.ReadRange(ctx, pos, int(n))
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				slog.Warn("player: recovery fetch", "target", id, "from", pos, "err", err)
				sleep(ctx, fetchRetry)
				continue
			}
			if !s.post(event{kind: evRecChunk, id: id, term: f.Term, entries: es}) {
				return
			}
			select {
			case <-rec.more:
			case <-ctx.Done():
				return
			}
			pos += n
		}
		s.post(event{kind: evRecDone, id: id, term: f.Term})
	})
}

// feedRecoveries hands the chunks the recovery fetchers delivered to the
// core, as far as each target's catch-up queue has room.
func (s *Server) feedRecoveries() {
	for _, t := range s.ts {
		for t.rec != nil && t.rec.have && !s.core.RecoveryWait(t.id) {
			rec := t.rec
			if rec.pos == len(rec.chunk) {
				rec.chunk, rec.have = nil, false
				rec.more <- struct{}{}
				break
			}
			e := entryOf(rec.chunk[rec.pos])
			rec.pos++
			s.step(player.EntryFetched{Stream: player.Recovery, Target: t.id, Term: rec.term, Entry: e})
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}
