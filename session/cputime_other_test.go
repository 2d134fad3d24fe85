//go:build !linux

package session

import "time"

// threadCPU is unavailable here; the cpu-ns/op metric reads 0.
func threadCPU() time.Duration { return 0 }
