package raftnode

import (
	"context"
	"fmt"
	"log/slog"
)

// raftLogger routes etcd raft's log lines into slog. raft's Fatal and Panic
// mean its invariants are broken; both panic rather than os.Exit, so a test
// or a supervisor sees the stack.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) print(level slog.Level, v []any) {
	if r.l.Enabled(context.Background(), level) {
		r.l.Log(context.Background(), level, "raft: "+fmt.Sprint(v...))
	}
}

func (r raftLogger) printf(level slog.Level, format string, v []any) {
	if r.l.Enabled(context.Background(), level) {
		r.l.Log(context.Background(), level, "raft: "+fmt.Sprintf(format, v...))
	}
}

func (r raftLogger) Debug(v ...any)                   { r.print(slog.LevelDebug, v) }
func (r raftLogger) Debugf(format string, v ...any)   { r.printf(slog.LevelDebug, format, v) }
func (r raftLogger) Info(v ...any)                    { r.print(slog.LevelInfo, v) }
func (r raftLogger) Infof(format string, v ...any)    { r.printf(slog.LevelInfo, format, v) }
func (r raftLogger) Warning(v ...any)                 { r.print(slog.LevelWarn, v) }
func (r raftLogger) Warningf(format string, v ...any) { r.printf(slog.LevelWarn, format, v) }
func (r raftLogger) Error(v ...any)                   { r.print(slog.LevelError, v) }
func (r raftLogger) Errorf(format string, v ...any)   { r.printf(slog.LevelError, format, v) }
func (r raftLogger) Fatal(v ...any)                   { r.Panic(v...) }
func (r raftLogger) Fatalf(format string, v ...any)   { r.Panicf(format, v...) }

func (r raftLogger) Panic(v ...any) {
	r.print(slog.LevelError, v)
	panic("raft: " + fmt.Sprint(v...))
}

func (r raftLogger) Panicf(format string, v ...any) {
	r.printf(slog.LevelError, format, v)
	panic("raft: " + fmt.Sprintf(format, v...))
}
