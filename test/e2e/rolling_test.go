package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/config"
)

// Bounds of TestRollingRestart.
const (
	// rollingFailureTimeout is long: a server must leave its shards because
	// it announced its stop (SIGTERM) or came back as another incarnation
	// (kill -9 and restart), well before the failure detector would notice
	// its silence.
	rollingFailureTimeout = 10 * time.Second
	// rollingRejoinTimeout bounds a restart: stop, start, catch-up, and the
	// configuration that takes the server back.
	rollingRejoinTimeout = 30 * time.Second
	// rollingAcks is how many appends are acknowledged after each rejoin
	// before the next server stops.
	rollingAcks = 20
)

// TestRollingRestart restarts every storage server of a cluster under load,
// one at a time, first each with SIGTERM, then each with kill -9, in eager
// and in speculative mode. Before the next server stops, the restarted one
// must be back in its shards' configurations as its new incarnation (it
// caught up from a live replica and rejoined). Through it all the shards
// keep their ids and none is finalized; in speculative mode no view
// changes and no application sees a fail_spec; and at the end every
// acknowledged append is read back exactly once at its position and the
// history is linearizable. With -e2e.campaign, groups of three servers and
// two rounds of both passes.
func TestRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes; skipped under -short")
	}
	shape, rounds := procShape{groupServers: config.DefaultGroupServers}, 1
	if *campaignFlag {
		shape.groupServers, rounds = config.GroupServersMax, 2
	}
	for _, mode := range []string{config.ModeEager, config.ModeSpec} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testRollingRestart(t, mode, shape, rounds)
		})
	}
}

func testRollingRestart(t *testing.T, mode string, shape procShape, rounds int) {
	interval, settings := time.Millisecond, "fsync: interval\n"
	if mode == config.ModeSpec {
		interval, settings = specInterval, settings+fmt.Sprintf("mode: spec\nwindow_cuts: %d\n", specWindowCuts)
	}
	pc := newProcClusterShape(t, augurBinary(t), interval, settings, shape)
	pc.setFailureTimeout(rollingFailureTimeout)
	ld := startLoad(t, pc)
	ctx := t.Context()
	initial := waitStatus(t, ctx, ld.admin, procStatusTimeout*2, "status before the restarts", func(st *pb.StatusResponse) string {
		return clusterReady(st, procGroups...)
	})
	var ids []uint32
	for _, sh := range initial.Shards {
		ids = append(ids, sh.Id)
	}
	stops := []struct {
		name string
		stop func(id string)
	}{{"SIGTERM", pc.sigterm}, {"kill -9", pc.kill9}}
	for round := range rounds {
		for _, s := range stops {
			for _, server := range pc.cfg.Storage {
				ld.restart(server.ID, s.name, s.stop)
				ld.unchanged(ids)
			}
			t.Logf("round %d: every storage server restarted after %s and rejoined", round+1, s.name)
		}
	}
	ld.finish()
}

// restart stops server id with stop, starts it again, and waits until its
// new incarnation is back in the configuration of every shard it served,
// then for rollingAcks more acknowledgements. It fails the test if the
// shards changed their configuration only after the failure timeout (the
// stop was not announced, nor the restart noticed).
func (ld *procLoad) restart(id, how string, stop func(id string)) {
	t, ctx := ld.t, ld.t.Context()
	t.Helper()
	before, err := ld.admin.Status(ctx)
	if err != nil {
		t.Fatalf("status before the restart of %s: %v", id, err)
	}
	type member struct {
		shard       *pb.ShardInfo
		incarnation uint64
	}
	var served []member
	for _, sh := range before.Shards {
		if i := slices.IndexFunc(sh.Replicas, func(r *pb.ReplicaAddr) bool { return r.Id == id }); i >= 0 && sh.State == pb.ShardState_SHARD_LIVE {
			served = append(served, member{sh, sh.Replicas[i].Incarnation})
		}
	}
	if len(served) == 0 {
		t.Fatalf("%s serves no live shard before its restart: %v", id, before.Shards)
	}
	start := time.Now()
	stop(id)
	pc := ld.pc
	pc.start(id)
	var left time.Duration
	waitStatus(t, ctx, ld.admin, rollingRejoinTimeout, id+" back in its shards after "+how, func(st *pb.StatusResponse) string {
		for _, m := range served {
			now := shardByID(st, m.shard.Id)
			if now == nil || now.State != pb.ShardState_SHARD_LIVE {
				return fmt.Sprintf("shard %d is %v", m.shard.Id, now)
			}
			if left == 0 && now.Epoch > m.shard.Epoch {
				left = time.Since(start)
			}
			i := slices.IndexFunc(now.Replicas, func(r *pb.ReplicaAddr) bool { return r.Id == id })
			switch {
			case i < 0:
				return fmt.Sprintf("shard %d's configuration %d leaves %s out: %v", now.Id, now.Epoch, id, now.Replicas)
			case now.Replicas[i].Incarnation == m.incarnation:
				return fmt.Sprintf("shard %d's configuration %d holds %s's old incarnation %d", now.Id, now.Epoch, id, m.incarnation)
			case len(now.Replicas) != len(m.shard.Replicas):
				return fmt.Sprintf("shard %d's configuration %d holds %d replicas, want %d", now.Id, now.Epoch, len(now.Replicas), len(m.shard.Replicas))
			}
		}
		return ""
	})
	t.Logf("at %v: %s restarted after %s, left its shards after %v and was back in them after %v",
		ld.clk.now().Round(time.Millisecond), id, how, left.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if left >= rollingFailureTimeout {
		t.Errorf("%s left its shards only after %v, the failure timeout: its stop after %s went unnoticed", id, left, how)
	}
	pc.checkAlive()
	waitAcksFor(t, ld.h, ld.clk, rollingAcks, 0, "after the restart of "+id)
}

// unchanged fails the test unless the cluster still has exactly the shards
// ids, all live, and, in speculative mode, no view change happened and no
// application saw a fail_spec.
func (ld *procLoad) unchanged(ids []uint32) {
	t := ld.t
	t.Helper()
	st, err := ld.admin.Status(t.Context())
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var now []uint32
	for _, sh := range st.Shards {
		now = append(now, sh.Id)
		if sh.State != pb.ShardState_SHARD_LIVE || sh.Failed {
			t.Fatalf("shard %d is %v after a restart", sh.Id, sh)
		}
	}
	if !slices.Equal(now, ids) {
		t.Fatalf("shards %v after a restart, want the same %v", now, ids)
	}
	if ld.pc.dense() {
		return
	}
	if st.Spec == nil || st.Spec.View != 0 {
		t.Fatalf("a restart changed the view: %v", st.GetSpec())
	}
	for _, a := range ld.apps {
		a.mu.Lock()
		rollbacks := a.rollbacks
		a.mu.Unlock()
		if rollbacks != 0 {
			t.Fatalf("%s saw %d fail_spec after a restart", a.name, rollbacks)
		}
	}
}
