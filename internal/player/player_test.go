package player

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// harness drives one Core by hand.
type harness struct {
	t *testing.T
	c *Core
}

func cfgOf(targets int, route Route) Config {
	cfg := Config{Route: route, BatchEntriesMax: 4, BatchBytesMax: 1 << 10, QueueEntriesMax: 4, QueueBytesMax: 1 << 10, InflightBatchesMax: 2}
	for i := range targets {
		cfg.Targets = append(cfg.Targets, fmt.Sprintf("t%d", i))
	}
	return cfg
}

// start returns a harness whose core restarted with lastApplied, and the
// restart's output.
func start(t *testing.T, cfg Config, lastApplied map[TargetID]Index) (*harness, Output) {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, c: c}
	return h, h.step(PlayerRestart{LastApplied: lastApplied})
}

func allAt(n int, ix Index) map[TargetID]Index {
	m := map[TargetID]Index{}
	for i := range n {
		m[TargetID(i)] = ix
	}
	return m
}

// step feeds ev and returns a copy of the output.
func (h *harness) step(ev Event) Output {
	out := h.c.Step(ev)
	return Output{
		StartMain:     out.StartMain,
		StopRecovery:  slices.Clone(out.StopRecovery),
		StartRecovery: slices.Clone(out.StartRecovery),
		Sends:         slices.Clone(out.Sends),
		Releases:      slices.Clone(out.Releases),
		Flow:          slices.Clone(out.Flow),
		Misbehaving:   slices.Clone(out.Misbehaving),
	}
}

// main hands the main stream's entry ix, tagged for targets ts under
// RouteTags.
func (h *harness) main(ix Index, ts ...int) Output {
	return h.step(EntryFetched{Stream: Main, Entry: entry(ix, ts...)})
}

func entry(ix Index, ts ...int) Entry {
	e := Entry{Index: ix, Key: fmt.Sprint("k", ix), Payload: []byte{byte(ix)}}
	for _, t := range ts {
		e.Tags = append(e.Tags, fmt.Sprintf("%st%d", TargetTagPrefix, t))
	}
	return e
}

// sends renders the output's sends as "t<target>@<term>[indices]", empty
// messages with a trailing e.
func sends(out Output) string {
	var s []string
	for _, snd := range out.Sends {
		var ixs []string
		for _, m := range snd.Batch.Messages {
			x := fmt.Sprint(m.Index)
			if m.Empty {
				x += "e"
			}
			ixs = append(ixs, x)
		}
		s = append(s, fmt.Sprintf("t%d@%d%v", snd.Target, snd.Term, ixs))
	}
	return strings.Join(s, " ")
}

func (h *harness) wantSends(out Output, want string) {
	h.t.Helper()
	if got := sends(out); got != want {
		h.t.Fatalf("sends %q, want %q", got, want)
	}
}

// TestRoutes checks the three routing rules.
func TestRoutes(t *testing.T) {
	r := newRouter(cfgOf(3, RouteTags))
	e := Entry{Index: 1, Tags: []string{"target:t2", "other", "target:nope", "target:t0", "target:t2"}}
	if got := r.targets(&e); !slices.Equal(got, []TargetID{0, 2}) {
		t.Fatalf("tags route to %v, want [0 2]", got)
	}
	r = newRouter(cfgOf(3, RouteAll))
	if got := r.targets(&e); !slices.Equal(got, []TargetID{0, 1, 2}) {
		t.Fatalf("all routes to %v", got)
	}
	r = newRouter(cfgOf(3, RouteKeyHash))
	seen := map[TargetID]bool{}
	for i := range 100 {
		e := Entry{Key: fmt.Sprint("key", i)}
		got := r.targets(&e)
		if len(got) != 1 || !slices.Equal(r.targets(&e), got) {
			t.Fatalf("key %q routes to %v", e.Key, got)
		}
		seen[got[0]] = true
	}
	if len(seen) != 3 {
		t.Fatalf("100 keys hashed onto %d of 3 targets", len(seen))
	}
	for _, route := range []Route{RouteKeyHash, RouteTags, RouteAll} {
		r := newRouter(cfgOf(3, route))
		noop := Entry{Index: 1, Key: "k", Tags: []string{"target:t0"}, Noop: true}
		if got := r.targets(&noop); len(got) != 0 {
			t.Fatalf("route %d sends a no-op to %v", route, got)
		}
	}
}

// TestNoopAdvancesMain: a no-op position goes to nobody, but the main
// stream passes it, so the next entry follows it.
func TestNoopAdvancesMain(t *testing.T) {
	h, _ := start(t, cfgOf(1, RouteAll), allAt(1, 0))
	if out := h.step(EntryFetched{Stream: Main, Entry: Entry{Index: 1, Noop: true}}); len(out.Sends) != 0 {
		t.Fatalf("a no-op was sent: %s", sends(out))
	}
	h.wantSends(h.main(2), "t0@1[2]")
	if h.c.CurrentIndex() != 2 {
		t.Fatalf("current index %d, want 2", h.c.CurrentIndex())
	}
}

// TestDispatchOneWriteAtATime checks Algorithm 3's sendNext and Algorithm
// 4's write case: a target has one write outstanding, the next batch goes
// at its WriteDone, and a WriteDone of an expired term does nothing.
func TestDispatchOneWriteAtATime(t *testing.T) {
	h, out := start(t, cfgOf(2, RouteTags), allAt(2, 0))
	if out.StartMain != 1 {
		t.Fatalf("main stream starts at %d, want 1", out.StartMain)
	}
	h.wantSends(h.main(1, 0, 1), "t0@1[1] t1@1[1]")
	h.wantSends(h.main(2, 0), "")
	h.wantSends(h.main(3, 0), "")
	h.wantSends(h.step(WriteDone{Target: 0, Term: 0}), "")
	h.wantSends(h.step(WriteDone{Target: 0, Term: 1}), "t0@1[2 3]")
	if h.c.CurrentIndex() != 3 {
		t.Fatalf("current index %d, want 3", h.c.CurrentIndex())
	}
}

// TestAckReleasesAndTermRule checks Algorithm 4's read case: an
// acknowledgement releases every batch up to its index, opens the in-flight
// window, and one of an expired term is ignored.
func TestAckReleasesAndTermRule(t *testing.T) {
	cfg := cfgOf(1, RouteAll)
	cfg.BatchEntriesMax = 1
	h, _ := start(t, cfg, allAt(1, 0))
	h.main(1)
	h.step(WriteDone{Target: 0, Term: 1})
	h.main(2)
	h.step(WriteDone{Target: 0, Term: 1})
	// Two batches in flight: the window is full.
	h.wantSends(h.main(3), "")
	if st := h.c.Status(0); st.Inflight != 2 || st.Queued != 1 {
		t.Fatalf("status %+v, want 2 in flight and 1 queued", st)
	}
	out := h.step(AckReceived{Target: 0, Term: 0, Index: 2})
	if len(out.Releases) != 0 || h.c.Status(0).LastAck != 0 {
		t.Fatal("an acknowledgement of an expired term was taken")
	}
	out = h.step(AckReceived{Target: 0, Term: 1, Index: 2})
	if len(out.Releases) != 2 || out.Releases[1].Batch.Last() != 2 || h.c.Status(0).LastAck != 2 {
		t.Fatalf("released %d batches, last ack %d; want 2 and 2", len(out.Releases), h.c.Status(0).LastAck)
	}
	h.wantSends(out, "t0@1[3]")
	out = h.step(AckReceived{Target: 0, Term: 1, Index: 9})
	if !slices.Equal(out.Misbehaving, []TargetID{0}) {
		t.Fatalf("an acknowledgement of an index never sent: misbehaving %v", out.Misbehaving)
	}
}

// TestBackpressure checks that a full normal queue makes the main fetcher
// wait, that the wait ends when the queue drains, that a suspended target
// never blocks the others, and that an entry fed while waiting is a bug of
// the driver.
func TestBackpressure(t *testing.T) {
	cfg := cfgOf(2, RouteAll)
	cfg.QueueEntriesMax, cfg.BatchEntriesMax, cfg.InflightBatchesMax = 2, 1, 1
	h, _ := start(t, cfg, allAt(2, 0))
	h.main(1) // sent
	h.main(2)
	out := h.main(3)
	if !h.c.MainWait() || !slices.Equal(out.Flow, []Flow{{Stream: Main, Wait: true}}) {
		t.Fatalf("flow %v, main wait %v; want the main fetcher to wait", out.Flow, h.c.MainWait())
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("an entry fed while the main fetcher must wait was taken")
			}
		}()
		h.main(4)
	}()
	h.step(WriteDone{Target: 0, Term: 1})
	h.step(AckReceived{Target: 0, Term: 1, Index: 1}) // t0 sends 2
	if !h.c.MainWait() {
		t.Fatal("the main fetcher stopped waiting while t1's queue is still full")
	}
	out = h.step(TargetDown{Target: 1})
	if h.c.MainWait() || !slices.Equal(out.Flow, []Flow{{Stream: Main, Wait: false}}) {
		t.Fatalf("flow %v: a suspended target still blocks the main fetcher", out.Flow)
	}
	if len(out.Releases) != 1 {
		t.Fatalf("suspending t1 released %d batches, want its 1 in flight", len(out.Releases))
	}
}

// TestTargetRecovery checks Algorithm 5's target restart: a new term, a
// recovery fetch of exactly (last applied, current index], catch-up entries
// before the main stream's, entries and completions of the expired term
// dropped, and a return to Normal once the catch-up queue drains.
func TestTargetRecovery(t *testing.T) {
	cfg := cfgOf(2, RouteTags)
	cfg.BatchEntriesMax = 10
	h, _ := start(t, cfg, allAt(2, 0))
	h.main(1, 0, 1)
	h.step(WriteDone{Target: 1, Term: 1})
	out := h.step(TargetDown{Target: 1})
	if len(out.Releases) != 1 {
		t.Fatalf("down released %d batches, want 1", len(out.Releases))
	}
	h.main(2, 1)
	h.main(3, 0)
	out = h.step(TargetUp{Target: 1, LastApplied: 0})
	want := []RecoveryFetch{{Target: 1, Term: 2, From: 1, To: 3}}
	if !slices.Equal(out.StartRecovery, want) || h.c.Term(1) != 2 || h.c.Status(1).State != RecoveryFetching {
		t.Fatalf("recovery %v, term %d, state %v; want %v, 2, recovery-fetching", out.StartRecovery, h.c.Term(1), h.c.Status(1).State, want)
	}
	// Main-stream entries wait in the normal queue behind the catch-up.
	h.wantSends(h.main(4, 1), "")
	h.wantSends(h.step(EntryFetched{Stream: Recovery, Target: 1, Term: 2, Entry: entry(1, 0, 1)}), "t1@2[1]")
	// An entry of an expired term, and one not routed to the target, are
	// dropped.
	h.step(EntryFetched{Stream: Recovery, Target: 1, Term: 1, Entry: entry(2, 1)})
	h.step(EntryFetched{Stream: Recovery, Target: 1, Term: 2, Entry: entry(2, 1)})
	h.step(EntryFetched{Stream: Recovery, Target: 1, Term: 2, Entry: entry(3, 0)})
	if st := h.c.Status(1); st.Queued != 2 {
		t.Fatalf("t1 queues %d, want entry 2 in catch-up and 4 in normal", st.Queued)
	}
	h.step(RecoveryFetchDone{Target: 1, Term: 1})
	if h.c.Status(1).State != RecoveryFetching {
		t.Fatal("the done of an expired fetch ended the recovery")
	}
	h.step(RecoveryFetchDone{Target: 1, Term: 2})
	if h.c.Status(1).State != FetchingCompleted {
		t.Fatalf("state %v, want fetching-completed", h.c.Status(1).State)
	}
	// Entry 3 was not t1's: an empty message at the range's end advances t1
	// past it, then the normal queue follows.
	h.wantSends(h.step(WriteDone{Target: 1, Term: 2}), "t1@2[2 3e 4]")
	if h.c.Status(1).State != Normal {
		t.Fatalf("state %v after the catch-up drained, want normal", h.c.Status(1).State)
	}
}

// TestTargetUpNothingMissed checks that a target that missed nothing goes
// straight back to Normal under its new term, with no recovery fetch, and
// that a target going down again stops its recovery fetch.
func TestTargetUpNothingMissed(t *testing.T) {
	h, _ := start(t, cfgOf(1, RouteAll), allAt(1, 0))
	h.main(1)
	h.step(TargetDown{Target: 0})
	out := h.step(TargetUp{Target: 0, LastApplied: 1})
	if len(out.StartRecovery) != 0 || h.c.Status(0).State != Normal || h.c.Term(0) != 2 {
		t.Fatalf("recovery %v, state %v, term %d", out.StartRecovery, h.c.Status(0).State, h.c.Term(0))
	}
	h.wantSends(h.main(2), "t0@2[2]")
	h.step(TargetDown{Target: 0})
	h.step(TargetUp{Target: 0, LastApplied: 1})
	out = h.step(TargetDown{Target: 0})
	if want := []RecoveryFetch{{Target: 0, Term: 3, From: 2, To: 2}}; !slices.Equal(out.StopRecovery, want) {
		t.Fatalf("stop %v, want %v", out.StopRecovery, want)
	}
}

// TestPlayerRestart checks Algorithm 5's player restart: the main stream
// starts after the smallest last applied index, a target skips what it
// already applied, and a target that did not answer starts suspended and
// recovers when it comes up.
func TestPlayerRestart(t *testing.T) {
	h, out := start(t, cfgOf(3, RouteAll), map[TargetID]Index{0: 5, 1: 3})
	if out.StartMain != 4 || h.c.Status(2).State != Suspended {
		t.Fatalf("start %d, t2 %v; want 4 and suspended", out.StartMain, h.c.Status(2).State)
	}
	h.wantSends(h.main(4), "t1@1[4]")
	h.main(5)
	h.wantSends(h.main(6), "t0@1[6]")
	out = h.step(TargetUp{Target: 2, LastApplied: 1})
	if want := []RecoveryFetch{{Target: 2, Term: 2, From: 2, To: 6}}; !slices.Equal(out.StartRecovery, want) {
		t.Fatalf("recovery %v, want %v", out.StartRecovery, want)
	}
}

// TestEmptyMessages checks the empty messages of Algorithm 5: after every E
// main-stream entries, a target that had nothing to apply in the last E
// gets one at the current index; a busy one does not.
func TestEmptyMessages(t *testing.T) {
	cfg := cfgOf(2, RouteTags)
	cfg.EmptyEvery = 2
	h, _ := start(t, cfg, allAt(2, 0))
	h.wantSends(h.main(1, 0), "t0@1[1]")
	h.wantSends(h.main(2, 0), "t1@1[2e]")
	h.step(WriteDone{Target: 1, Term: 1})
	h.main(3, 1)
	h.step(WriteDone{Target: 1, Term: 1})
	h.wantSends(h.main(4, 0), "")
	h.main(5)
	h.step(WriteDone{Target: 1, Term: 1})
	h.step(AckReceived{Target: 1, Term: 1, Index: 3})
	h.wantSends(h.main(6), "t1@1[6e]")
}

// TestConfigValidate checks that every bound is checked together.
func TestConfigValidate(t *testing.T) {
	if err := (Config{Targets: []string{"a"}}).WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	err := Config{Targets: []string{"a", "a", ""}, Route: 9}.Validate()
	for _, want := range []string{"listed twice", "empty name", "unknown route", "BatchEntriesMax", "InflightBatchesMax"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want it to mention %q", err, want)
		}
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New took a config with no targets")
	}
}

// TestLateCompletionsAfterReconnect checks the term rule on completions: a
// write completion and an acknowledgement of the connection before a
// reconnect arrive late and change nothing, a batch is released only when
// acknowledged, and the new connection still has one write outstanding at
// a time.
func TestLateCompletionsAfterReconnect(t *testing.T) {
	h, _ := start(t, cfgOf(1, RouteAll), allAt(1, 0))
	h.wantSends(h.main(1), "t0@1[1]")
	if out := h.step(WriteDone{Target: 0, Term: 1}); len(out.Releases) != 0 || h.c.Status(0).Inflight != 1 {
		t.Fatal("a batch was released when written, before its acknowledgement")
	}
	h.step(TargetDown{Target: 0})
	h.step(TargetUp{Target: 0, LastApplied: 1})
	h.wantSends(h.main(2), "t0@2[2]")
	for _, ev := range []Event{WriteDone{Target: 0, Term: 1}, AckReceived{Target: 0, Term: 1, Index: 1}} {
		out := h.step(ev)
		if len(out.Sends)+len(out.Releases)+len(out.Misbehaving) != 0 {
			t.Fatalf("late %T of term 1 acted: %+v", ev, out)
		}
	}
	h.wantSends(h.main(3), "")
	if st := h.c.Status(0); st.LastAck != 1 || st.Inflight != 1 || st.Queued != 1 {
		t.Fatalf("status %+v, want last ack 1, 1 in flight, 1 queued", st)
	}
	h.wantSends(h.step(WriteDone{Target: 0, Term: 2}), "t0@2[3]")
}
