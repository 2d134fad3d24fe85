//go:build race

package vllm

// raceAllocFactor: under -race the compiler keeps the temporary of
// slices.Grow's append(s, make([]T, n)...) idiom, which a normal build
// elides, so every grown slice is allocated twice.
const raceAllocFactor = 2
