// Package lograte logs what anyone can cause (a refused request) at most once a second for each
// kind: a flood would fill the log, and use up journald's rate limit, dropping orderstore's lines.
package lograte

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter is ready at its zero value; Now, if set, is its clock (tests).
type Limiter struct {
	Now  func() time.Time
	mu   sync.Mutex
	last map[string]time.Time
	left map[string]int
}

// Warn logs msg and args at warn on log, adding "suppressed": the lines of kind left out since the
// last. Within a second of the last, it only counts this one.
func (l *Limiter) Warn(log *slog.Logger, kind, msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	if l.last == nil {
		l.last, l.left = map[string]time.Time{}, map[string]int{}
	}
	if now.Sub(l.last[kind]) < time.Second {
		l.left[kind]++
		return
	}
	if n := l.left[kind]; n > 0 {
		args = append(args, "suppressed", n)
	}
	l.last[kind], l.left[kind] = now, 0
	log.Warn(msg, args...)
}
