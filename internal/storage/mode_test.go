package storage

import (
	"log/slog"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/merge"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/order"
	"github.com/augur-log/augur/internal/shard"
)

// thirdMode is a mode neither eager nor speculative, as lazy order will
// be: the storage server must run its shard ordering without knowing it.
type thirdMode struct{ ord *thirdOrdering }

var _ mode.Mode = thirdMode{}

func (thirdMode) Name() string                                  { return "third" }
func (thirdMode) Speculative() bool                             { return false }
func (thirdMode) Sequenced() bool                               { return false }
func (thirdMode) NewMerger(from uint64, _, _ bool) merge.Merger { return merge.NewEager(from) }
func (thirdMode) NewState(clusterID string) *control.State      { return control.New(clusterID) }
func (thirdMode) NewPolicy() order.Policy                       { return order.NewEager(time.Millisecond) }

func (m thirdMode) NewShardOrdering(id cut.ShardID, length uint64, _ time.Time) shard.Ordering {
	m.ord.shard, m.ord.length = id, length
	return m.ord
}

// thirdOrdering fills fill no-ops once and reports what it last observed.
type thirdOrdering struct {
	shard.Eager
	shard           cut.ShardID
	length          uint64
	fill            uint64
	stored, durable uint64
}

func (o *thirdOrdering) Observe(_ time.Time, stored, _, durable, _ uint64) {
	o.stored, o.durable = stored, durable
}

func (o *thirdOrdering) Fill(time.Time) uint64 {
	n := o.fill
	o.fill = 0
	return n
}

func (o *thirdOrdering) Report(durable, stored, records uint64) (shard.Report, bool) {
	return shard.Report{Length: durable, Records: records, Backlog: stored - durable}, true
}

func TestAPrimaryRunsTheShardOrderingOfAnyMode(t *testing.T) {
	ord := &thirdOrdering{fill: 2}
	s, err := New(Config{
		ClusterID: "c", ID: "s1", Group: []Peer{{ID: "s1", Addr: "127.0.0.1:1"}}, GroupName: "g",
		Ordering: []string{"127.0.0.1:2"}, Dir: t.TempDir(), RecordBytesMax: 1024,
		HeartbeatInterval: time.Second, Mode: thirdMode{ord: ord},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.openStore(3)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newReplica(s, 3, rolePrimary, st, nil, 1)
	if ord.shard != 3 || r.windows != nil {
		t.Fatalf("the mode built the ordering of shard %d; follows windows: %v", ord.shard, r.windows != nil)
	}

	// The loop's step lets the mode's ordering fill.
	r.step()
	if st.Len() != 2 || ord.stored != 2 {
		t.Fatalf("after a step the log holds %d entries (the ordering observed %d), want its 2 no-ops", st.Len(), ord.stored)
	}
	if rep, ok := r.core.Report(); !ok || rep.Length != 2 || rep.Records != 0 || rep.Backlog != 0 {
		t.Fatalf("report %+v (ok %v), want the ordering's: length 2 with no records", rep, ok)
	}
}
