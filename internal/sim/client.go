package sim

import (
	"math"
	"time"

	"github.com/augur-log/augur/internal/cut"
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
		sh.appendRecord(id)
		c.schedule()
	})
}

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

// reroute appends an unacknowledged record again on another shard after
// the client's timeout: a retry, with the same client and sequence number.
func (s *cluster) reroute(id int64) {
	s.reroutes++
	var retry func()
	retry = func() {
		sh := s.acceptingShard()
		if sh == nil {
			s.after(time.Millisecond, retry)
			return
		}
		sh.appendRecord(id)
		s.stats.records--
	}
	s.after(s.uniform(2*time.Millisecond, 10*time.Millisecond), retry)
}
