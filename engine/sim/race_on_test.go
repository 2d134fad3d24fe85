//go:build race

package sim

// raceEnabled shrinks the trace-driven tests under the race detector.
const raceEnabled = true
