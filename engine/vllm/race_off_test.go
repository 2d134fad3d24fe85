//go:build !race

package vllm

const raceAllocFactor = 1
