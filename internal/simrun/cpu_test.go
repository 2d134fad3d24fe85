package simrun

import (
	"syscall"
	"time"
)

// cpuTime returns the process's user + system CPU time, so benchmarks
// report a cost that other load on a shared machine does not inflate.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
