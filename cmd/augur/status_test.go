package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	pb "github.com/augur-log/augur/api/augurpb"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
)

// TestStatusShowsADamagedCopyAndItsRepair damages one record of a stopped
// backup's segment file and restarts it while the primary is down too:
// `augur status` must say, in the row of that replica, which local
// records are damaged and that their repair waits for a live replica.
// Once the primary is back, `augur status --json` must show the repair
// done, and the text the copy repaired, the primary's copy ok.
func TestStatusShowsADamagedCopyAndItsRepair(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), Shards: 1, Replicas: 2, OrderingReplicas: 1, TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := dc.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 3 {
		// An acknowledged record is stored on every replica.
		if _, err := cl.Append(ctx, client.Record{Payload: []byte(fmt.Sprintf("status-record-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	ids := dc.StorageIDs()
	primary, backup := ids[0], ids[1]
	for _, id := range []string{backup, primary} {
		if err := dc.StopStorage(id); err != nil {
			t.Fatal(err)
		}
	}
	flipPayloadByte(t, filepath.Join(dc.Dir(), backup), []byte("status-record-1"))
	if err := dc.StartStorage(backup); err != nil {
		t.Fatal(err)
	}
	// The leader takes the restarted backup (a new incarnation) out of
	// the shard's configuration at its next failure check, unless the
	// shard was finalized when its last serving replica stopped.
	for out := false; !out; {
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out = st.Shards[0].State == pb.ShardState_SHARD_FINALIZED
		for _, r := range st.Shards[0].Out {
			out = out || r.Id == backup
		}
		if !out {
			select {
			case <-ctx.Done():
				t.Fatalf("the restarted backup %s never left the configuration: %v", backup, st.Shards[0])
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	cluster := append([]string{"--ordering", strings.Join(dc.OrderingAddrs(), ","), "--cluster", dc.ClusterID, "--timeout", "10s"}, tlsFlags(dc)...)
	out, err := runAugurCtx(ctx, append([]string{"status"}, cluster...)...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	t.Log(out)
	if strings.Contains(out, "INSECURE") {
		t.Errorf("status of a TLS cluster warns that it is insecure:\n%s", out)
	}
	// The restarted backup is out of the shard's configuration (it
	// rejoins once caught up); its copy is still described.
	if !regexp.MustCompile(`(?m)^0\s+` + backup + `\s+\S.*\s+damaged: 1 records at local \[1, 2\) refused until repaired; repairing: 0 of 1 copied(, waiting for a live replica| from ` + primary + `|)$`).MatchString(out) {
		t.Errorf("status does not report the damaged copy of %s and its repair:\n%s", backup, out)
	}

	if err := dc.StartStorage(primary); err != nil {
		t.Fatal(err)
	}
	type statusOut struct {
		ReplicaHealth []struct {
			ServerID string `json:"server_id"`
			Health   []struct {
				Shard   uint32            `json:"shard"`
				Damaged []json.RawMessage `json:"damaged"`
				CatchUp *struct {
					Fetched string `json:"fetched"`
					Done    bool   `json:"done"`
					Rejoin  bool   `json:"rejoin"`
				} `json:"catch_up"`
			} `json:"health"`
		} `json:"replica_health"`
	}
	repaired := func(out string) bool {
		var st statusOut
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		for _, s := range st.ReplicaHealth {
			for _, h := range s.Health {
				if s.ServerID == backup && h.Shard == 0 && h.CatchUp != nil {
					return h.CatchUp.Done && !h.CatchUp.Rejoin && h.CatchUp.Fetched == "1" && len(h.Damaged) == 0
				}
			}
		}
		return false
	}
	// The repair's report lasts only until the copy starts to rejoin its
	// shard, which follows at once: two status calls, one for the JSON
	// and one for the text, may straddle that moment. So both are
	// rendered as the command renders them, from one snapshot.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		answers := askHealth(ctx, cl, st)
		data, err := statusJSON(st, answers)
		if err != nil {
			t.Fatal(err)
		}
		if repaired(string(data)) {
			var text bytes.Buffer
			if err := printHealth(&text, st, answers); err != nil {
				t.Fatal(err)
			}
			out := text.String()
			if !regexp.MustCompile(`(?m)^0\s+` + backup + `\s+\S.*\s+repair done: 1 of 1 copied$`).MatchString(out) {
				t.Errorf("status does not report the repair of %s:\n%s", backup, out)
			}
			// The primary restarted too, so it is a recovered copy now;
			// its copy is whole.
			if !regexp.MustCompile(`(?m)^0\s+` + primary + `\s+\S.*\s+ok$`).MatchString(out) {
				t.Errorf("status does not call the copy of %s ok:\n%s", primary, out)
			}
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("status --json never showed the repair of %s done:\n%s", backup, data)
		}
	}
}

// flipPayloadByte flips the last byte of the one payload equal to payload
// in the files under dir, so its frame no longer checks out.
func flipPayloadByte(t *testing.T, dir string, payload []byte) {
	t.Helper()
	hits := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		i := bytes.Index(b, payload)
		if i < 0 {
			return nil
		}
		hits++
		b[i+len(payload)-1] ^= 0xff
		return os.WriteFile(path, b, 0o644)
	})
	if err != nil || hits != 1 {
		t.Fatalf("damage %q under %s: %d files hold it, %v", payload, dir, hits, err)
	}
}

// TestStatusShowsACatchingUpReplica checks what `augur status` says of a
// replica out of its shard's configuration that catches up to rejoin it,
// and once it asked to.
func TestStatusShowsACatchingUpReplica(t *testing.T) {
	st := &pb.StatusResponse{Shards: []*pb.ShardInfo{{Id: 0, Epoch: 2,
		Replicas: []*pb.ReplicaAddr{{Id: "b1", Addr: "h1"}}, Out: []*pb.ReplicaAddr{{Id: "b2", Addr: "h2"}}}}}
	answers := func(cu *pb.CatchUpProgress) map[string]healthAnswer {
		return map[string]healthAnswer{
			"h1": {resp: &pb.PingResponse{Health: []*pb.ReplicaHealth{{Shard: 0, Role: "primary"}}}},
			"h2": {resp: &pb.PingResponse{Health: []*pb.ReplicaHealth{{Shard: 0, Role: "catching-up", CatchUp: cu}}}},
		}
	}
	for _, c := range []struct {
		cu   *pb.CatchUpProgress
		want string
	}{
		{&pb.CatchUpProgress{Rejoin: true, Fetched: 1200, Total: 1200, Source: "b1"}, `(?m)^0\s+b2\s+catching up\s+catching up to rejoin: 1200 copied from b1$`},
		{&pb.CatchUpProgress{Rejoin: true, Fetched: 1300, Total: 1300, Done: true, Asked: true}, `(?m)^0\s+b2\s+catching up\s+caught up \(1300 copied\); asked to rejoin the configuration$`},
	} {
		var b bytes.Buffer
		if err := printHealth(&b, st, answers(c.cu)); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(c.want).MatchString(b.String()) {
			t.Errorf("status of a replica catching up (%v):\n%s\nwant a line matching %s", c.cu, b.String(), c.want)
		}
		if !regexp.MustCompile(`(?m)^0\s+b1\s+serving \(primary\)\s+ok$`).MatchString(b.String()) {
			t.Errorf("status of the primary:\n%s", b.String())
		}
	}
}

// TestStatusSaysWhetherTheClusterSpeculates checks the line `augur status`
// prints for a speculative cluster: windows announced, windows ending in
// a fallback, and eager cuts after it; and none for an eager cluster.
func TestStatusSaysWhetherTheClusterSpeculates(t *testing.T) {
	window := &pb.Window{FirstCut: 11, Cuts: 10, Groups: 1, Quotas: []*pb.Quota{{Shard: 0, PerCut: 2}, {Shard: 1, PerCut: 1}}}
	staggered := &pb.Window{FirstCut: 11, Cuts: 10, Groups: 2}
	for i := range uint32(12) {
		staggered.Quotas = append(staggered.Quotas, &pb.Quota{Shard: i, PerCut: uint64(1 + i%3), Group: i % 2})
	}
	for _, c := range []struct {
		name string
		spec *pb.SpecState
		want string
	}{
		{"eager cluster", nil, ""},
		{"starting", &pb.SpecState{WindowCuts: 10}, "speculation not started: no lease window announced yet\n"},
		{"windows", &pb.SpecState{WindowCuts: 10, Windows: []*pb.Window{window}},
			"speculation on: lease windows of 10 cuts announced through cut 20; entries per cut: shard 0: 2, shard 1: 1\n"},
		{"after a shard failed", &pb.SpecState{WindowCuts: 10, Windows: []*pb.Window{window}, View: 1, ConfirmedGp: 70},
			"entries per cut: shard 0: 2, shard 1: 1; view 1 (a whole shard failed once)\n"},
		{"many shards, staggered", &pb.SpecState{WindowCuts: 10, Windows: []*pb.Window{staggered}},
			"entries per cut: 1 to 3 for each of 12 shards; 2 staggered groups, each shard in every 2nd cut\n"},
		{"falling back", &pb.SpecState{WindowCuts: 10, Windows: []*pb.Window{window}, Fallback: true},
			"speculation ending: lease windows through cut 20, then eager cuts"},
		{"fallen back", &pb.SpecState{WindowCuts: 10, Fallback: true}, "speculation off for now: eager cuts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := printStatus(&buf, &pb.StatusResponse{ClusterId: "c", LastCut: &pb.Cut{}, Spec: c.spec}); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			if c.want == "" {
				if strings.Contains(out, "speculation") {
					t.Fatalf("an eager cluster's status speaks of speculation:\n%s", out)
				}
				return
			}
			if !strings.Contains(out, c.want) {
				t.Fatalf("status lacks %q:\n%s", c.want, out)
			}
		})
	}
}
