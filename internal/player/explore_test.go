package player

import (
	"flag"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"
)

var big = flag.Bool("player.big", false, "explore and randomize the player with larger bounds (minutes)")

// bounds are the parameters of one exhaustive exploration, in the spirit of
// the paper's TLA+ model (NMESSAGES entries, NFAILURES failures, one target,
// plus a second one to see them interfere).
type bounds struct {
	name string
	// routes lists, per entry, the targets it goes to.
	routes    [][]int
	targets   int
	faultsMax int
	restarts  bool
	// initial, when set, also starts from every combination of targets
	// that already applied some prefix (the paper's last_ack \in
	// 0..NMESSAGES).
	initial bool
	cfg     Config
}

func (b bounds) model(bg bug) *model {
	cfg := b.cfg
	for t := range b.targets {
		cfg.Targets = append(cfg.Targets, fmt.Sprintf("t%d", t))
	}
	cfg.Route = RouteTags
	log := make([]Entry, len(b.routes))
	for i, r := range b.routes {
		log[i] = Entry{Index: Index(i + 1), Key: fmt.Sprintf("k%d", i), Payload: []byte{byte(i)}}
		for _, t := range r {
			log[i].Tags = append(log[i].Tags, TargetTagPrefix+cfg.Targets[t])
		}
	}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return newModel(cfg, log, b.faultsMax, b.restarts, bg)
}

// roots returns the starting worlds of b.
func (b bounds) roots(m *model) []*world {
	if !b.initial {
		return []*world{m.start(make([]Index, b.targets))}
	}
	var ws []*world
	la := make([]Index, b.targets)
	var rec func(t int)
	rec = func(t int) {
		if t == b.targets {
			ws = append(ws, m.start(append([]Index(nil), la...)))
			return
		}
		for k := 0; k <= len(m.log); k++ {
			la[t] = Index(k)
			rec(t + 1)
		}
	}
	rec(0)
	return ws
}

// exploreResult is what one exploration found.
type exploreResult struct {
	states, transitions, maxDepth int
	// violation is the first property broken and the actions leading to it.
	violation string
	trace     []action
	elapsed   time.Duration
	covered   map[string]bool
}

// explore visits every state reachable from b's roots, depth first, pruning
// states already seen (by a 64-bit hash of their canonical encoding). It
// checks safety on every transition (the modeled targets assert in-order
// exactly-once application) and liveness on every state: a state in which
// only faults are enabled must have everything applied and the player
// holding no memory. Faults spend a budget recorded in the state, so every
// cycle would be fault-free; it finds none, which makes every fault-free
// run finite, so every such run ends in a state where everything is
// applied: once faults stop, every entry is eventually applied.
func explore(b bounds, bg bug) exploreResult {
	start := time.Now()
	m := b.model(bg)
	const (
		onStack      = 1
		doneVisiting = 2
	)
	seen := map[uint64]uint8{}
	var res exploreResult
	var buf []byte
	hash := func(w *world) uint64 {
		buf = w.encode(buf[:0])
		h := fnv.New64a()
		h.Write(buf)
		return h.Sum64()
	}
	type frame struct {
		w    *world
		h    uint64
		acts []action
		next int
		via  action
	}
	trace := func(stack []frame, last action) []action {
		var tr []action
		for _, f := range stack[1:] {
			tr = append(tr, f.via)
		}
		return append(tr, last)
	}
	for _, root := range b.roots(m) {
		if root.violation != "" {
			res.violation = root.violation
			break
		}
		h := hash(root)
		if seen[h] != 0 {
			continue
		}
		seen[h] = onStack
		res.states++
		stack := []frame{{w: root, h: h, acts: root.actions(nil)}}
		if msg := livenessAt(root, stack[0].acts); msg != "" {
			res.violation = msg
			break
		}
		for len(stack) > 0 && res.violation == "" {
			top := &stack[len(stack)-1]
			if top.next == len(top.acts) {
				seen[top.h] = doneVisiting
				stack = stack[:len(stack)-1]
				continue
			}
			a := top.acts[top.next]
			top.next++
			child := top.w.clone()
			child.do(a)
			res.transitions++
			if child.violation != "" {
				res.violation, res.trace = child.violation, trace(stack, a)
				break
			}
			ch := hash(child)
			switch seen[ch] {
			case onStack:
				res.violation, res.trace = "a cycle of fault-free actions: liveness needs fairness the model does not assume", trace(stack, a)
			case doneVisiting:
			default:
				seen[ch] = onStack
				res.states++
				acts := child.actions(nil)
				if msg := livenessAt(child, acts); msg != "" {
					res.violation, res.trace = msg, trace(stack, a)
					break
				}
				stack = append(stack, frame{w: child, h: ch, acts: acts, via: a})
				res.maxDepth = max(res.maxDepth, len(stack))
			}
		}
		if res.violation != "" {
			break
		}
	}
	res.elapsed = time.Since(start)
	res.covered = m.covered
	return res
}

// livenessAt checks w, whose enabled actions are acts: when no fault-free
// action is enabled, faults have nothing left to wait for, so everything
// must be applied.
func livenessAt(w *world, acts []action) string {
	for _, a := range acts {
		if !a.fault() {
			return ""
		}
	}
	w.checkQuiet()
	return w.violation
}

// paperBounds are the explorations run by default: the paper's TLA+ model
// checked one target with a few messages and failures; two targets add the
// interference of routing, empty messages and a shared main stream.
func paperBounds() []bounds {
	tight := Config{BatchEntriesMax: 2, BatchBytesMax: 1 << 10, QueueEntriesMax: 1, QueueBytesMax: 1 << 10, InflightBatchesMax: 2, EmptyEvery: 2}
	return []bounds{
		{name: "1 target, 3 entries, 2 failures, start anywhere", routes: [][]int{{0}, {0}, {0}}, targets: 1, faultsMax: 2, restarts: true, initial: true, cfg: tight},
		{name: "1 target, 4 entries, 2 failures, batches of 1", routes: [][]int{{0}, {0}, {0}, {0}}, targets: 1, faultsMax: 2, restarts: true,
			cfg: Config{BatchEntriesMax: 1, BatchBytesMax: 1 << 10, QueueEntriesMax: 1, QueueBytesMax: 1 << 10, InflightBatchesMax: 1}},
		{name: "2 targets, 3 entries, 2 failures", routes: [][]int{{0}, {0, 1}, {1}}, targets: 2, faultsMax: 2, restarts: true, cfg: tight},
	}
}

func bigBounds() []bounds {
	tight := Config{BatchEntriesMax: 2, BatchBytesMax: 1 << 10, QueueEntriesMax: 1, QueueBytesMax: 1 << 10, InflightBatchesMax: 2, EmptyEvery: 2}
	return []bounds{
		{name: "2 targets, 4 entries, 2 failures, start anywhere", routes: [][]int{{0}, {0, 1}, {1}, {0}}, targets: 2, faultsMax: 2, restarts: true, initial: true, cfg: tight},
		{name: "2 targets, 5 entries, 2 failures", routes: [][]int{{0}, {0, 1}, {1}, {0}, {1}}, targets: 2, faultsMax: 2, restarts: true, cfg: tight},
		{name: "1 target, 5 entries, 3 failures", routes: [][]int{{0}, {0}, {0}, {0}, {0}}, targets: 1, faultsMax: 3, restarts: true, cfg: tight},
	}
}

// TestExplore checks, over every interleaving within the paper's bounds,
// that each target applies each entry routed to it exactly once and in
// order whatever the failures, and that once failures stop everything is
// applied and the player's memory is released.
func TestExplore(t *testing.T) {
	bs := paperBounds()
	if *big {
		bs = append(bs, bigBounds()...)
	}
	for _, b := range bs {
		t.Run(b.name, func(t *testing.T) {
			res := explore(b, bugNone)
			if res.violation != "" {
				t.Fatalf("%s\ntrace: %s", res.violation, formatTrace(res.trace))
			}
			t.Logf("%d states, %d transitions, depth %d, in %v", res.states, res.transitions, res.maxDepth, res.elapsed.Round(time.Millisecond))
			if b.targets > 1 {
				for _, c := range coverage {
					if !res.covered[c] {
						t.Errorf("the exploration never reached: %s", c)
					}
				}
			}
		})
	}
}

// TestExploreFindsPlantedBugs plants one wrong rule at a time and checks
// that the exploration finds a violation: it would catch the bugs the
// paper's terms, ranges and restart rule guard against.
func TestExploreFindsPlantedBugs(t *testing.T) {
	b := paperBounds()[2]
	for _, c := range []struct {
		name string
		bug  bug
	}{
		{"recovery entries of an expired term are pushed", bugSkipPushTerm},
		{"entries a target already applied are dispatched", bugSkipLastAckCheck},
		{"a recovery fetch ends before the current index", bugRecoverToBeforeCurrent},
		{"the main stream restarts after the largest last applied", bugRestartFromMax},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := explore(b, c.bug)
			if res.violation == "" {
				t.Fatalf("no violation found in %d states", res.states)
			}
			t.Logf("found after %d states in %v: %s\ntrace: %s", res.states, res.elapsed.Round(time.Millisecond), res.violation, formatTrace(res.trace))
		})
	}
}

// TestExploreRecoveryStartIsGuardedTwice shows that starting a recovery
// fetch at the last applied index instead of the one after it breaks
// nothing: the dispatcher never pushes an entry at or below the target's
// last acknowledged index, so the off-by-one is caught before it reaches the
// target. The core keeps both rules.
func TestExploreRecoveryStartIsGuardedTwice(t *testing.T) {
	if raceEnabled {
		t.Skip("long, and the race detector has nothing to watch in it")
	}
	if res := explore(paperBounds()[2], bugRecoverFromLastApplied); res.violation != "" {
		t.Fatalf("%s\ntrace: %s", res.violation, formatTrace(res.trace))
	}
}

func formatTrace(tr []action) string {
	s := make([]string, len(tr))
	for i, a := range tr {
		s[i] = a.String()
	}
	return strings.Join(s, " ")
}
