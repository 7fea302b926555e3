package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/devcluster"
)

// startSpecCluster starts a speculative cluster of shards and dials it.
// The tests append one record at a time, a load at which the leader would
// soon fall back to eager cuts, and check speculation itself: the
// fallback is off.
func startSpecCluster(t *testing.T, shards int) (*devcluster.Cluster, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), Shards: shards, Mode: config.ModeSpec, WindowCuts: 10, NoEagerFallback: true})
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

// subscribeSpec opens a speculative subscription from position 0 that the
// test's end closes.
func subscribeSpec(ctx context.Context, t *testing.T, cl *client.Client, f client.Filter, confirmedOnly bool) *client.SpecSubscription {
	t.Helper()
	sub, err := cl.SubscribeSpec(ctx, 0, f, confirmedOnly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	return sub
}

// TestLaggingSpeculativeSubscriptionAcrossTrim is
// TestLaggingSubscriptionAcrossTrim for a speculative subscription: every
// record at its acknowledged position, or OutOfRange, and never a stream
// that stalls where the trim overtook it.
func TestLaggingSpeculativeSubscriptionAcrossTrim(t *testing.T) {
	ctx := testCtx(t)
	lag := startLaggingSubscription(ctx, t, config.ModeSpec)
	for {
		resp, err := lag.stream.Recv()
		if lag.endedWith(err) {
			return
		}
		for _, e := range resp.Entries {
			if e.Record != nil {
				lag.check(e.Position, e.Record.Payload)
			}
			if e.Position+max(e.Skip, 1) > lag.last {
				return // served everything that was not trimmed
			}
		}
	}
}

// TestSpeculativeDelivery appends to both shards of a speculative cluster
// and checks that a speculative subscriber gets every record, most of them
// before their cut, never a failure, with each position confirmed and equal
// to the acknowledged one, and that an eager subscriber sees the same
// sequence.
func TestSpeculativeDelivery(t *testing.T) {
	_, cl := startSpecCluster(t, 2)
	ctx := testCtx(t)
	sub := subscribeSpec(ctx, t, cl, client.Filter{}, false)
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
	// The appends were sequential, so each waited for the other shard to
	// fill its quota with a no-op: positions below the last record that no
	// append got hold no-ops. Read says so, and reads records.
	noop := uint64(0)
	for noop < maxKey(acked) {
		if _, rec := acked[noop]; !rec {
			break
		}
		noop++
	}
	if noop == maxKey(acked) {
		t.Fatal("no no-op position among sequential appends to two shards")
	}
	if _, err := cl.Read(ctx, noop); !errors.Is(err, client.ErrNoop) {
		t.Fatalf("read of no-op position %d: %v, want ErrNoop", noop, err)
	}
	if e, err := cl.Read(ctx, maxKey(acked)); err != nil || string(e.Record.Payload) != acked[maxKey(acked)] {
		t.Fatalf("read of the last record: %v %q", err, e.Record.Payload)
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

// TestSpeculativeWholeShardFailure stops both servers of one shard under
// load. The leader starts a new view: the speculative subscriber gets
// fail_spec at confirmed-gp, then the correct records, and ends with the
// same sequence as an eager subscriber; appends move to the live shard.
func TestSpeculativeWholeShardFailure(t *testing.T) {
	dc, cl := startSpecCluster(t, 2)
	ctx := testCtx(t)
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub := subscribeSpec(ctx, t, cl, client.Filter{}, false)
	// The confirmed-only view is what Subscribe gives on this cluster; it
	// also says how far it has confirmed.
	eager := subscribeSpec(ctx, t, cl, client.Filter{}, true)
	// One-shard subscribers of the shard that fails and of the survivor.
	var failed, survivor uint32
	for _, sh := range st.Shards {
		if sh.Group == "b" {
			failed = sh.Id
		} else {
			survivor = sh.Id
		}
	}
	ofFailed := subscribeSpec(ctx, t, cl, client.OnShard(failed), false)
	ofSurvivor := subscribeSpec(ctx, t, cl, client.OnShard(survivor), false)

	var last uint64
	unknown := 0
	appendN := func(n int, tag string) {
		for i := 0; i < n; i++ {
			ack, err := cl.Append(ctx, client.Record{Payload: []byte(fmt.Sprintf("%s-%d", tag, i))})
			if errors.Is(err, client.ErrOutcomeUnknown) {
				// Sent to the stopped shard before the client knew.
				unknown++
				continue
			}
			if err != nil {
				t.Fatalf("append %s-%d: %v", tag, i, err)
			}
			last = max(last, ack.Position)
		}
	}
	var got, want []client.Entry
	var gotConfirmed, wantConfirmed uint64
	fails := 0
	// read takes events of a whole-log subscriber until done says stop,
	// undoing what Fail events void.
	read := func(name string, sub *client.SpecSubscription, into *[]client.Entry, confirmed *uint64, done func() bool) {
		t.Helper()
		for !done() {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("%s subscriber after %d records: %v", name, len(*into), err)
			}
			switch ev.Kind {
			case client.EventDeliver:
				*into = append(*into, ev.Entry)
			case client.EventConfirm:
				*confirmed = ev.Position
			case client.EventFail:
				fails++
				for len(*into) > 0 && (*into)[len(*into)-1].Position >= ev.Position {
					*into = (*into)[:len(*into)-1]
				}
			}
		}
	}
	appendN(100, "before")
	// Whatever of shard b's committed entries a subscriber has not
	// received when b dies whole is lost to it, and it would wait at that
	// position forever. So hold b's reports, which stops its entries being
	// committed, and let both subscribers take everything committed
	// before b is stopped.
	var doomed []string
	for _, sh := range st.Shards {
		if sh.Group == "b" {
			for _, r := range sh.Replicas {
				doomed = append(doomed, r.Id)
				if err := dc.SetReportDelay(r.Id, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for tail := uint64(0); ; {
		now, err := cl.CheckTail(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if now == tail {
			break
		}
		tail = now
		read("speculative", sub, &got, &gotConfirmed, func() bool { return gotConfirmed >= tail })
		read("eager", eager, &want, &wantConfirmed, func() bool { return wantConfirmed >= tail })
	}
	for _, id := range doomed {
		if err := dc.StopStorage(id); err != nil {
			t.Fatal(err)
		}
	}
	appendN(100, "after")
	if unknown > 1 {
		t.Errorf("%d appends ended with an unknown outcome; only the one in flight at the failure may", unknown)
	}
	read("speculative", sub, &got, &gotConfirmed, func() bool { return gotConfirmed > last })
	read("eager", eager, &want, &wantConfirmed, func() bool { return wantConfirmed > last })
	for len(got) > 0 && got[len(got)-1].Position > last {
		got = got[:len(got)-1]
	}
	for len(want) > 0 && want[len(want)-1].Position > last {
		want = want[:len(want)-1]
	}
	if len(got) != len(want) {
		t.Fatalf("speculative subscriber has %d records up to %d, eager %d", len(got), last, len(want))
	}
	for i := range want {
		if got[i].Position != want[i].Position || string(got[i].Record.Payload) != string(want[i].Record.Payload) {
			t.Fatalf("index %d: speculative (%d, %q), eager (%d, %q)", i, got[i].Position, got[i].Record.Payload, want[i].Position, want[i].Record.Payload)
		}
	}
	// The failure is a view change when the shard held slots of the
	// announced windows; a shard the leader had already excluded (a
	// straggler under load) is simply finalized. Only a view change may
	// fail speculation.
	st, err = cl.Status(ctx)
	if err != nil || st.Spec.View > 1 || fails > 0 && st.Spec.View != 1 {
		t.Fatalf("view after the failure: %v (%d fail_spec events) %v", st.GetSpec(), fails, err)
	}
	t.Logf("%d records, view %d, %d fail_spec events, %d appends of unknown outcome", len(got), st.Spec.View, fails, unknown)

	// Each one-shard subscriber ends with its shard's part of the order,
	// confirmed: the failed shard's learns of the view change and of the
	// later cuts from the cluster status, since its stream is dead.
	part := func(shard uint32) []client.Entry {
		var p []client.Entry
		for _, e := range want {
			if e.Shard == shard {
				p = append(p, e)
			}
		}
		return p
	}
	checkShardSub(t, ctx, "survivor", ofSurvivor, part(survivor))
	checkShardSub(t, ctx, "failed shard", ofFailed, part(failed))
}

// checkShardSub reads a one-shard speculative subscription until it
// delivered and confirmed the last record of want, undoing what Fail
// events void, and checks that it then holds exactly want below that
// confirmation.
func checkShardSub(t *testing.T, ctx context.Context, name string, sub *client.SpecSubscription, want []client.Entry) {
	t.Helper()
	var got []client.Entry
	var confirmed uint64
	var evlog []string
	defer func() {
		if t.Failed() {
			t.Logf("events: %v", evlog)
		}
	}()
	// A one-shard subscription hears of cuts from the status too, so a
	// confirmation may come before the shard's stream sent its records
	// below it: read until both are there.
	for len(want) > 0 && (confirmed <= want[len(want)-1].Position || len(got) == 0 || got[len(got)-1].Position < want[len(want)-1].Position) {
		ev, err := sub.Next(ctx)
		evlog = append(evlog, fmt.Sprintf("%v%d/%v", ev.Kind, ev.Position, ev.Speculative))
		if err != nil {
			t.Fatalf("%s subscriber after %d records: %v", name, len(got), err)
		}
		switch ev.Kind {
		case client.EventDeliver:
			got = append(got, ev.Entry)
		case client.EventConfirm:
			confirmed = ev.Position
		case client.EventFail:
			for len(got) > 0 && got[len(got)-1].Position >= ev.Position {
				got = got[:len(got)-1]
			}
		}
	}
	for len(got) > 0 && got[len(got)-1].Position >= confirmed {
		got = got[:len(got)-1]
	}
	if len(got) != len(want) {
		t.Fatalf("%s subscriber holds %d records below %d, the order gives it %d", name, len(got), confirmed, len(want))
	}
	for i := range want {
		if got[i].Position != want[i].Position || string(got[i].Record.Payload) != string(want[i].Record.Payload) {
			t.Fatalf("%s subscriber, index %d: (%d, %q), the order says (%d, %q)", name, i, got[i].Position, got[i].Record.Payload, want[i].Position, want[i].Record.Payload)
		}
	}
}

// TestOneShardSubscription follows each shard of a speculative cluster
// alone: every subscriber gets exactly its shard's records at their
// acknowledged positions, some before their cuts, and a confirmed-only
// one gets them at the same positions; an unknown shard is refused.
func TestOneShardSubscription(t *testing.T) {
	_, cl := startSpecCluster(t, 2)
	ctx := testCtx(t)
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	subs := map[uint32]*client.SpecSubscription{}
	confirmed := map[uint32]*client.Subscription{}
	for _, sh := range st.Shards {
		if subs[sh.Id], err = cl.SubscribeSpec(ctx, 0, client.OnShard(sh.Id), false); err != nil {
			t.Fatal(err)
		}
		defer subs[sh.Id].Close()
		if confirmed[sh.Id], err = cl.Subscribe(ctx, 0, client.OnShard(sh.Id)); err != nil {
			t.Fatal(err)
		}
		defer confirmed[sh.Id].Close()
	}
	if _, err := cl.SubscribeSpec(ctx, 0, client.OnShard(99), false); !errors.Is(err, client.ErrUnknownShard) {
		t.Fatalf("subscription to shard 99: %v, want ErrUnknownShard", err)
	}
	want := map[uint32][]client.Entry{}
	for i := 0; i < 100; i++ {
		rec := client.Record{Payload: []byte(fmt.Sprintf("r%d", i))}
		ack, err := cl.AppendToShard(ctx, rec, st.Shards[i%2].Id)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		want[ack.Shard] = append(want[ack.Shard], client.Entry{Position: ack.Position, Shard: ack.Shard, Record: rec})
	}
	for id, sub := range subs {
		speculative := 0
		var got []client.Entry
		for len(got) < len(want[id]) {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			switch ev.Kind {
			case client.EventFail:
				t.Fatalf("shard %d: misspeculation without failures: fail at %d", id, ev.Position)
			case client.EventDeliver:
				got = append(got, ev.Entry)
				if ev.Speculative {
					speculative++
				}
			}
		}
		for i, e := range got {
			w := want[id][i]
			if e.Position != w.Position || e.Shard != id || string(e.Record.Payload) != string(w.Record.Payload) {
				t.Fatalf("shard %d, record %d: got (%d, shard %d, %q), acknowledged (%d, %q)", id, i, e.Position, e.Shard, e.Record.Payload, w.Position, w.Record.Payload)
			}
			c, err := confirmed[id].Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if c.Position != w.Position || string(c.Record.Payload) != string(w.Record.Payload) {
				t.Fatalf("shard %d, record %d: confirmed-only subscriber got (%d, %q), acknowledged (%d, %q)", id, i, c.Position, c.Record.Payload, w.Position, w.Record.Payload)
			}
		}
		if speculative == 0 {
			t.Fatalf("shard %d: no delivery was speculative", id)
		}
	}
}

// TestSpecOneShardSubscriptionEndsWithItsShard follows one shard of a
// speculative cluster alone while the shard leaves: the subscriber gets the
// shard's records at their acknowledged positions, a confirmation covering
// them, then ErrShardFinalized. A whole-log subscriber keeps going with the
// shard that stays.
func TestSpecOneShardSubscriptionEndsWithItsShard(t *testing.T) {
	_, cl := startSpecCluster(t, 2)
	ctx := testCtx(t)
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaving, staying := st.Shards[0].Id, st.Shards[1].Id
	one := subscribeSpec(ctx, t, cl, client.OnShard(leaving), false)
	all := subscribeSpec(ctx, t, cl, client.Filter{}, true)
	var want []client.Ack
	for i := 0; i < 10; i++ {
		a, err := cl.AppendToShard(ctx, client.Record{Payload: []byte(fmt.Sprint("r", i))}, leaving)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, a)
	}
	if err := cl.FinalizeShard(ctx, leaving, 2); err != nil {
		t.Fatal(err)
	}
	var got []client.Entry
	var confirmed uint64
	for {
		ev, err := one.Next(ctx)
		if errors.Is(err, client.ErrShardFinalized) {
			break
		}
		if err != nil {
			t.Fatalf("after %d records: %v", len(got), err)
		}
		switch ev.Kind {
		case client.EventDeliver:
			got = append(got, ev.Entry)
		case client.EventConfirm:
			confirmed = ev.Position
		case client.EventFail:
			t.Fatalf("misspeculation without failures: fail at %d", ev.Position)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records before the end, want %d", len(got), len(want))
	}
	for i, a := range want {
		if got[i].Position != a.Position || string(got[i].Record.Payload) != fmt.Sprint("r", i) {
			t.Fatalf("record %d at %d (%q), acknowledged at %d", i, got[i].Position, got[i].Record.Payload, a.Position)
		}
	}
	if last := want[len(want)-1].Position; confirmed <= last {
		t.Fatalf("ended with confirmations up to %d, before the last record at %d", confirmed, last)
	}
	// The whole-log subscriber still delivers the staying shard's records,
	// after the leaving shard's.
	a, err := cl.AppendToShard(ctx, client.Record{Payload: []byte("after")}, staying)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; ; {
		ev, err := all.Next(ctx)
		if err != nil {
			t.Fatalf("whole-log subscriber after %d records: %v", n, err)
		}
		if ev.Kind != client.EventDeliver {
			continue
		}
		if n < len(want) && ev.Position != want[n].Position {
			t.Fatalf("whole-log record %d at %d, acknowledged at %d", n, ev.Position, want[n].Position)
		}
		if n++; ev.Position == a.Position {
			if string(ev.Entry.Record.Payload) != "after" {
				t.Fatalf("whole-log subscriber got %q at %d", ev.Entry.Record.Payload, a.Position)
			}
			break
		}
	}
}

// TestSpecReadsAnswerOncePositionsAreFinal reads a speculative cluster
// whose positions are mostly no-ops: a range up to the tail returns the
// records among its positions as soon as they are final, and a no-op
// position answers ErrNoop, both well within a deadline that the old
// count-the-records read waited out.
func TestSpecReadsAnswerOncePositionsAreFinal(t *testing.T) {
	_, cl := startSpecCluster(t, 2)
	ctx := testCtx(t)
	acks := map[uint64]string{}
	for i := 0; i < 4; i++ {
		a, err := cl.Append(ctx, client.Record{Payload: []byte(fmt.Sprint("r", i))})
		if err != nil {
			t.Fatal(err)
		}
		acks[a.Position] = fmt.Sprint("r", i)
	}
	tail, err := cl.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var noops []uint64
	for p := uint64(0); p < tail; p++ {
		if _, ok := acks[p]; !ok {
			noops = append(noops, p)
		}
	}
	if len(noops) == 0 {
		t.Fatalf("no no-op below the tail %d: the test needs one", tail)
	}
	// readBound is far below the old wait (the whole deadline) and far
	// above a read of final positions.
	const readBound = 2 * time.Second

	short, cancel := context.WithTimeout(ctx, readBound)
	defer cancel()
	es, err := cl.ReadRange(short, 0, int(tail))
	if err != nil {
		t.Fatalf("read of positions 0..%d holding %d records: %v", tail, len(acks), err)
	}
	if len(es) != len(acks) {
		t.Fatalf("read of positions 0..%d: %d records, want the %d acknowledged", tail, len(es), len(acks))
	}
	for _, e := range es {
		if acks[e.Position] != string(e.Record.Payload) {
			t.Fatalf("read %q at %d, acknowledged %q there", e.Record.Payload, e.Position, acks[e.Position])
		}
	}

	for _, p := range []uint64{noops[0], noops[len(noops)-1]} {
		short, cancel := context.WithTimeout(ctx, readBound)
		_, err := cl.Read(short, p)
		cancel()
		if !errors.Is(err, client.ErrNoop) {
			t.Fatalf("read of no-op position %d: %v, want ErrNoop", p, err)
		}
	}
}
