package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// slogAdapter is nats-server's Logger on top of slog. Fatalf never exits:
// it logs at Error and hands the message to Start, which returns it.
type slogAdapter struct {
	l     *slog.Logger
	fatal chan<- string

	// Warnings and errors logged while the server starts (stream and
	// consumer recovery), kept for [Server.StartupProblems].
	mu       sync.Mutex
	starting bool
	problems []string

	onError func(string)
}

// maxStartupProblems bounds what is kept of a start-up's warnings.
const maxStartupProblems = 100

// logKept logs a warning or an error, and keeps it while the server starts.
func (a *slogAdapter) logKept(level slog.Level, format string, v []any) string {
	msg := text(format, v)
	a.l.Log(context.Background(), level, msg)
	kept := msg
	if len(kept) > 512 {
		kept = kept[:512] + "..."
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.starting && len(a.problems) < maxStartupProblems {
		a.problems = append(a.problems, kept)
	}
	return msg
}

// started ends the start-up phase and returns what it kept.
func (a *slogAdapter) started() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.starting = false
	return a.problems
}

// levelTrace is below Debug: nats protocol traces are noisier than debug.
const levelTrace = slog.LevelDebug - 4

// text is a nats-server log message.
func text(format string, v []any) string { return strings.TrimSpace(fmt.Sprintf(format, v...)) }

// log formats the message only when level is enabled.
func (a *slogAdapter) log(level slog.Level, format string, v []any) {
	if a.l.Enabled(context.Background(), level) {
		a.l.Log(context.Background(), level, text(format, v))
	}
}

func (a *slogAdapter) Noticef(format string, v ...any) { a.log(slog.LevelInfo, format, v) }
func (a *slogAdapter) Debugf(format string, v ...any)  { a.log(slog.LevelDebug, format, v) }
func (a *slogAdapter) Tracef(format string, v ...any)  { a.log(levelTrace, format, v) }

// Warnf and Errorf format every message: start-up keeps them.
func (a *slogAdapter) Warnf(format string, v ...any) { a.logKept(slog.LevelWarn, format, v) }

func (a *slogAdapter) Errorf(format string, v ...any) {
	msg := a.logKept(slog.LevelError, format, v)
	if a.onError != nil {
		a.onError(msg)
	}
}

func (a *slogAdapter) Fatalf(format string, v ...any) {
	msg := text(format, v)
	a.l.Error(msg, "fatal", true)
	select {
	case a.fatal <- msg:
	default: // Start already has one; the first is the cause.
	}
}
