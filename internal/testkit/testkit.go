// Package testkit holds the helpers orderstore's tests share: a buffer safe for concurrent use, and
// the test binary run again as a child process (the appliance or an edge killed with SIGKILL).
// Polling for eventual state is embeddedtest.WaitFor. Tests only.
package testkit

import (
	"bytes"
	"sync"
)

// LockedBuffer is a bytes.Buffer that one goroutine may write while
// another reads it (a child's output, a logger's).
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
