//go:build !linux

package ptimer

import "time"

// impl is a plain time.Timer where there is no timerfd.
type impl struct {
	t *time.Timer
}

func (m *impl) init(fire func()) {
	m.t = time.AfterFunc(time.Hour, fire)
	m.t.Stop()
}

func (m *impl) reset(d time.Duration) { m.t.Reset(d) }
func (m *impl) stop()                 { m.t.Stop() }
func (m *impl) close()                { m.t.Stop() }
