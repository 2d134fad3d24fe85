package admission

import (
	"time"

	"github.com/agentkv/agentkv/internal/cputime"
)

// threadCPU returns the calling thread's CPU time, and false where it
// cannot be read.
func threadCPU() (time.Duration, bool) {
	t := cputime.Thread()
	return t, t >= 0
}
