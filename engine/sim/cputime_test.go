package sim

import (
	"time"

	"github.com/agentkv/agentkv/internal/cputime"
)

// processCPU reads a CPU clock for benchmark metrics (internal/cputime).
func processCPU() time.Duration {
	return cputime.Process()
}
