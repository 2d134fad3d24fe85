package cputime

import (
	"runtime"
	"testing"
)

func TestCPUTimeAdvances(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p0, t0 := Process(), Thread()
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x += i ^ (x >> 3)
	}
	_ = x
	if runtime.GOOS != "linux" {
		t.Skip("CPU clocks are read on Linux only")
	}
	if Process() <= p0 || Thread() <= t0 {
		t.Fatalf("CPU time did not advance: process %v→%v, thread %v→%v", p0, Process(), t0, Thread())
	}
}
