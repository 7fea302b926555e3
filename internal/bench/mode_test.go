package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
)

// fakeSpecMode is a speculative mode made from the eager subscription, to
// exercise the seam a real speculative mode plugs into: it delivers each
// record speculatively, then confirms it; every 50th position it first
// fails the delivery and delivers the record again.
type fakeSpecMode struct{}

func (fakeSpecMode) Name() string                                   { return "fakespec" }
func (fakeSpecMode) Speculative() bool                              { return true }
func (fakeSpecMode) Check(Params) error                             { return nil }
func (fakeSpecMode) Configure(*devcluster.Options, Params, Variant) {}

func (fakeSpecMode) Subscribe(ctx context.Context, cl *client.Client, from uint64, f client.Filter) (Consumer, error) {
	sub, err := cl.Subscribe(ctx, from, f)
	if err != nil {
		return nil, err
	}
	return &fakeSpecConsumer{sub: sub}, nil
}

type fakeSpecConsumer struct {
	sub   *client.Subscription
	queue []ConsumerEvent
	view  uint64
}

func (c *fakeSpecConsumer) Next(ctx context.Context) (ConsumerEvent, error) {
	if len(c.queue) == 0 {
		e, err := c.sub.Next(ctx)
		if err != nil {
			return ConsumerEvent{}, err
		}
		deliver := ConsumerEvent{Kind: EventDeliver, Position: e.Position, Payload: e.Record.Payload, Speculative: true}
		if e.Position%50 == 49 {
			c.view++
			c.queue = append(c.queue, deliver, ConsumerEvent{Kind: EventFail, Position: e.Position})
		}
		c.queue = append(c.queue, deliver, ConsumerEvent{Kind: EventConfirm, Position: e.Position + 1})
	}
	ev := c.queue[0]
	c.queue = c.queue[1:]
	if ev.Kind == EventFail {
		ev.View = c.view
	}
	return ev, nil
}

func (c *fakeSpecConsumer) Close() { c.sub.Close() }

// withMode registers m for the test's duration.
func withMode(t *testing.T, m Mode) {
	RegisterMode(m)
	t.Cleanup(func() {
		registryMu.Lock()
		defer registryMu.Unlock()
		delete(modes, m.Name())
	})
}

func TestSpeculativeModeSeam(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded clusters")
	}
	withMode(t, fakeSpecMode{})
	p := smokeParams(t, "e2e")
	p.Modes = []string{"eager", "fakespec"}
	p.Shards = []int{1}
	p.Subscribers = 1
	if _, err := Check("ratechange", p); err != nil {
		t.Fatalf("a speculative mode is registered and selected, yet: %v", err)
	}
	rep := runSmoke(t, "e2e", p, true, true)
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want eager, fakespec and their comparison:\n%s", len(lines), buf.String())
	}
	var spec Result
	if err := json.Unmarshal([]byte(lines[1]), &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Mode != "fakespec" || spec.ConfirmLatencyUS == nil || spec.Misspeculations == nil || spec.RolledBack == nil {
		t.Fatalf("speculative result lacks its fields: %s", lines[1])
	}
	if *spec.Misspeculations != *spec.RolledBack || spec.ViewChanges == nil || *spec.ViewChanges > *spec.Misspeculations {
		t.Fatalf("misspeculations %d, rolled back %d, view changes %v", *spec.Misspeculations, *spec.RolledBack, spec.ViewChanges)
	}
	var cmp Comparison
	if err := json.Unmarshal([]byte(lines[2]), &cmp); err != nil {
		t.Fatal(err)
	}
	if cmp.Baseline != "eager" || cmp.Candidate != "fakespec" || cmp.Ratios.E2EP50 == nil || cmp.Ratios.Throughput == nil {
		t.Fatalf("comparison %s", lines[2])
	}
	// The figure draws both modes.
	if f := figureOf(rep); len(f.panels[0].bars) != 2 {
		t.Fatalf("%d bar series, want 2", len(f.panels[0].bars))
	}
}
