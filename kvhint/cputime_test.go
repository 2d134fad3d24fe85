package kvhint

import (
	"runtime"

	"github.com/agentkv/agentkv/internal/cputime"
)

// processCPU returns the process CPU time in nanoseconds, or -1 where it
// cannot be read.
func processCPU() int64 {
	if runtime.GOOS != "linux" {
		return -1
	}
	return int64(cputime.Process())
}
