//go:build !linux

package e2e

import "syscall"

// procAttr has no parent-death signal to ask for outside Linux; the test's
// cleanup stops the servers.
func procAttr() *syscall.SysProcAttr { return nil }
