// Package cputime reads process and thread CPU time, so benchmarks on a
// shared, loaded machine can report a cost that other jobs do not inflate.
package cputime

import "time"

// Process returns the CPU time (user + system) the process has used so
// far, all threads and the garbage collector included; 0 where it cannot be
// read.
func Process() time.Duration { return process() }

// System returns the kernel part of Process (page faults on fresh memory,
// mostly); 0 where it cannot be read.
func System() time.Duration { return system() }

// Thread returns the calling thread's CPU time, or -1 where it cannot be
// read. Callers lock the goroutine to its thread (runtime.LockOSThread);
// time spent preempted is not counted, which is the point.
func Thread() time.Duration { return thread() }
