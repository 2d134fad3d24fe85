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
		c, err := NewRawAdmitter(Config{Door: doorIf(reserve)})
		require.NoError(t, err)
		require.NoError(t, c.AddWorker(1, 100_000))
		endPrograms(t, c, now, ended, 40_000)
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
		c, err := NewRawAdmitter(Config{Waits: &Waits{ResumeOnEnd: on}})
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

// TestColdStartPrograms: before anything has ended, programs are sized
// at an equal share of the largest worker's room for ColdStartPrograms
// programs; the share follows the workers' capacities, and gives way once
// 8 programs have ended: to what they grew to, or, when none ran two
// turns (single-turn requests, as in the Mooncake trace), to nothing.
func TestColdStartPrograms(t *testing.T) {
	now := time.Unix(1000, 0)
	c, err := NewRawAdmitter(Config{Door: &Door{ColdStartPrograms: 2}})
	require.NoError(t, err)
	require.Zero(t, c.growthEst, "no worker, no room to share")
	require.NoError(t, c.AddWorker(1, 100_000))
	require.Equal(t, int64(42_500), c.growthEst, "85,000 under the ceiling, for two")
	placed := 0
	for i := range 20 {
		a, err := c.StartRequest(now, fmt.Sprint("cold-", i), 5_000)
		require.NoError(t, err)
		if a.Run {
			placed++
		}
	}
	require.Equal(t, 1, placed, "as if 42,500 each: 42,600 + 37,500 reserved + 42,600 > 85,000")
	require.NoError(t, c.AddWorker(2, 200_000))
	require.Equal(t, int64(85_000), c.growthEst, "the largest worker's room")
	require.NoError(t, c.SetCapacity(2, 50_000))
	require.Equal(t, int64(42_500), c.growthEst)
	require.NoError(t, c.RemoveWorker(now, 1))
	require.Equal(t, int64(21_250), c.growthEst)

	// Eight single-turn programs end: nothing was learned, and the prior
	// is dropped.
	c, err = NewRawAdmitter(Config{Door: &Door{ColdStartPrograms: 8}})
	require.NoError(t, err)
	require.NoError(t, c.AddWorker(1, 1_000_000))
	for i := range 8 {
		id := fmt.Sprint("one-", i)
		a, err := c.StartRequest(now, id, 1_000)
		require.NoError(t, err)
		require.True(t, a.Run)
		require.NoError(t, c.EndRequest(now, id, 1_000, 10))
		require.NoError(t, c.EndSession(now, id))
		if i < 7 {
			require.Equal(t, int64(106_250), c.growthEst, "after %d ends", i+1)
		}
	}
	require.Zero(t, c.growthEst)

}

// TestDoorActingGrowth: an Acting program reserves nothing against held
// turns, but with DoorActingGrowth the door keeps that share of its growth
// from new programs, both when a new program arrives and at the resume
// pass; a subagent of a running program is not a new program.
func TestDoorActingGrowth(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, share := range []float64{0, 0.5, 1} {
		// One worker of 100,000 (85,000 under the ceiling); programs are
		// learned to grow to 50,000.
		c, err := NewRawAdmitter(Config{Door: &Door{ActingGrowth: share}, Waits: &Waits{MaxWait: 3 * time.Minute}})
		require.NoError(t, err)
		require.NoError(t, c.AddWorker(1, 100_000))
		learn(t, c, now, 50_000)
		// A program of 10,000, reserved as 50,000, goes Acting: its growth
		// (40,000) is reserved against nothing but the door.
		a, err := c.StartRequest(now, "run", 10_000)
		require.NoError(t, err)
		require.True(t, a.Run)
		require.NoError(t, c.EndRequest(now, "run", 10_000, 0))
		require.Zero(t, c.reserved(c.workers[0]))
		require.Equal(t, share*40_000, c.doorIf(c.workers[0], true))
		require.Zero(t, c.doorIf(c.workers[0], false))

		// A new program is sized 50,100: 85,000 − 10,000 − share·40,000 of
		// room takes it at 0 and 0.5, not at 1.
		a, err = c.StartRequest(now, "new", 20_000)
		require.NoError(t, err)
		require.Equal(t, share < 1, a.Run, "share %v", share)
		c.Drain(nil)

		// A newcomer queued while the program reasons (its growth reserved
		// against everything) is resumed, once the program is Acting, only
		// if the door's share of that growth leaves room.
		c2, err := NewRawAdmitter(c.Config())
		require.NoError(t, err)
		require.NoError(t, c2.AddWorker(1, 100_000))
		learn(t, c2, now, 50_000)
		a, err = c2.StartRequest(now, "run", 10_000)
		require.NoError(t, err)
		require.True(t, a.Run)
		a, err = c2.StartRequest(now, "new", 20_000)
		require.NoError(t, err)
		require.False(t, a.Run, "10,000 + 40,000 reserved + 50,100 > 85,000")
		require.NoError(t, c2.EndRequest(now, "run", 10_000, 0))
		c2.Tick(now.Add(5 * time.Second))
		want := StatusRunnable
		if share == 1 {
			want = StatusQueued // 10,000 + 40,000 + 50,100 > 85,000
		}
		require.Equal(t, want, c2.Status("new"), "share %v", share)
		if share < 1 {
			continue
		}
		// A subagent of the running program is placed by the room alone
		// (10,000 + 50,100), though a newcomer waits.
		a, err = c2.StartSubRequest(now.Add(6*time.Second), "run/sub", "run", 20_000, nil)
		require.NoError(t, err)
		require.True(t, a.Run, "a subagent does not wait for the door's reserve")
	}
}

// learn ends 8 programs of two turns at size tokens: c learns that
// programs grow to size.
func learn(t testing.TB, c *RawAdmitter, now time.Time, size int64) {
	t.Helper()
	endPrograms(t, c, now, growthMin, size)
	require.Equal(t, size, c.growthEst)
	c.Drain(nil)
}

// endPrograms runs n programs of two turns, each ending at size tokens,
// and ends them.
func endPrograms(t testing.TB, c *RawAdmitter, now time.Time, n int, size int64) {
	t.Helper()
	for i := range n {
		id := fmt.Sprint("done-", i)
		for turn := range 2 {
			a, err := c.StartRequest(now, id, size/2)
			require.NoError(t, err)
			require.True(t, a.Run)
			require.NoError(t, c.EndRequest(now, id, size/2+int64(turn)*size/2, 0))
		}
		require.NoError(t, c.EndSession(now, id))
	}
}

// doorIf is &Door{} when on, nil when off.
func doorIf(on bool) *Door {
	if !on {
		return nil
	}
	return &Door{}
}

// TestColdStartObserved: during the cold start, the prior is capped at
// ColdStartObserved times the largest unique tail a program had at the end
// of a turn; once growthMin programs have ended, what was learned rules.
func TestColdStartObserved(t *testing.T) {
	now := time.Unix(1000, 0)
	c, err := NewRawAdmitter(Config{Door: &Door{ColdStartPrograms: 2, ColdStartObserved: 2}})
	require.NoError(t, err)
	require.NoError(t, c.AddWorker(1, 100_000))
	require.Equal(t, int64(42_500), c.growthEst, "no turn has ended: the prior")
	a, err := c.StartRequest(now, "p", 5_000)
	require.NoError(t, err)
	require.True(t, a.Run)
	require.NoError(t, c.EndRequest(now, "p", 5_000, 1_000))
	require.Equal(t, int64(12_000), c.growthEst, "twice the largest tail, 6,000")
	_, err = c.StartRequest(now, "p", 30_000)
	require.NoError(t, err)
	require.NoError(t, c.EndRequest(now, "p", 30_000, 0))
	require.Equal(t, int64(42_500), c.growthEst, "never above the prior")
	info, _ := c.Worker(1)
	require.Equal(t, 1, info.Programs)
}

// TestColdStartFloor: with ColdStartFloor, the cold start begins at the
// floor's share (a batch's first programs are placed sixteen to a worker's
// room, not eight), rises with what programs have grown to (ColdStartObserved
// times the largest tail), never above ColdStartPrograms' share; after
// growthMin ends, what was learned rules. Progress is by events, not time.
func TestColdStartFloor(t *testing.T) {
	now := time.Unix(1000, 0)
	door := &Door{ColdStartPrograms: 8, ColdStartObserved: 1.5, ColdStartFloor: 16}
	c, err := NewRawAdmitter(Config{Door: door})
	require.NoError(t, err)
	require.NoError(t, c.AddWorker(1, 160_000)) // 136,000 under the ceiling
	require.Equal(t, int64(8_500), c.growthEst, "nothing ran yet: the floor, 136,000 / 16")
	placed := 0
	for i := range 20 {
		a, err := c.StartRequest(now, fmt.Sprint("p", i), 2_000)
		require.NoError(t, err)
		if a.Run {
			placed++
		}
	}
	require.Equal(t, 15, placed, "8,600 each with the reserve: 15 fit where the prior alone fits 7")
	require.NoError(t, c.EndRequest(now, "p0", 6_000, 2_000))
	require.Equal(t, int64(12_000), c.growthEst, "1.5 × the largest tail so far, 8,000")
	require.NoError(t, c.EndRequest(now, "p1", 20_000, 0))
	require.Equal(t, int64(17_000), c.growthEst, "never above the prior, 136,000 / 8")

	// Without the floor the prior rules from the start: half as many fit.
	c, err = NewRawAdmitter(Config{Door: &Door{ColdStartPrograms: 8}})
	require.NoError(t, err)
	require.NoError(t, c.AddWorker(1, 160_000))
	placed = 0
	for i := range 20 {
		a, err := c.StartRequest(now, fmt.Sprint("p", i), 2_000)
		require.NoError(t, err)
		if a.Run {
			placed++
		}
	}
	require.Equal(t, 7, placed)

	// Eight programs of two turns end at 30,000: what was learned rules.
	c, err = NewRawAdmitter(Config{Door: door})
	require.NoError(t, err)
	require.NoError(t, c.AddWorker(1, 1_000_000))
	endPrograms(t, c, now, 8, 30_000)
	require.Equal(t, int64(30_000), c.growthEst)
}
