package shard

import (
	"errors"
	"slices"
	"testing"

	"github.com/augur-log/augur/internal/segment"
)

func rec(client, seq uint64) segment.Entry {
	return segment.Entry{ClientID: client, Seq: seq, Payload: []byte{byte(seq)}}
}

func mustAppend(t *testing.T, l Log, es ...segment.Entry) uint64 {
	t.Helper()
	first, err := l.Append(es)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return first
}

// scanAll lists the retained entries as (local, entry).
func scanAll(m *MemLog) (locals []uint64, es []segment.Entry) {
	m.Scan(0, func(l uint64, e segment.Entry) bool {
		locals, es = append(locals, l), append(es, e)
		return true
	})
	return locals, es
}

func TestMemLogAppendCoalescesNoopsAndCopies(t *testing.T) {
	m := NewMemLog()
	payload := []byte("abc")
	first := mustAppend(t, m, segment.Entry{ClientID: 1, Seq: 1, Payload: payload}, segment.Entry{Noops: 2}, segment.Entry{Noops: 3})
	payload[0] = 'X'
	if first != 0 || m.Len() != 6 {
		t.Fatalf("first %d len %d, want 0 and 6", first, m.Len())
	}
	locals, es := scanAll(m)
	if len(es) != 2 || locals[1] != 1 || es[1].Noops != 5 {
		t.Fatalf("entries %v at %v, want a record and one run of 5 no-ops at 1", es, locals)
	}
	if string(es[0].Payload) != "abc" {
		t.Fatalf("stored payload %q changed with the caller's buffer", es[0].Payload)
	}
	// A scan from inside the run starts there.
	m.Scan(3, func(l uint64, e segment.Entry) bool {
		if l != 3 || e.Noops != 3 {
			t.Fatalf("scan from 3: %d %+v", l, e)
		}
		return false
	})
}

// TestMemLogCrashDropsUnsynced: a crash keeps exactly what Sync covered,
// and the runs over it.
func TestMemLogCrashDropsUnsynced(t *testing.T) {
	m := NewMemLog()
	mustAppend(t, m, rec(1, 1), rec(1, 2))
	if err := m.Assign(segment.Run{Cut: 1, CutStart: 0, CutEnd: 10, LocalStart: 0, GlobalStart: 3, Count: 2}); err != nil {
		t.Fatal(err)
	}
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, m, rec(1, 3), segment.Entry{Noops: 4})
	if err := m.Assign(segment.Run{Cut: 2, CutStart: 10, CutEnd: 20, LocalStart: 2, GlobalStart: 11, Count: 3}); err != nil {
		t.Fatal(err)
	}
	if m.SyncedLen() != 2 {
		t.Fatalf("synced %d, want 2", m.SyncedLen())
	}
	m.Crash()
	if m.Len() != 2 || m.Ordered() != 2 {
		t.Fatalf("after crash: len %d ordered %d, want 2 and 2", m.Len(), m.Ordered())
	}
	if pos, ok := m.GlobalOf(1); !ok || pos != 4 {
		t.Fatalf("synced position lost: %d %v", pos, ok)
	}
	if _, ok := m.GlobalOf(2); ok {
		t.Fatal("a position of a lost entry survived the crash")
	}
	// The log takes writes again where it ended.
	if first := mustAppend(t, m, rec(1, 3)); first != 2 {
		t.Fatalf("append after crash at %d, want 2", first)
	}
}

// TestMemLogTornWriteKeepsWholeFrames: a torn tail keeps a prefix of the
// unsynced frames, never part of one, and drops synced-looking runs that
// reach into what was lost.
func TestMemLogTornWriteKeepsWholeFrames(t *testing.T) {
	m := NewMemLog()
	mustAppend(t, m, rec(1, 1))
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	// One write of three frames: a record, a run of 5 no-ops, a record.
	mustAppend(t, m, rec(1, 2), segment.Entry{Noops: 5}, rec(1, 3))
	m.CrashTorn(2)
	if m.Len() != 7 {
		t.Fatalf("torn after 2 frames: len %d, want 1+1+5", m.Len())
	}
	_, es := scanAll(m)
	if len(es) != 3 || es[2].Noops != 5 {
		t.Fatalf("entries after tear %+v", es)
	}

	// A run synced with records that were not: recovery drops the run.
	m2 := NewMemLog()
	mustAppend(t, m2, rec(1, 1), rec(1, 2), rec(1, 3))
	if err := m2.Assign(segment.Run{Cut: 1, CutEnd: 3, Count: 3}); err != nil {
		t.Fatal(err)
	}
	m2.mu.Lock()
	m2.unsyncedRuns = 0 // the positions reached the disk, the records did not all
	m2.synced = 0
	m2.mu.Unlock()
	m2.CrashTorn(2)
	if m2.Len() != 2 || m2.Ordered() != 0 {
		t.Fatalf("len %d ordered %d, want 2 and no run over the lost record", m2.Len(), m2.Ordered())
	}
}

func TestMemLogFailAndTrim(t *testing.T) {
	m := NewMemLog()
	for i := range uint64(6) {
		mustAppend(t, m, rec(1, i+1))
	}
	if err := m.Assign(segment.Run{Cut: 1, CutStart: 0, CutEnd: 100, GlobalStart: 10, Count: 4}); err != nil {
		t.Fatal(err)
	}
	if err := m.Trim(12); err != nil {
		t.Fatal(err)
	}
	if m.Start() != 2 {
		t.Fatalf("start %d after trimming below position 12, want 2", m.Start())
	}
	if _, es := scanAll(m); len(es) != 4 || es[0].Seq != 3 {
		t.Fatalf("retained %+v", es)
	}
	boom := errors.New("disk on fire")
	m.Fail(boom)
	if _, err := m.Append([]segment.Entry{rec(1, 9)}); !errors.Is(err, boom) {
		t.Fatalf("append on a failed log: %v", err)
	}
	if m.Len() != 6 {
		t.Fatalf("failed append changed the length to %d", m.Len())
	}
}

// TestMemLogDamageAndRepair checks that a damaged range is listed, that
// Scan stops before it, that a repair of the wrong extent changes nothing,
// and that a repair puts the entries back.
func TestMemLogDamageAndRepair(t *testing.T) {
	m := NewMemLog()
	mustAppend(t, m, rec(1, 1), rec(1, 2))
	mustAppend(t, m, segment.Entry{Noops: 3})
	mustAppend(t, m, rec(1, 3), rec(1, 4))
	d, ok := m.Damage(3, 4) // inside the no-op frame [2, 5)
	if !ok || d.First != 2 || d.End != 5 {
		t.Fatalf("Damage(3, 4) = %+v, %v; want the whole frame [2, 5)", d, ok)
	}
	if got := m.Damaged(); len(got) != 1 || got[0].First != 2 {
		t.Fatalf("Damaged() = %+v", got)
	}
	locals, _ := scanAll(m)
	if len(locals) != 2 || locals[1] != 1 {
		t.Fatalf("Scan visited %v, want only [0 1] before the damage", locals)
	}
	if err := m.Repair(2, []segment.Entry{{Noops: 2}}); err == nil {
		t.Fatal("a repair two indexes short succeeded")
	}
	if err := m.Repair(2, []segment.Entry{{Noops: 1}, {Noops: 2}}); err != nil {
		t.Fatal(err)
	}
	if len(m.Damaged()) != 0 {
		t.Fatalf("still damaged: %+v", m.Damaged())
	}
	locals, es := scanAll(m)
	if len(locals) != 5 || locals[2] != 2 || es[2].Noops != 3 || es[3].Seq != 3 || locals[4] != 6 {
		t.Fatalf("after the repair Scan gives %v %+v", locals, es)
	}
}

// TestScanReadableStepsOverDamage checks that ScanReadable visits every
// entry a damaged log can read, past each damaged range, skips the
// damaged ones, and stops when fn says so.
func TestScanReadableStepsOverDamage(t *testing.T) {
	m := NewMemLog()
	for seq := uint64(1); seq <= 8; seq++ {
		mustAppend(t, m, rec(1, seq))
	}
	if _, ok := m.Damage(2, 4); !ok {
		t.Fatal("Damage(2, 4) failed")
	}
	if _, ok := m.Damage(5, 6); !ok {
		t.Fatal("Damage(5, 6) failed")
	}
	var locals []uint64
	if err := ScanReadable(m, func(local uint64, e segment.Entry) bool {
		if e.Seq != local+1 {
			t.Errorf("local %d holds seq %d", local, e.Seq)
		}
		locals = append(locals, local)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{0, 1, 4, 6, 7}; !slices.Equal(locals, want) {
		t.Fatalf("ScanReadable visited %v, want %v", locals, want)
	}
	locals = nil
	_ = ScanReadable(m, func(local uint64, _ segment.Entry) bool {
		locals = append(locals, local)
		return local < 4
	})
	if want := []uint64{0, 1, 4}; !slices.Equal(locals, want) {
		t.Fatalf("ScanReadable stopped after %v, want %v", locals, want)
	}
}
