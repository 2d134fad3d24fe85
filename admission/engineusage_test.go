package admission

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEngineUsagePlacement: placement counts a worker as at least as full
// as its engine reports (SetEngineUsage): the door sends a new program
// past a preferred worker whose engine is full of KV no program here
// accounts for, holds it when every engine is, and places it once the
// reports clear; the resume pass does the same.
func TestEngineUsagePlacement(t *testing.T) {
	now := time.Unix(1000, 0)
	c, err := NewRawAdmitter(Config{})
	require.NoError(t, err)
	require.NoError(t, c.AddWorker(1, 10_000))
	require.NoError(t, c.AddWorker(2, 10_000))

	a := runOn(t, c, now, "a", 3_000, 1, 2)
	require.Equal(t, WorkerID(1), a.Worker, "no report: the preferred worker")

	c.SetEngineUsage(1, 7_000) // 7,000 + 3,100 > the 8,500 ceiling
	info, ok := c.Worker(1)
	require.True(t, ok)
	require.Equal(t, int64(7_000), info.EngineUsed)
	require.InDelta(t, 3_000, info.Used, 1, "Used stays the programs' weight")
	a = runOn(t, c, now, "b", 3_000, 1, 2)
	require.Equal(t, WorkerID(2), a.Worker, "worker 1's engine reports 7,000 in use")

	c.SetEngineUsage(1, 2_000) // under the programs' own 3,000: no effect
	a = runOn(t, c, now, "c", 3_000, 1, 2)
	require.Equal(t, WorkerID(1), a.Worker, "a report under the programs' weight changes nothing")

	c.SetEngineUsage(1, 9_000)
	c.SetEngineUsage(2, 9_000)
	a, err = c.StartRequestOn(now, "d", 1_000, []WorkerID{1, 2})
	require.NoError(t, err)
	require.False(t, a.Run, "both engines report 9,000 of 10,000 in use")
	c.Drain(nil)
	c.Tick(now.Add(5 * time.Second))
	require.Equal(t, StatusQueued, c.Status("d"), "the resume pass reads the reports too")
	c.SetEngineUsage(2, -1)
	info, _ = c.Worker(2)
	require.Zero(t, info.EngineUsed, "a negative report clears it")
	c.Tick(now.Add(10 * time.Second))
	var at WorkerID
	for _, d := range c.Drain(nil) {
		if d.Program == "d" && d.Kind == KindResume {
			at = d.Worker
		}
	}
	require.Equal(t, WorkerID(2), at, "resumed where the report cleared")
}

// TestEngineUsageDoesNotPause: a report over the pause threshold pauses
// nothing (pausing would lower it only at the next report), and an
// unknown worker's report is ignored.
func TestEngineUsageDoesNotPause(t *testing.T) {
	now := time.Unix(1000, 0)
	c, err := NewRawAdmitter(Config{})
	require.NoError(t, err)
	require.NoError(t, c.AddWorker(1, 10_000))
	runOn(t, c, now, "a", 3_000, 1)
	require.NoError(t, c.EndRequest(now, "a", 3_000, 0))
	runOn(t, c, now, "b", 3_000, 1)
	require.NoError(t, c.EndRequest(now, "b", 3_000, 0))
	c.SetEngineUsage(1, 10_000)
	c.SetEngineUsage(9, 5)
	c.Tick(now.Add(5 * time.Second))
	require.Zero(t, c.Stats().Paused)
	require.Equal(t, StatusRunnable, c.Status("a"))
	require.Equal(t, StatusRunnable, c.Status("b"))
	_, ok := c.Worker(9)
	require.False(t, ok)
}

// TestEngineUsageStaleReport: a report counts only what the programs did
// not account for when it came, so a program that ends after the report
// frees its room at once, where the whole (stale) report would block it
// until the next one.
func TestEngineUsageStaleReport(t *testing.T) {
	now := time.Unix(1000, 0)
	c, err := NewRawAdmitter(Config{})
	require.NoError(t, err)
	require.NoError(t, c.AddWorker(1, 10_000))
	runOn(t, c, now, "a", 6_000, 1)
	c.SetEngineUsage(1, 6_400) // a's blocks, a little over its tokens
	require.NoError(t, c.EndRequest(now, "a", 6_000, 0))
	require.NoError(t, c.EndSession(now, "a"))
	a := runOn(t, c, now, "b", 6_000, 1)
	require.True(t, a.Run, "a's room is free although the last report still counts its blocks")
	require.Equal(t, WorkerID(1), a.Worker)

	c.SetEngineUsage(1, 6_000+3_000) // b, and 3,000 that no program accounts for
	a, err = c.StartRequestOn(now, "c", 1_000, []WorkerID{1})
	require.NoError(t, err)
	require.False(t, a.Run, "6,000 + (3,000 − the 500 slack) + 1,100 is over the 8,500 ceiling")
}
