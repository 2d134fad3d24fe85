package radix

import (
	"time"

	"github.com/agentkv/agentkv/internal/cputime"
)

// threadCPU reads a CPU clock for benchmark metrics (internal/cputime).
func threadCPU() time.Duration {
	return max(cputime.Thread(), 0)
}
