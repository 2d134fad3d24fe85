//go:build unix

package trace

import (
	"syscall"
	"time"
)

// processCPU returns the user+system CPU time of the process so far, so
// benchmarks can report CPU cost independent of other load on the machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
