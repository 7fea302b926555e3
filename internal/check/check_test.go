package check

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// cleanHistory is a correct history: two clients append six records in
// turns (each append returns before the next begins), one no-op sits at
// position 3, and a reader reads two positions.
func cleanHistory() ([]Append, []Read, Log) {
	var appends []Append
	var entries []Entry
	pos := uint64(0)
	for i := range 6 {
		if pos == 3 {
			pos++ // a no-op
		}
		client := uint64(i % 2)
		a := Append{Client: client, Seq: uint64(i / 2), Record: fmt.Sprintf("r%d", i),
			Call: time.Duration(10 * i), Return: time.Duration(10*i + 5), Outcome: Acked, Position: pos, Shard: uint32(i % 2)}
		appends = append(appends, a)
		entries = append(entries, Entry{Pos: pos, Shard: a.Shard, Record: a.Record})
		pos++
	}
	reads := []Read{
		{Client: 2, Pos: 0, Call: 7, Return: 8, Record: "r0"},
		{Client: 2, Pos: 5, Call: 60, Return: 61, Record: entries[4].Record},
	}
	return appends, reads, Log{Reader: "sub", From: 0, End: pos, Entries: entries}
}

// violated fails the test unless err lists a violation of invariant inv.
func violated(t *testing.T, name string, err error, inv int) {
	t.Helper()
	var vs Violations
	if !errors.As(err, &vs) {
		t.Errorf("%s: got %v, want violations of invariant %d", name, err, inv)
		return
	}
	for _, v := range vs {
		if v.Invariant != inv {
			t.Errorf("%s: violation of invariant %d, want %d: %v", name, v.Invariant, inv, v)
		}
	}
	t.Logf("%s: %v", name, err)
}

func TestCleanHistoryPasses(t *testing.T) {
	appends, reads, log := cleanHistory()
	other := log
	other.Reader = "other"
	for name, err := range map[string]error{
		"Returned":     Returned(appends, reads),
		"Acknowledged": Acknowledged(appends, log, other),
		"Order":        Order(appends, log, other),
		"Reads":        Reads(reads, log),
		"RealTime":     RealTime(appends),
		"Linearizable": Linearizable(appends, reads, false, time.Second),
		"StoredOnce":   StoredOnce(appends, log, other),
	} {
		if err != nil {
			t.Errorf("%s on a clean history: %v", name, err)
		}
	}
}

// TestAcknowledgedCatchesDroppedRecord plants a log that lost an
// acknowledged record, and one that holds it at another position.
func TestAcknowledgedCatchesDroppedRecord(t *testing.T) {
	appends, _, log := cleanHistory()
	dropped := log
	dropped.Entries = slices.Delete(slices.Clone(log.Entries), 2, 3)
	violated(t, "dropped", Acknowledged(appends, dropped), 1)
	moved := log
	moved.Entries = slices.Clone(log.Entries)
	moved.Entries[5].Pos++
	moved.End++
	violated(t, "moved", Acknowledged(appends, moved), 1)
	// A log that ends before the record's position says nothing of it.
	short := log
	short.End, short.Entries = 2, log.Entries[:2]
	if err := Acknowledged(appends, short); err != nil {
		t.Errorf("a log that stops short: %v", err)
	}
}

// TestOrderCatchesSwappedRecords plants a reader that got two records
// swapped: both logs are well formed, but they disagree.
func TestOrderCatchesSwappedRecords(t *testing.T) {
	appends, _, log := cleanHistory()
	swapped := log
	swapped.Reader = "swapped"
	swapped.Entries = slices.Clone(log.Entries)
	swapped.Entries[1].Record, swapped.Entries[2].Record = swapped.Entries[2].Record, swapped.Entries[1].Record
	err := Order(appends, log, swapped)
	violated(t, "swapped", err, 2)
	var vs Violations
	if errors.As(err, &vs) && (len(vs) != 1 || vs[0].Pos != log.Entries[1].Pos) {
		t.Errorf("swapped: want one violation at position %d, got %v", log.Entries[1].Pos, err)
	}
	// A no-op where the other reader has a record.
	hole := log
	hole.Reader = "hole"
	hole.Entries = slices.Delete(slices.Clone(log.Entries), 4, 5)
	violated(t, "hole", Order(appends, log, hole), 2)
	// A dense log with a gap; positions going backwards; a record nobody
	// appended.
	dense := log
	dense.Dense = true
	violated(t, "gap in a dense log", Order(appends, dense), 2)
	back := log
	back.Entries = slices.Clone(log.Entries)
	back.Entries[1], back.Entries[2] = back.Entries[2], back.Entries[1]
	violated(t, "backwards", Order(appends, back), 2)
	alien := log
	alien.Entries = slices.Clone(log.Entries)
	alien.Entries[0].Record = "nobody"
	violated(t, "alien record", Order(appends, alien), 2)
	// A reader of one shard speaks only for that shard's positions.
	one := log
	one.Reader, one.Shards = "shard 1", []uint32{1}
	one.Entries = nil
	for _, e := range log.Entries {
		if e.Shard == 1 {
			one.Entries = append(one.Entries, e)
		}
	}
	if err := Order(appends, log, one); err != nil {
		t.Errorf("one-shard reader: %v", err)
	}
}

// TestReadsCatchesChangedPosition plants a read that saw another record at
// a position than the log settled on.
func TestReadsCatchesChangedPosition(t *testing.T) {
	_, reads, log := cleanHistory()
	reads[1].Record = "r0"
	violated(t, "changed", Reads(reads, log), 2)
}

// TestRealTimeCatchesInversion plants an append invoked after another
// returned that got a lower position; the porcupine check catches it too.
func TestRealTimeCatchesInversion(t *testing.T) {
	appends, reads, _ := cleanHistory()
	appends[1].Position, appends[2].Position = appends[2].Position, appends[1].Position
	err := RealTime(appends)
	violated(t, "inversion", err, 3)
	var vs Violations
	if errors.As(err, &vs) && vs[0].Record != appends[2].Record {
		t.Errorf("inversion: blamed %q, want %q", vs[0].Record, appends[2].Record)
	}
	var nl *NotLinearizable
	if err := Linearizable(appends, reads, false, time.Second); !errors.As(err, &nl) {
		t.Errorf("Linearizable on an inversion: %v", err)
	} else {
		var b strings.Builder
		if err := nl.Visualize(&b); err != nil || b.Len() == 0 {
			t.Errorf("Visualize: %v (%d bytes)", err, b.Len())
		}
	}
}

// TestLinearizableModel checks the model on small histories: concurrent
// appends may take either order; a skipped or shared position, or a read
// of a position before any append took it, has no linearization.
func TestLinearizableModel(t *testing.T) {
	app := func(client uint64, rec string, call, ret time.Duration, pos uint64) Append {
		return Append{Client: client, Record: rec, Call: call, Return: ret, Outcome: Acked, Position: pos}
	}
	yes := true
	read := func(client, pos uint64, call, ret time.Duration, rec string) Read {
		return Read{Client: client, Pos: pos, Call: call, Return: ret, Record: rec}
	}
	cases := []struct {
		name    string
		appends []Append
		reads   []Read
		ok      bool
		// sparse: the outcome with no-ops allowed (positions ranked),
		// where it differs.
		sparse *bool
	}{
		{"sequential", []Append{app(0, "x", 0, 1, 0), app(0, "y", 2, 3, 1)}, []Read{read(1, 1, 4, 5, "y")}, true, nil},
		{"concurrent appends in either order", []Append{app(0, "x", 0, 10, 1), app(1, "y", 1, 9, 0)}, nil, true, nil},
		{"later append got a lower position", []Append{app(0, "x", 0, 1, 1), app(1, "y", 2, 3, 0)}, nil, false, nil},
		{"position skipped", []Append{app(0, "x", 0, 1, 0), app(0, "y", 2, 3, 2)}, nil, false, &yes},
		{"position shared", []Append{app(0, "x", 0, 1, 0), app(1, "y", 0, 1, 0)}, nil, false, nil},
		{"read before the append began", []Append{app(0, "x", 2, 3, 0)}, []Read{read(1, 0, 0, 1, "x")}, false, nil},
		{"read concurrent with the append", []Append{app(0, "x", 0, 3, 0)}, []Read{read(1, 0, 1, 2, "x")}, true, nil},
		// With no-ops, a read of position 2 (a record whose append did
		// not return) needs the append at 0 taken first, not the one at 3.
		{"read of an unacknowledged position before the next append", []Append{app(0, "x", 0, 1, 0), app(0, "y", 10, 11, 3)}, []Read{read(1, 2, 5, 6, "z")}, false, &yes},
		{"read of an unacknowledged position before any append", []Append{app(0, "x", 10, 11, 3)}, []Read{read(1, 2, 0, 1, "z")}, false, &yes},
	}
	for _, c := range cases {
		if err := Linearizable(c.appends, c.reads, true, time.Second); (err == nil) != c.ok {
			t.Errorf("%s (dense): got %v, want linearizable %v", c.name, err, c.ok)
		}
		ok := c.ok
		if c.sparse != nil {
			ok = *c.sparse
		}
		if err := Linearizable(c.appends, c.reads, false, time.Second); (err == nil) != ok {
			t.Errorf("%s (with no-ops): got %v, want linearizable %v", c.name, err, ok)
		}
	}
}

// TestStoredOnceCatchesRetryStoredTwice plants a retry (same client and
// seq) that the log holds twice.
func TestStoredOnceCatchesRetryStoredTwice(t *testing.T) {
	appends, _, log := cleanHistory()
	retry := appends[2]
	retry.Outcome, retry.Call, retry.Return = Unknown, 100, 200
	appends = append(appends, retry)
	if err := StoredOnce(appends, log); err != nil {
		t.Errorf("a retry stored once: %v", err)
	}
	twice := log
	twice.Entries = append(slices.Clone(log.Entries), Entry{Pos: log.End, Shard: 1, Record: retry.Record})
	twice.End++
	err := StoredOnce(appends, twice)
	violated(t, "retry stored twice", err, 5)
	var vs Violations
	if errors.As(err, &vs) && (vs[0].Record != retry.Record || vs[0].Pos != log.End) {
		t.Errorf("retry stored twice: got %+v", vs[0])
	}
	reused := append(slices.Clone(appends), Append{Client: retry.Client, Seq: retry.Seq, Record: "other", Outcome: Failed})
	violated(t, "seq reused", StoredOnce(reused, log), 5)
}

// specHistory is a clean speculative subscription: r0..r2 delivered
// speculatively, confirmed; then r3 and a wrong "x" speculatively, a Fail
// at 4, the correct r4, and the confirmation of all.
func specHistory() (Subscription, Log) {
	final := Log{Reader: "cuts", End: 5, Entries: []Entry{
		{Pos: 0, Record: "r0"}, {Pos: 1, Record: "r1"}, {Pos: 2, Record: "r2"}, {Pos: 3, Record: "r3"}, {Pos: 4, Record: "r4"},
	}}
	d := func(p uint64, rec string, spec bool) SubEvent {
		return SubEvent{Kind: Deliver, Pos: p, Record: rec, Speculative: spec}
	}
	sub := Subscription{Name: "spec", Events: []SubEvent{
		d(0, "r0", true), d(1, "r1", true), d(2, "r2", true),
		{Kind: Confirm, Pos: 3},
		d(3, "r3", true), d(4, "x", true),
		{Kind: Fail, Pos: 4},
		d(4, "r4", true),
		{Kind: Confirm, Pos: 5},
	}}
	return sub, final
}

func TestSpeculationCleanPasses(t *testing.T) {
	sub, final := specHistory()
	if err := Speculation(sub, final); err != nil {
		t.Errorf("Speculation: %v", err)
	}
	if err := Converged(sub, final); err != nil {
		t.Errorf("Converged: %v", err)
	}
}

// TestSpeculationCatchesRevisedConfirmation plants a Fail below the
// confirmed end and a confirmation over a wrong speculation.
func TestSpeculationCatchesRevisedConfirmation(t *testing.T) {
	sub, final := specHistory()
	revised := sub
	revised.Events = append(slices.Clone(sub.Events[:4]), SubEvent{Kind: Fail, Pos: 1})
	violated(t, "fail below confirmed", Speculation(revised, final), 4)

	wrong := sub
	wrong.Events = slices.Clone(sub.Events)
	wrong.Events[1].Record = "x" // confirmed at event 3
	violated(t, "wrong record confirmed", Speculation(wrong, final), 4)

	redelivered := sub
	redelivered.Events = append(slices.Clone(sub.Events), SubEvent{Kind: Deliver, Pos: 5, Record: "r5", Speculative: true},
		SubEvent{Kind: Fail, Pos: 5}, SubEvent{Kind: Deliver, Pos: 2, Record: "r2"})
	violated(t, "delivery below confirmed", Speculation(redelivered, final), 4)

	only := sub
	only.ConfirmedOnly = true
	violated(t, "speculation to confirmed-only", Speculation(only, final), 4)
}

// TestConvergedCatchesMissingCorrection plants a Fail not followed by the
// correct record, and a wrong speculation never failed.
func TestConvergedCatchesMissingCorrection(t *testing.T) {
	sub, final := specHistory()
	uncorrected := sub
	uncorrected.Events = slices.Clone(sub.Events[:7]) // fail at 4, r4 never comes
	if err := Speculation(uncorrected, final); err != nil {
		t.Errorf("Speculation of a prefix: %v", err)
	}
	violated(t, "fail without the correct record", Converged(uncorrected, final), 4)

	neverFailed := sub
	neverFailed.Events = slices.Clone(sub.Events[:6]) // "x" at 4 stays
	violated(t, "wrong speculation pending", Converged(neverFailed, final), 4)
}

// TestConvergedOneShard: a subscription of one shard has converged once it
// confirmed past that shard's last record, though the log goes on.
func TestConvergedOneShard(t *testing.T) {
	final := Log{Reader: "cuts", End: 4, Entries: []Entry{
		{Pos: 0, Shard: 1, Record: "a"}, {Pos: 1, Shard: 0, Record: "b"}, {Pos: 2, Shard: 1, Record: "c"}, {Pos: 3, Shard: 1, Record: "d"},
	}}
	sub := Subscription{Name: "shard 0", Shards: []uint32{0}, Events: []SubEvent{
		{Kind: Deliver, Pos: 1, Shard: 0, Record: "b"}, {Kind: Confirm, Pos: 2},
	}}
	if err := Converged(sub, final); err != nil {
		t.Errorf("Converged: %v", err)
	}
	sub.Events = sub.Events[:1]
	violated(t, "not confirmed past its last record", Converged(sub, final), 4)
}
