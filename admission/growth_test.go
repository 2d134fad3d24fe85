package admission

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReserveGrowth: once 8 programs have ended at 40,000 tokens, new
// programs of 5,000 are placed as if 40,000 (with the reasoning
// programs' growth reserved), so a 100,000-token worker (85,000 under the
// resume ceiling) takes two, where sizing by the current context takes
// sixteen; before 8 have ended nothing is reserved; Acting programs keep
// no reservation.
func TestReserveGrowth(t *testing.T) {
	now := time.Unix(1000, 0)
	run := func(reserve bool, ended int) (placed int, c *RawAdmitter) {
		c, err := NewRawAdmitter(Config{ReserveGrowth: reserve})
		require.NoError(t, err)
		require.NoError(t, c.AddWorker(1, 100_000))
		for i := range ended {
			id := fmt.Sprint("done-", i)
			for turn := range 2 {
				a, err := c.StartRequest(now, id, int64(1000+turn*20_000))
				require.NoError(t, err)
				require.True(t, a.Run)
				require.NoError(t, c.EndRequest(now, id, int64(1000+turn*20_000), 19_000))
			}
			require.NoError(t, c.EndSession(now, id))
		}
		for i := range 20 {
			a, err := c.StartRequest(now, fmt.Sprint("new-", i), 5_000)
			require.NoError(t, err)
			if a.Run {
				placed++
			}
		}
		return placed, c
	}
	placed, c := run(true, 8)
	require.Equal(t, int64(40_000), c.growthEst)
	require.Equal(t, 2, placed, "5,000 + 35,000 reserved + 40,100 fits; a third does not")
	placed, _ = run(false, 8)
	require.Equal(t, 16, placed, "by current size: 16 × 5,000 + 5,100 ≤ 85,000")
	placed, c = run(true, 7)
	require.Zero(t, c.growthEst)
	require.Equal(t, 16, placed, "seven ended programs are not enough to learn from")

	// An Acting program keeps no reservation: with both placed programs in
	// a tool call, a third fits (5,000·2 + 40,100 ≤ 85,000).
	_, c = run(true, 8)
	for i := range 2 {
		require.NoError(t, c.EndRequest(now, fmt.Sprint("new-", i), 5_000, 0))
	}
	require.Zero(t, c.reserved(c.workers[0]))
	a, err := c.StartRequest(now, "late", 5_000)
	require.NoError(t, err)
	require.False(t, a.Run, "the door is first come, first served: queued newcomers go first")
	r := c.Tick(now.Add(time.Second))
	require.Equal(t, 1, r.Resumed, "one queued program resumes into the room the Acting ones do not reserve")
}

// TestResumeOnEnd: a program queued at the door takes the room a running
// program's end frees at once with ResumeOnEnd, and only at the next Tick
// without it.
func TestResumeOnEnd(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, on := range []bool{true, false} {
		c, err := NewRawAdmitter(Config{ResumeOnEnd: on})
		require.NoError(t, err)
		require.NoError(t, c.AddWorker(1, 100_000))
		a, err := c.StartRequest(now, "big", 70_000)
		require.NoError(t, err)
		require.True(t, a.Run)
		a, err = c.StartRequest(now, "next", 30_000)
		require.NoError(t, err)
		require.False(t, a.Run, "70,000 + 30,100 > 85,000")
		require.NoError(t, c.EndRequest(now, "big", 70_000, 10))
		c.Drain(nil)
		require.NoError(t, c.EndSession(now, "big"))
		released := func() bool {
			for _, d := range c.Drain(nil) {
				if d.Program == "next" && d.Released {
					return true
				}
			}
			return false
		}
		require.Equal(t, on, released(), "ResumeOnEnd=%v: released at the end", on)
		if !on {
			c.Tick(now.Add(time.Second))
			require.True(t, released(), "released at the next Tick")
		}
		require.Equal(t, StatusRunnable, c.Status("next"))
	}
}
