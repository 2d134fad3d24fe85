package flashindex

import (
	"syscall"
	"time"
	"unsafe"
)

// processCPU returns the CPU time (user + system) the test process has
// used so far, all threads and the garbage collector included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processSys returns the system (kernel) part of processCPU: page faults
// on fresh memory, mostly.
func processSys() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Stime.Nano())
}

// threadCPU returns the calling thread's CPU time in nanoseconds
// (CLOCK_THREAD_CPUTIME_ID), or -1 where it cannot be read. Callers lock
// the goroutine to its thread; time spent preempted is not counted.
func threadCPU() int64 {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return -1
	}
	return ts.Nano()
}
