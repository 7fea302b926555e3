//go:build linux

package e2e

import "syscall"

// procAttr makes the kernel kill a server process if the test process dies
// first, so a crashed test run leaves no servers behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
