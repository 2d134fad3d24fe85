//go:build !unix

package sharedpool

// cpuNanos is unavailable here; benchmarks then omit CPU-time metrics.
func cpuNanos() int64 { return 0 }
