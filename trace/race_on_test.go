//go:build race

package trace

// raceEnabled lets heavy single-goroutine tests shrink under -race.
const raceEnabled = true
