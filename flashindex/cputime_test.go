package flashindex

import (
	"time"

	"github.com/agentkv/agentkv/internal/cputime"
)

// processCPU, processSys and threadCPU read the CPU clocks benchmarks
// report (internal/cputime); threadCPU is in nanoseconds, -1 where it
// cannot be read.
func processCPU() time.Duration { return cputime.Process() }

func processSys() time.Duration { return cputime.System() }

func threadCPU() int64 { return int64(cputime.Thread()) }
