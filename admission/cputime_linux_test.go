//go:build linux

package admission

import (
	"runtime"
	"syscall"
	"time"
)

// threadCPU returns the calling OS thread's CPU time (RUSAGE_THREAD), so
// benchmarks on a shared, oversubscribed machine can report CPU time per
// operation next to wall time. Callers lock the goroutine to its thread.
// Background GC work on other threads is not included.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

func lockThread()   { runtime.LockOSThread() }
func unlockThread() { runtime.UnlockOSThread() }
