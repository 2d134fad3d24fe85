//go:build !unix

package kvhint

func processCPU() int64 { return -1 }
