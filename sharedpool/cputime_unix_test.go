//go:build unix

package sharedpool

import "syscall"

// cpuNanos returns the CPU time (user + system) the process has used, so
// benchmarks can report cost independent of how busy the machine is.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
