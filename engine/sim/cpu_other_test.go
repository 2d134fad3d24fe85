//go:build !unix

package sim

import "time"

// processCPU is unavailable here; benchmarks then report 0 CPU seconds.
func processCPU() time.Duration { return 0 }
