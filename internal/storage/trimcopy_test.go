package storage_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
)

// TestNewCopyOfATrimmedShardJoins: once the cluster trimmed its log (whole
// segments deleted on every replica), a storage server added to the group,
// or one that restarts with its data dir wiped, copies the shard from
// where its source's log starts and joins its configuration. Once the
// original servers die it alone serves every acknowledged append at or
// above the trim point, each exactly once, and the shard goes on.
func TestNewCopyOfATrimmedShardJoins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	for _, tc := range []struct {
		name, mode string
		wipe       bool
	}{{"added/eager", "eager", false}, {"added/spec", "spec", false}, {"wiped/eager", "eager", true}} {
		t.Run(tc.name, func(t *testing.T) { trimThenCopy(t, tc.mode, tc.wipe) })
	}
}

func trimThenCopy(t *testing.T, mode string, wipe bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Small segments, so that a trim deletes some.
	c, err := devcluster.Start(ctx, devcluster.Options{Shards: 1, Replicas: 2, OrderingReplicas: 1, Mode: mode, SegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	l := &oneShardLoad{t: t, ctx: ctx, c: c, cl: cl, format: "trimcopy-%03d-" + strings.Repeat("p", 300)}
	l.appendN(60)
	shardID := l.acks[0].Shard
	originals := c.StorageIDs()
	trim := l.acks[40].Position
	if err := cl.Trim(ctx, trim); err != nil {
		t.Fatal(err)
	}
	// Every original server deleted its first segments.
	for _, id := range originals {
		awaitFirstSegment(ctx, t, filepath.Join(c.Dir(), id, fmt.Sprintf("shard-%d", shardID)), func(base uint64) bool { return base > 0 })
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := st.Shards[0]

	var copied string
	if wipe {
		// The backup loses its disk: killed, its data dir wiped, started
		// again empty. It copies once the leader took its old run out.
		copied = before.Replicas[1].Id
		if err := c.KillStorage(copied); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(c.Dir(), copied)); err != nil {
			t.Fatal(err)
		}
		if err := c.StartStorage(copied); err != nil {
			t.Fatal(err)
		}
		awaitShard(ctx, t, cl, shardID, func(sh *pb.ShardInfo) bool {
			return sh.Epoch > before.Epoch+1 && len(sh.Replicas) == 2 && sh.Replicas[1].Id == copied && !sh.Replicas[1].Pending
		})
	} else {
		if copied, err = c.AddStorage(before.Group); err != nil {
			t.Fatal(err)
		}
		awaitShard(ctx, t, cl, shardID, func(sh *pb.ShardInfo) bool {
			return len(sh.Replicas) == 3 && sh.Replicas[2].Id == copied && !sh.Replicas[2].Pending
		})
	}
	// The copy starts at the trimmed point: its first segment is past
	// local index 0, and it never held the trimmed records.
	awaitFirstSegment(ctx, t, filepath.Join(c.Dir(), copied, fmt.Sprintf("shard-%d", shardID)), func(base uint64) bool { return base > 0 })
	addr, err := c.Config().Addr(copied)
	if err != nil {
		t.Fatal(err)
	}
	h := awaitHealth(ctx, t, cl, addr, shardID, func(h *pb.ReplicaHealth) bool { return h.Role == "backup" })
	if h.Lost || len(h.Damaged) != 0 {
		t.Fatalf("health of the new copy: %v", h)
	}
	l.appendN(10)
	for _, id := range originals {
		if id != copied {
			if err := c.KillStorage(id); err != nil {
				t.Fatal(err)
			}
		}
	}
	awaitShard(ctx, t, cl, shardID, func(sh *pb.ShardInfo) bool { return len(sh.Replicas) == 1 && sh.Replicas[0].Id == copied })
	l.appendN(1)
	readBackOnceFrom(l, trim)
	if _, err := cl.Read(ctx, trim-1); !errors.Is(err, client.ErrTrimmed) {
		t.Fatalf("read below the trim point: %v, want trimmed", err)
	}
}

// readBackOnceFrom reads every position from trim to the last
// acknowledged one, and checks that each acknowledged append at or above
// trim is there exactly once, at its position.
func readBackOnceFrom(l *oneShardLoad, trim uint64) {
	l.t.Helper()
	last := l.acks[len(l.acks)-1].Position
	got, err := l.cl.ReadRange(l.ctx, trim, int(last+1-trim))
	if err != nil {
		l.t.Fatalf("read [%d, %d]: %v", trim, last, err)
	}
	count := map[string]int{}
	byPos := map[uint64]string{}
	for _, e := range got {
		count[string(e.Record.Payload)]++
		byPos[e.Position] = string(e.Record.Payload)
	}
	checked := 0
	for i, a := range l.acks {
		if a.Position < trim {
			continue
		}
		want := fmt.Sprintf(l.format, i)
		if byPos[a.Position] != want || count[want] != 1 {
			l.t.Fatalf("append %d: position %d holds %.20q, and it is read %d times; want it there once", i, a.Position, byPos[a.Position], count[want])
		}
		checked++
	}
	if checked < 10 {
		l.t.Fatalf("only %d acknowledged appends at or above the trim point %d", checked, trim)
	}
}

// awaitFirstSegment polls shard directory dir until the base of its first
// segment file satisfies ok, or fails the test at ctx's deadline.
func awaitFirstSegment(ctx context.Context, t *testing.T, dir string, ok func(base uint64) bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var bases []uint64
	for {
		bases = bases[:0]
		paths, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
		for _, p := range paths {
			if b, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), ".seg"), 10, 64); err == nil {
				bases = append(bases, b)
			}
		}
		slices.Sort(bases)
		if len(bases) > 0 && ok(bases[0]) {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("%s: segments start at %v", dir, bases)
		}
	}
}
