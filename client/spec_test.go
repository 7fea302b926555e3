package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/devcluster"
)

func startSpecCluster(t *testing.T, shards int) (*devcluster.Cluster, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), Shards: shards, Mode: config.ModeSpec, WindowCuts: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := dc.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return dc, cl
}

// TestSpeculativeDelivery appends to both shards of a speculative cluster
// and checks that a speculative subscriber gets every record, most of them
// before their cut, never a failure, with each position confirmed and equal
// to the acknowledged one, and that an eager subscriber sees the same
// sequence.
func TestSpeculativeDelivery(t *testing.T) {
	_, cl := startSpecCluster(t, 2)
	ctx := testCtx(t)
	sub, err := cl.SubscribeSpec(ctx, 0, client.Filter{}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	eager, err := cl.Subscribe(ctx, 0, client.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer eager.Close()

	const n = 200
	acked := map[uint64]string{}
	for i := 0; i < n; i++ {
		payload := fmt.Sprintf("r%d", i)
		ack, err := cl.AppendToShard(ctx, client.Record{Payload: []byte(payload)}, uint32(i%2))
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		acked[ack.Position] = payload
	}
	delivered := map[uint64]string{}
	var confirmed uint64
	speculative := 0
	for len(delivered) < n || confirmed <= maxKey(acked) {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d deliveries: %v", len(delivered), err)
		}
		switch ev.Kind {
		case client.EventFail:
			t.Fatalf("misspeculation without failures: fail at %d", ev.Position)
		case client.EventConfirm:
			if ev.Position < confirmed {
				t.Fatalf("confirm went back from %d to %d", confirmed, ev.Position)
			}
			confirmed = ev.Position
		case client.EventDeliver:
			if _, dup := delivered[ev.Position]; dup {
				t.Fatalf("position %d delivered twice", ev.Position)
			}
			delivered[ev.Position] = string(ev.Entry.Record.Payload)
			if ev.Speculative {
				speculative++
			}
		}
	}
	for pos, p := range acked {
		if delivered[pos] != p {
			t.Fatalf("position %d: delivered %q, acknowledged %q", pos, delivered[pos], p)
		}
	}
	for i := 0; i < n; i++ {
		e, err := eager.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if acked[e.Position] != string(e.Record.Payload) {
			t.Fatalf("eager subscriber: position %d holds %q, acknowledged %q", e.Position, e.Record.Payload, acked[e.Position])
		}
	}
	t.Logf("%d of %d deliveries were speculative", speculative, n)
	if speculative == 0 {
		t.Fatal("no delivery was speculative")
	}
}

func maxKey(m map[uint64]string) uint64 {
	var k uint64
	for p := range m {
		k = max(k, p)
	}
	return k
}
