package stagetime

import (
	"testing"
)

// A chain times each batch once per stage, in order: a stage that ends
// before the one ahead of it in the chain counts nothing for that batch,
// and a batch leaves the queue once it passed every stage.
func TestMarksTimeEachBatchThroughTheChain(t *testing.T) {
	Start()
	defer Stop()
	m := NewMarks(PrimaryFsync, BackupWait, Ordered)
	m.Mark(10)
	m.Mark(20)
	m.Reached(BackupWait, 20) // out of order: nothing passed PrimaryFsync yet
	m.Reached(PrimaryFsync, 15)
	m.Reached(BackupWait, 20)
	m.Reached(PrimaryFsync, 20)
	m.Reached(BackupWait, 20)
	m.Reached(Ordered, 20)
	got := Summaries()
	for stage, want := range map[Stage]int64{PrimaryFsync: 2, BackupWait: 2, Ordered: 2} {
		if n := got[stage.String()].Count; n != want {
			t.Errorf("%v timed %d batches, want %d (all: %v)", stage, n, want, got)
		}
	}
	if len(m.queue) != 0 {
		t.Errorf("%d batches still queued after the last stage", len(m.queue))
	}
}

// Off, nothing is queued or timed.
func TestStoppedTimesNothing(t *testing.T) {
	Start()
	Stop()
	m := NewMarks(PrimaryFsync)
	m.Mark(1)
	m.Reached(PrimaryFsync, 1)
	var x Indexes
	x.Mark(1)
	x.Reached(RaftCommit, 1)
	if len(m.queue) != 0 || len(x.at) != 0 || len(Summaries()) != 0 {
		t.Fatalf("stopped, yet queued %d, indexed %d, timed %v", len(m.queue), len(x.at), Summaries())
	}
}
