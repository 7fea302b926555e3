package ordering

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
// be: the ordering replica must start from its state and lead with its
// policy without knowing it.
type thirdMode struct {
	state    *control.State
	policies []*thirdPolicy
}

func (*thirdMode) Name() string                                  { return "third" }
func (*thirdMode) Speculative() bool                             { return false }
func (*thirdMode) Sequenced() bool                               { return false }
func (*thirdMode) NewMerger(from uint64, _, _ bool) merge.Merger { return merge.NewEager(from) }
func (*thirdMode) NewShardOrdering(cut.ShardID, uint64, time.Time) shard.Ordering {
	return shard.Eager{}
}

func (m *thirdMode) NewState(clusterID string) *control.State {
	m.state = control.New(clusterID)
	return m.state
}

func (m *thirdMode) NewPolicy() order.Policy {
	p := &thirdPolicy{}
	m.policies = append(m.policies, p)
	return p
}

var _ mode.Mode = (*thirdMode)(nil)

// thirdPolicyWake is how soon thirdPolicy asks to step again.
const thirdPolicyWake = 7 * time.Millisecond

// thirdPolicy records what the leader told it and proposes nothing.
type thirdPolicy struct {
	observed *control.State
	steps    int
}

func (p *thirdPolicy) Observe(st *control.State, _ time.Time) { p.observed = st }
func (p *thirdPolicy) Report(order.Report, time.Time) bool    { return false }
func (p *thirdPolicy) CutsInflightMax() int                   { return 1 }
func (p *thirdPolicy) Committed(control.Command) bool         { return false }
func (p *thirdPolicy) Forget()                                {}

func (p *thirdPolicy) Step(time.Time, int) order.Plan {
	p.steps++
	return order.Plan{Wake: thirdPolicyWake}
}

func TestAReplicaLeadsWithItsModesPolicy(t *testing.T) {
	m := &thirdMode{}
	s, err := New(Config{
		ClusterID: "c", ID: "o1", Members: []Member{{ID: "o1", Addr: "127.0.0.1:1"}}, Dir: t.TempDir(),
		OrderingInterval: time.Millisecond, FailureTimeout: time.Second, KeepaliveInterval: time.Second, Mode: m,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if s.state != m.state || s.state.ClusterID != "c" {
		t.Fatal("the replica does not start from the state its mode made")
	}

	// Each leadership term gets a fresh policy, which the leader steps.
	for term := 1; term <= 2; term++ {
		s.resetLeaderState(true)
		if len(m.policies) != term {
			t.Fatalf("term %d: the mode made %d policies", term, len(m.policies))
		}
		p := m.policies[term-1]
		if p.observed != s.state {
			t.Fatalf("term %d: the policy did not observe the replica's state", term)
		}
		// A new leader first settles on an empty command of its own.
		s.mu.Lock()
		for _, c := range s.leader.Step(time.Now()).Propose {
			s.leader.Applied(s.state, c, true, time.Now())
		}
		settled := s.leader.Settled()
		s.mu.Unlock()
		if !settled || p.steps != 0 {
			t.Fatalf("term %d: settled %v after its first command applied, policy stepped %d times before", term, settled, p.steps)
		}
		if wake := s.step(); wake != thirdPolicyWake || p.steps != 1 {
			t.Fatalf("term %d: step woke after %v having stepped the policy %d times, want %v and once", term, wake, p.steps, thirdPolicyWake)
		}
	}
	s.resetLeaderState(false)
	if len(m.policies) != 2 {
		t.Fatalf("a follower made a policy")
	}
}

func TestConfigNeedsAMode(t *testing.T) {
	c := Config{ClusterID: "c", ID: "o1", Members: []Member{{ID: "o1"}}, Dir: "d", OrderingInterval: time.Millisecond, FailureTimeout: time.Second}
	if err := c.Validate(); err == nil {
		t.Fatal("a configuration without a mode validated")
	}
}
