package sim

import (
	"fmt"
	"strconv"
	"time"

	"github.com/augur-log/augur/internal/check"
)

// linearizabilityTimeout bounds porcupine's search over one run's appends;
// a run's few thousand appends take it milliseconds, so running out of
// time means something is badly wrong.
const linearizabilityTimeout = 10 * time.Second

// report records err's violations, or err, as errors of the run.
func (s *cluster) report(err error) {
	if vs, ok := err.(check.Violations); ok {
		for _, v := range vs {
			s.errorf("%v", v)
		}
	} else if err != nil {
		s.errorf("%v", err)
	}
}

// verify runs the end-of-run checks: the invariants of package check over
// the run's history, then what only the simulator can see (shards' logs,
// leaves, views).
func (s *cluster) verify() {
	if len(s.errs) > 0 {
		return
	}
	appends, final := s.history()
	logs := []check.Log{final}
	for _, sb := range s.subs {
		logs = append(logs, sb.log(final.End))
	}
	report := s.report
	// Once the faults stop, every append completes (invariant 1's
	// liveness half).
	report(check.Returned(appends, nil))
	s.checkLiveness()
	report(check.Acknowledged(appends, logs...))
	report(check.Order(appends, logs...))
	report(check.StoredOnce(appends, logs...))
	report(check.RealTime(appends))
	report(check.Linearizable(appends, nil, s.dense(), linearizabilityTimeout))
	s.checkCopies()
	for _, sb := range s.subs {
		h := sb.history()
		report(check.Speculation(h, final))
		report(check.Converged(h, final))
	}
	if len(s.errs) > 0 {
		return
	}
	// A view change, or a misspeculation, needs a whole shard that failed
	// or looked failed: every server of its configuration died, or it was
	// cut off, or its reports were lost. The crash of one server of a
	// shard is masked by a failover.
	faulted := s.failed != nil || len(s.failedShards) > 0 || len(s.cutOff) > 0 || s.stats.lostReports > 0
	if !faulted && len(s.views) > 0 {
		s.errorf("failover: no whole shard failed, but the leader started view %d: %+v", len(s.views), s.views[0])
	}
	for _, sb := range s.subs {
		if !faulted && sb.fails > 0 {
			s.errorf("failover: sub %d: %d misspeculations without a whole-shard failure", sb.id, sb.fails)
		}
	}
	// A shard keeps its id and stays live while one server of its
	// configuration survives.
	for _, sh := range s.order {
		row := s.ld.st.Shard(sh.id)
		if s.crashedReplicas[sh.id] && !s.failedShards[sh.id] && !s.cutOff[sh.id] && s.failed != sh && row != nil && row.Failed {
			s.errorf("failover: shard %d lost one server, and was finalized though the other survived", sh.id)
		}
	}
	// Every leave ended, busy or idle.
	for _, sh := range s.order {
		if sh.leaving && sh.alive && !sh.finalized {
			s.errorf("shard %d began to leave but was never finalized", sh.id)
		}
	}
	// Every shard still live has all it holds ordered.
	for _, sh := range s.order {
		if !sh.alive || sh.finalized {
			continue
		}
		ordered := s.lastCut.Len(sh.id)
		for i := ordered; i < uint64(len(sh.log)); i++ {
			if sh.log[i] != noop {
				s.errorf("live shard %d: record at local %d not ordered (ordered %d, stored %d)", sh.id, i, ordered, len(sh.log))
				break
			}
		}
	}
}

// history returns the run's appends and the final order the committed
// cuts define, for package check. An append covers its retries: it
// returns when the cut that ordered it commits, at the position that cut
// gave it; one never ordered has not returned.
func (s *cluster) history() ([]check.Append, check.Log) {
	appends := make([]check.Append, len(s.recs))
	for id, rec := range s.recs {
		a := check.Append{Client: uint64(rec.client), Seq: uint64(id), Record: rec.name, Call: rec.call.Sub(s.start)}
		if rec.acked {
			// What the shard answered (or a resolution said): check
			// holds it to the order the readers saw.
			a.Outcome, a.Position = check.Acked, rec.pos
			if rec.pos < uint64(len(s.eagerShard)) {
				a.Shard = uint32(s.eagerShard[rec.pos])
			}
			a.Return = rec.ret.Sub(s.start)
			if s.plant == bugEarlyAck {
				a.Return = a.Call + time.Microsecond
				s.planted = true
			}
		} else {
			a.Return, a.Err = s.now.Sub(s.start), fmt.Errorf("never ordered; %s", s.whereIs(int64(id)))
		}
		appends[id] = a
	}
	final := check.Log{Reader: "cuts", End: uint64(len(s.eager)), Dense: s.dense()}
	for p, e := range s.eager {
		if e != noop {
			final.Entries = append(final.Entries, check.Entry{Pos: uint64(p), Shard: uint32(s.eagerShard[p]), Record: s.name(e)})
		}
	}
	return appends, final
}

// whereIs says where an unordered record sits, for the report.
func (s *cluster) whereIs(id int64) string {
	for _, sh := range s.order {
		for i, e := range sh.log {
			if e == id {
				return fmt.Sprintf("it sits at shard %d local %d (stored %d, durable %d, ordered %d, alive %v, finalized %v)",
					sh.id, i, len(sh.log), sh.durable, s.lastCut.Len(sh.id), sh.alive, sh.finalized)
			}
		}
	}
	return "it sits nowhere"
}

func itoa(n int) string { return strconv.Itoa(n) }
