package playerd

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/augur-log/augur/internal/metrics"
	"github.com/augur-log/augur/internal/player"
)

// Status is what `augur player status` shows; the loop publishes a fresh
// one on every health tick.
type Status struct {
	Time time.Time `json:"time"`
	// CurrentIndex is the index (position+1) of the last main-stream entry
	// dispatched.
	CurrentIndex uint64         `json:"current_index"`
	Targets      []TargetStatus `json:"targets"`
}

// TargetStatus is one target's line of the status.
type TargetStatus struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	State string `json:"state"`
	Up    bool   `json:"up"`
	Term  uint64 `json:"term"`
	// LastAck is the last index the target is known to have applied.
	LastAck uint64 `json:"last_ack"`
	// Lag is CurrentIndex minus LastAck.
	Lag      uint64 `json:"lag"`
	Queued   int    `json:"queued"`
	Inflight int    `json:"inflight_batches"`
}

// publish takes a status snapshot for readers off the loop and updates the
// gauges.
func (s *Server) publish() {
	cur := s.core.CurrentIndex()
	st := &Status{Time: time.Now(), CurrentIndex: uint64(cur)}
	for _, t := range s.ts {
		ts := TargetStatus{Name: t.spec.Name, Addr: t.spec.Addr, Up: t.up, State: player.Suspended.String()}
		if s.core.Started() {
			cs := s.core.Status(t.id)
			ts.State, ts.Term, ts.LastAck, ts.Queued, ts.Inflight = cs.State.String(), uint64(cs.Term), uint64(cs.LastAck), cs.Queued, cs.Inflight
			if cs.LastAck < cur {
				ts.Lag = uint64(cur - cs.LastAck)
			}
		}
		metrics.PlayerLag.WithLabelValues(t.spec.Name).Set(float64(ts.Lag))
		st.Targets = append(st.Targets, ts)
	}
	metrics.PlayerCurrentIndex.Set(float64(cur))
	s.status.Store(st)
}

// Status returns the last published status.
func (s *Server) Status() *Status { return s.status.Load() }

// StatusHandler serves the status as JSON.
func (s *Server) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.Status())
	})
}
