//go:build unix

package benchkit

import (
	"syscall"
	"time"
)

// CPUTime is the CPU time (user + system) this process has used so far:
// the embedded server, the clients and the processor together.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
