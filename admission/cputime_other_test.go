//go:build !linux

package admission

import "time"

func threadCPU() (time.Duration, bool) { return 0, false }
func lockThread()                      {}
func unlockThread()                    {}
