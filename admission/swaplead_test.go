package admission

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSwapMarksAheadOfMaxWait: where only marking Reasoning programs can
// make room for a held turn, they are marked ahead of MaxWait by how long
// turns run (the 90th percentile of the recorded ones, once 8 are), not at
// the Tick before MaxWait; and when a program marked for the swap reaches
// its tool boundary, the held turn resumes at once, not at the next Tick.
func TestSwapMarksAheadOfMaxWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	setup := func(learned int) (*RawAdmitter, time.Time) {
		c, err := NewRawAdmitter(Config{Waits: &Waits{MaxWait: 3 * time.Minute, HomeFirst: true}})
		require.NoError(t, err)
		require.NoError(t, c.AddWorker(1, 10_000))
		now := t0
		for range learned { // turns of one minute each
			runOn(t, c, now, "l", 100, 1)
			now = now.Add(time.Minute)
			require.NoError(t, c.EndRequest(now, "l", 100, 0))
		}
		if learned > 0 {
			require.NoError(t, c.EndSession(now, "l"))
		}
		// a is between turns (Acting); r1..r3 are running. At 9,600 of
		// 10,000 the pause pass pauses a, and a's next turn is held: no
		// worker has room for it, and no Acting program to pause for it.
		runOn(t, c, now, "a", 1_000, 1)
		require.NoError(t, c.EndRequest(now, "a", 1_000, 0))
		for _, id := range []string{"r1", "r2", "r3"} {
			runOn(t, c, now, id, 600, 1)
			require.NoError(t, c.EndRequest(now, id, 600, 0))
		}
		// Their next turns have grown (a running program's turn runs).
		for id, n := range map[string]int64{"r1": 5_000, "r2": 3_000, "r3": 600} {
			runOn(t, c, now, id, n, 1)
		}
		c.Tick(now)
		require.Equal(t, uint64(1), c.Stats().Paused)
		a, err := c.StartRequestOn(now, "a", 1_000, []WorkerID{1})
		require.NoError(t, err)
		require.False(t, a.Run)
		c.Drain(nil)
		return c, now
	}
	// marked ticks at at and reports whether the swap marked programs.
	marked := func(c *RawAdmitter, at time.Time) bool {
		c.Tick(at)
		for _, d := range c.Drain(nil) {
			if d.Kind == KindMark && d.Reason == ReasonSwap {
				return true
			}
		}
		return false
	}

	// Eight turns of a minute recorded (and the setup's four of none): the
	// 90th percentile is a minute, so marked from MaxWait − 5 s − 1 min.
	c, held := setup(8)
	require.False(t, marked(c, held.Add(110*time.Second)))
	require.True(t, marked(c, held.Add(115*time.Second)), "marked 115 s in: 3 minutes less the tick, less a turn")
	// r3 (600) and r2 (3,000) were marked, smallest first; at r2's tool
	// boundary a resumes there and then, between ticks.
	require.NoError(t, c.EndRequest(held.Add(130*time.Second), "r3", 600, 0))
	require.NotEqual(t, StatusRunnable, c.Status("a"), "not room enough yet")
	c.Drain(nil)
	require.NoError(t, c.EndRequest(held.Add(131*time.Second), "r2", 3_000, 0))
	require.Equal(t, StatusRunnable, c.Status("a"))
	var waited time.Duration
	for _, d := range c.Drain(nil) {
		if d.Program == "a" && d.Released {
			waited = d.Waited
		}
	}
	require.Equal(t, 131*time.Second, waited)

	// Fewer than eight turns recorded (the setup's four): marked at the
	// last Tick before MaxWait, not earlier.
	c, held = setup(0)
	require.False(t, marked(c, held.Add(170*time.Second)))
	require.True(t, marked(c, held.Add(175*time.Second)))
}

// TestTurnLead: the lead is 0 until 8 turns are recorded, then the 90th
// percentile of the last 64.
func TestTurnLead(t *testing.T) {
	c, err := NewRawAdmitter(Config{})
	require.NoError(t, err)
	now := time.Unix(1000, 0)
	p := &program{}
	record := func(d time.Duration) {
		p.runSince = now
		c.recordTurn(now.Add(d), p)
		require.True(t, p.runSince.IsZero())
	}
	for i := 1; i <= 7; i++ {
		record(time.Duration(i) * time.Second)
	}
	require.Zero(t, c.turnLead())
	record(8 * time.Second)
	require.Equal(t, 8*time.Second, c.turnLead(), "8 turns: index 7 of 1..8 s")
	for i := 0; i < 64; i++ {
		record(time.Duration(100+i) * time.Second) // the window is now 100..163 s
	}
	require.Equal(t, 157*time.Second, c.turnLead(), "index 57 of 64")
	c.recordTurn(now, p) // a turn that never began to run here: nothing
	require.Equal(t, 64+8, c.nTurns)
}
