//go:build linux

package ptimer

import (
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// impl is a timerfd. Opened non-blocking and wrapped in an *os.File, it is
// registered with the runtime's poller, so a goroutine blocked reading it
// is woken by the expiry itself, at the kernel's hrtimer precision.
type impl struct {
	mu     sync.Mutex
	f      *os.File // nil when the timerfd could not be made
	fd     uintptr
	closed bool
	// fallback is used when timerfd_create fails (seccomp, old kernels).
	fallback *time.Timer
}

type itimerspec struct {
	interval syscall.Timespec
	value    syscall.Timespec
}

const (
	clockMonotonic = 1
	tfdNonblock    = syscall.O_NONBLOCK
	tfdCloexec     = syscall.O_CLOEXEC
)

func (m *impl) init(fire func()) {
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, tfdNonblock|tfdCloexec, 0)
	if errno != 0 {
		m.fallback = time.AfterFunc(time.Hour, fire)
		m.fallback.Stop()
		return
	}
	m.fd = fd
	m.f = os.NewFile(fd, "ptimer")
	go func() {
		var buf [8]byte
		for {
			// Each read returns the number of expiries since the last one
			// (always 1 for a one-shot timer); it fails once Close closed
			// the file.
			if _, err := m.f.Read(buf[:]); err != nil {
				return
			}
			fire()
		}
	}()
}

func (m *impl) settime(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	spec := itimerspec{value: syscall.NsecToTimespec(int64(d))}
	// A zero value disarms; an error here (impossible for a valid fd and
	// spec) would leave the timer as it was.
	syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, m.fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
}

func (m *impl) reset(d time.Duration) {
	if m.fallback != nil {
		m.fallback.Reset(d)
		return
	}
	m.settime(d)
}

func (m *impl) stop() {
	if m.fallback != nil {
		m.fallback.Stop()
		return
	}
	m.settime(0)
}

func (m *impl) close() {
	if m.fallback != nil {
		m.fallback.Stop()
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		m.f.Close()
	}
}
