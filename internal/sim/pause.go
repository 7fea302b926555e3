package sim

// Paused storage servers and the liveness check.
//
// A storage server may stop without dying (SIGSTOP, a long GC stall, a
// frozen VM) and run again later. Unlike a crash it keeps everything in
// memory: its replica cores (a primary's view of its backups and of what
// they acknowledged), its timers, and what was sent to it, which waits in
// its sockets and reaches it in order once it runs. While it stands still
// it sends nothing, so the failure detector takes it out of its shards'
// configurations once the pause outlasts the failure timeout; when it
// resumes it first acts on its stale state (a primary reports in its old
// configuration) and then hears of the configurations that left it out,
// and rejoins them without a restart.
//
// Once the faults stop, every live shard must order its appends again:
// probe appends to each shard every probeEvery from healAt on must each be
// ordered within twice the failure timeout (a failure the faults left
// behind may take a leader elected as they stopped that long to detect),
// and by the end of the run. A shard that stalled for good is a failing
// seed, even when the scenario's clients stopped appending before the
// stall began.

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/augur-log/augur/internal/cut"
)

// pause stops one storage server of a live shard at at for dur; primary
// says it is the shard's primary, else one of its backups.
type pause struct {
	at, dur time.Duration
	primary bool
}

// Bounds of the liveness check.
const (
	// probeEvery is how often, from healAt on, each live shard takes a
	// probe append.
	probeEvery = 50 * time.Millisecond
	// probeLeadMin is how long before the end of the run the last probe
	// goes out: a healthy shard orders an append within milliseconds.
	probeLeadMin = 100 * time.Millisecond
)

// planPauses draws the pauses from their own random source, so that the
// rest of the scenario stays as the seed drew it. Most outlast the
// failure timeout (the server is taken out and rejoins); some do not (it
// resumes in its configuration). Each ends by healAt.
func (sc *scenario) planPauses(r *rand.Rand, f Faults) {
	n := r.IntN(3)
	var ps []pause
	for range n {
		dur := sc.failureTimeout + time.Duration(10+r.IntN(90))*time.Millisecond
		if r.IntN(4) == 0 {
			dur = time.Duration(5+r.IntN(int(sc.failureTimeout/time.Millisecond)-10)) * time.Millisecond
		}
		latest := sc.healAt - dur - 10*time.Millisecond
		ps = append(ps, pause{at: 10*time.Millisecond + time.Duration(r.Int64N(int64(latest))), dur: dur, primary: r.IntN(3) > 0})
	}
	if f.Pause {
		sc.pauses = ps
	}
}

// paused says c's server stands still now.
func (c *copyOf) paused() bool { return c.sh.s.now.Before(c.pausedUntil) }

// running says c's server is up and not paused.
func (c *copyOf) running() bool { return c.up && !c.paused() }

// receive returns fn as a delivery to c's server (a message, an event of
// its watch, a timer): run at once, or, while the server is paused, once
// it resumes, after what reached it before.
func (c *copyOf) receive(fn func()) func() {
	return func() {
		if c.paused() {
			c.held = append(c.held, fn)
			return
		}
		fn()
	}
}

// startPause pauses a server of a shard that serves on all its servers
// (one whose server crashed, rejoins, or is cut off from its primary is
// left alone: the pause would take it beyond its fault budget).
func (s *cluster) startPause(x pause) {
	sh := s.pick(2, func(sh *shard) bool {
		return sh.alive && !sh.leaving && !sh.finalized && sh.whole()
	})
	if sh == nil {
		return
	}
	c := sh.primary()
	if !x.primary {
		bks := sh.backups()
		c = bks[s.r.IntN(len(bks))]
	}
	c.pausedUntil = s.now.Add(x.dur)
	s.stats.pauses++
	s.tracef("shard %d: %s pauses for %v", sh.id, c.name(), x.dur)
	inc := c.inc
	s.after(x.dur, func() { sh.resume(c, inc) })
}

// resume runs c's server again (unless it crashed meanwhile): what reached
// it while it stood still, in order, then its loop's step and heartbeat.
func (sh *shard) resume(c *copyOf, inc int) {
	s := sh.s
	if c.inc != inc || !c.up {
		return
	}
	held := c.held
	c.pausedUntil, c.held = time.Time{}, nil
	s.tracef("shard %d: %s resumes with %d deliveries waiting", sh.id, c.name(), len(held))
	for _, fn := range held {
		if c.inc != inc {
			return
		}
		fn()
	}
	sh.beat(c)
	if c == sh.primary() {
		if len(sh.queue) > 0 && !sh.turnArmed {
			sh.turnArmed = true
			s.after(s.uniform(turnDelayMin, turnDelayMax), sh.turn)
		}
		sh.tick()
	}
	sh.maybeRejoin(c)
}

// probe is a liveness probe: an append to shard at call.
type probe struct {
	id    int64
	shard cut.ShardID
}

// startProbes appends a probe to every live shard now and every
// probeEvery after, up to probeLeadMin before the run ends.
func (s *cluster) startProbes() {
	if s.now.Add(probeLeadMin).After(s.start.Add(s.sc.runFor)) {
		return
	}
	if s.probeClient == nil {
		s.probeClient = s.startClient(0, 0)
	}
	for _, sh := range s.order {
		if !sh.accepting || sh.finalized {
			continue
		}
		id := s.nextRec
		s.nextRec++
		s.recs = append(s.recs, recordInfo{client: s.probeClient.id, call: s.now, name: recordName(id)})
		s.probes = append(s.probes, probe{id: id, shard: sh.id})
		sh.appendRecord(id, clientIDOf(s.probeClient.id))
	}
	s.after(probeEvery, s.startProbes)
}

// checkLiveness checks that every probe was ordered in time (see the
// notes above).
func (s *cluster) checkLiveness() {
	bound := 2 * s.sc.failureTimeout
	for _, p := range s.probes {
		r := &s.recs[p.id]
		healed := r.call.Sub(s.start.Add(s.sc.healAt))
		switch {
		case !r.acked:
			s.errorf("liveness: shard %d never ordered the append of %s made %v after the faults healed", p.shard, r.name, healed)
		case r.ret.Sub(r.call) > bound:
			s.errorf("liveness: shard %d ordered the append of %s made %v after the faults healed only %v later (bound %v)",
				p.shard, r.name, healed, r.ret.Sub(r.call), bound)
		}
	}
}

func (x pause) String() string {
	who := "backup"
	if x.primary {
		who = "primary"
	}
	return fmt.Sprintf("a shard's %s paused at %v for %v", who, x.at, x.dur)
}
