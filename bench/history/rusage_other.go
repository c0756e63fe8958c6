//go:build !unix

package main

import "time"

// cpuTime is not measured on this platform: the CPU column shows "-".
func cpuTime() time.Duration { return 0 }
