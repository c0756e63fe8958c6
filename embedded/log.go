package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// slogAdapter is nats-server's Logger on top of slog. Fatalf never exits:
// it logs at Error and hands the message to Start, which returns it.
type slogAdapter struct {
	l     *slog.Logger
	fatal chan<- string
}

// levelTrace is below Debug: nats protocol traces are noisier than debug.
const levelTrace = slog.LevelDebug - 4

func (a *slogAdapter) log(level slog.Level, format string, v []any) {
	if !a.l.Enabled(context.Background(), level) {
		return
	}
	a.l.Log(context.Background(), level, strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (a *slogAdapter) Noticef(format string, v ...any) { a.log(slog.LevelInfo, format, v) }
func (a *slogAdapter) Warnf(format string, v ...any)   { a.log(slog.LevelWarn, format, v) }
func (a *slogAdapter) Errorf(format string, v ...any)  { a.log(slog.LevelError, format, v) }
func (a *slogAdapter) Debugf(format string, v ...any)  { a.log(slog.LevelDebug, format, v) }
func (a *slogAdapter) Tracef(format string, v ...any)  { a.log(levelTrace, format, v) }

func (a *slogAdapter) Fatalf(format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	a.l.Error(msg, "fatal", true)
	select {
	case a.fatal <- msg:
	default: // Start already has one; the first is the cause.
	}
}
