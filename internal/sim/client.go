package sim

import (
	"math"
	"time"

	"github.com/augur-log/augur/internal/cut"
	core "github.com/augur-log/augur/internal/shard"
)

// client appends records at a rate to one shard, moving to another when
// its shard stops taking appends.
type client struct {
	s      *cluster
	id     int
	target cut.ShardID
	rate   float64 // records per millisecond
	burst  float64 // multiplier while bursting
	until  time.Time
	stop   time.Time
}

func (s *cluster) startClient(target cut.ShardID, rate float64) *client {
	c := &client{s: s, id: len(s.clients), target: target, rate: rate, burst: 1, stop: s.start.Add(s.sc.appendFor)}
	s.clients = append(s.clients, c)
	c.schedule()
	return c
}

func (c *client) schedule() {
	s := c.s
	rate := c.rate
	if s.now.Before(c.until) {
		rate *= c.burst
	}
	if rate <= 0 {
		return
	}
	gap := time.Duration(-math.Log(1-s.r.Float64()) / rate * float64(time.Millisecond))
	at := s.now.Add(gap + time.Nanosecond)
	if !at.Before(c.stop) {
		return
	}
	s.at(at, func() {
		sh := s.shards[c.target]
		if sh == nil || !sh.accepting {
			alt := s.acceptingShard()
			if alt == nil {
				c.schedule()
				return
			}
			c.target = alt.id
			sh = alt
		}
		id := s.nextRec
		s.nextRec++
		s.recs = append(s.recs, recordInfo{client: c.id, call: s.now, name: recordName(id)})
		sh.appendRecord(id, clientIDOf(c.id))
		c.schedule()
	})
}

// clientIDOf is the client id client i's appends carry (the shards'
// dedup key with the sequence number).
func clientIDOf(i int) uint64 { return uint64(i) + 1 }

// acceptingShard picks a random shard that takes appends.
func (s *cluster) acceptingShard() *shard {
	var live []*shard
	for _, sh := range s.order {
		if sh.accepting {
			live = append(live, sh)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[s.r.IntN(len(live))]
}

// onAnswer is a shard's answer reaching the append's client.
func (s *cluster) onAnswer(sh *shard, a core.Answer[int64]) {
	id := a.Waiter
	if id == noop {
		return // nobody waits (a planted retry)
	}
	r := &s.recs[id]
	switch a.Verdict {
	case core.Ordered:
		s.acked(id, a.Position)
	case core.Waiting:
	case core.Abandoned, core.Finalized:
		// Never ordered on that shard: retry elsewhere, unless the
		// client already moved on.
		if r.at == sh.id && !r.acked {
			s.reroute(id)
		}
	case core.Unavailable:
		// The copy cannot take it now (it was fenced, or waits for its
		// backups, or its store failed), but another copy may hold it:
		// re-send it to the shard, whose primary stores it once, or ask
		// the copies once the shard is final.
		if r.at == sh.id && !r.acked {
			s.after(s.uniform(time.Millisecond, 5*time.Millisecond), func() {
				if r := &s.recs[id]; r.at != sh.id || r.acked || r.rerouting {
					return
				}
				if sh.finalized {
					sh.resolveIDs([]int64{id})
					return
				}
				s.stats.retries++
				sh.appendRecord(id, clientIDOf(r.client))
			})
		}
	default:
		s.errorf("shard %d answers %v to the append of %s", sh.id, a.Verdict, r.name)
	}
}

// acked records that record id's append returned at position pos.
func (s *cluster) acked(id int64, pos uint64) {
	r := &s.recs[id]
	if r.acked {
		if r.pos != pos {
			s.errorf("append of %s answered at %d and at %d", r.name, r.pos, pos)
		}
		return
	}
	r.acked, r.pos, r.ret = true, pos, s.now
}

// reroute appends an unacknowledged record again on another shard after
// the client's timeout: a retry, with the same client and sequence number.
func (s *cluster) reroute(id int64) {
	r := &s.recs[id]
	if r.rerouting {
		return
	}
	r.rerouting = true
	s.reroutes++
	var retry func()
	retry = func() {
		sh := s.acceptingShard()
		if sh == nil {
			s.after(time.Millisecond, retry)
			return
		}
		r := &s.recs[id]
		r.rerouting = false
		s.stats.retries++
		sh.appendRecord(id, clientIDOf(r.client))
	}
	s.after(s.uniform(2*time.Millisecond, 10*time.Millisecond), retry)
}
