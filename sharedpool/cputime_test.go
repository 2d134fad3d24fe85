package sharedpool

import "github.com/agentkv/agentkv/internal/cputime"

// cpuNanos reads a CPU clock for benchmark metrics (internal/cputime).
func cpuNanos() int64 {
	return int64(cputime.Process())
}
