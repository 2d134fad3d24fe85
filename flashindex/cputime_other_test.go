//go:build !linux

package flashindex

import "time"

func processCPU() time.Duration { return 0 }

func threadCPU() int64 { return -1 }

func processSys() time.Duration { return 0 }
