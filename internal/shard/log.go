package shard

import (
	"errors"

	"github.com/augur-log/augur/internal/segment"
)

// Log is a replica's local log of one shard, as the Replica core stores
// through it: entries (records and no-op runs) at dense local indexes from
// 0, and the runs of global positions committed cuts gave them.
// segment.Store implements it on disk, MemLog in memory.
//
// Writers (Append, Assign, Trim, Sync, Repair) may come from several goroutines
// and the log serializes them: on a backup the replication stream appends
// while the owner assigns and trims, and a server's sync loop syncs beside
// both. The readers (Len, Ordered, GlobalOf, SyncedLen) may run
// concurrently with the writers.
type Log interface {
	// Append stores entries at local indexes Len() onward, in order and
	// as one write, and returns the index of entries[0]. A record takes
	// one index; an entry with Noops > 0 is a run of that many no-op
	// indexes. On an error nothing new is visible, and the log may refuse
	// every later write.
	Append(entries []segment.Entry) (first uint64, err error)
	// Len is the number of local indexes appended.
	Len() uint64
	// Start is the first local index the log still holds: 0, or past
	// entries Trim dropped, or where Rebase started it. Indexes below it
	// are ordered and trimmed.
	Start() uint64
	// Ordered is the number of local indexes that hold a global position:
	// runs cover [0, Ordered) (or its untrimmed part).
	Ordered() uint64
	// Assign gives run's local indexes run's global positions. The run
	// starts at Ordered(), ends at or below Len(), and follows the last
	// run in cut and position; otherwise nothing changes and it fails.
	Assign(run segment.Run) error
	// GlobalOf returns the global position of local index local, if a
	// retained run covers it.
	GlobalOf(local uint64) (global uint64, ok bool)
	// Trim may drop the entries whose global positions all lie below
	// global; it may keep more.
	Trim(global uint64) error
	// Sync makes everything appended and assigned so far survive a crash.
	Sync() error
	// SyncedLen is how many local indexes survive a crash now, at least.
	SyncedLen() uint64
	// Scan calls fn with each retained entry from local index from on (a
	// no-op run from the index asked for to its end) until fn returns
	// false; fn must not call the log.
	Scan(from uint64, fn func(local uint64, e segment.Entry) bool) error
	// Damaged lists the runs of local indexes the log holds damaged
	// (found so when it was opened; see segment's damage.go), ascending:
	// reading them fails until Repair puts them back.
	Damaged() []segment.DamagedRange
	// Repair puts back the entries of the damaged range that starts at
	// first; entries cover exactly its indexes. Other input changes
	// nothing and fails.
	Repair(first uint64, entries []segment.Entry) error
	// Truncate drops the entries at local indexes from on, for a copy
	// whose tail the shard may have replaced (see Replica.PrepareRejoin):
	// from lies in [Ordered, Len], runs stay as they are, and a no-op run
	// that from cuts keeps its indexes below from. Once it returns the
	// truncation survives a crash. Other input changes nothing and fails.
	Truncate(from uint64) error
	// Rebase drops every entry and position and starts the log empty at
	// local index base, at least Len: Start, Len and Ordered are base, and
	// the first run Assign takes starts there. It serves a copy whose
	// source's log starts past all it holds (see Replica.Repair). Once it
	// returns the rebase survives a crash. Other input changes nothing
	// and fails.
	Rebase(base uint64) error
}

// Both logs implement Log.
var (
	_ Log = (*segment.Store)(nil)
	_ Log = (*MemLog)(nil)
)

// AppendID names one client append: what a retry repeats.
type AppendID struct{ Client, Seq uint64 }

// Holdings returns the local index at which l holds each append that want
// accepts, among the entries it can read (see ScanReadable), for Resolve.
// An append held twice (a retry stored again by a primary whose retry
// memory no longer knew it) counts at its first index: a log's entries are
// ordered in turn, so only the first may have been ordered, and the second
// must not deny it.
func Holdings(l Log, want func(AppendID) bool) (map[AppendID]uint64, error) {
	held := map[AppendID]uint64{}
	err := ScanReadable(l, func(local uint64, e segment.Entry) bool {
		id := AppendID{e.ClientID, e.Seq}
		if _, dup := held[id]; !dup && e.Noops == 0 && want(id) {
			held[id] = local
		}
		return true
	})
	return held, err
}

// ScanReadable calls fn with each entry of l it can read, from local index
// 0 on, stepping over the damaged ranges (Scan stops at one) until fn
// returns false. A copy answers from it which appends it holds: a record
// past a damaged range is as much there as one before it.
func ScanReadable(l Log, fn func(local uint64, e segment.Entry) bool) error {
	damaged := l.Damaged()
	from := uint64(0)
	for i := 0; ; i++ {
		end := ^uint64(0)
		if i < len(damaged) {
			end = damaged[i].First
		}
		more := true
		err := l.Scan(from, func(local uint64, e segment.Entry) bool {
			if local >= end {
				return false
			}
			more = fn(local, e)
			return more
		})
		if err != nil && (i == len(damaged) || !errors.Is(err, segment.ErrDamaged)) {
			return err
		}
		if !more || i == len(damaged) {
			return nil
		}
		from = damaged[i].End
	}
}
