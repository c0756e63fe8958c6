//go:build !unix

package benchkit

import "time"

// CPUTime is not measured on this platform: the CPU column shows "-".
func CPUTime() time.Duration { return 0 }
