//go:build unix

package kvhint

import "syscall"

// processCPU returns the process's user+system CPU time in nanoseconds. On a
// shared machine, CPU time per op is a steadier measure than wall time,
// which includes time spent preempted.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
