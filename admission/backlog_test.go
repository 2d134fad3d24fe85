package admission

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBacklogPlacement: with Rebalance, the resume pass places no program
// on a worker whose reported prefill backlog is RebalanceMargin or more
// while another worker has room, and places it anyway when every worker
// is that backlogged.
func TestBacklogPlacement(t *testing.T) {
	now := time.Unix(1000, 0)
	run := func(rebalance bool, backlog1, backlog2 int64) WorkerID {
		c, err := NewRawAdmitter(Config{Moves: movesIf(rebalance, 1_000)})
		require.NoError(t, err)
		require.NoError(t, c.AddWorker(1, 10_000))
		require.NoError(t, c.AddWorker(2, 10_000))
		for id, w := range map[string]WorkerID{"big1": 1, "big2": 2} {
			a, err := c.StartRequestOn(now, id, 6_000+int64(w)*1_000, []WorkerID{w})
			require.NoError(t, err)
			require.Equal(t, w, a.Worker)
		}
		a, err := c.StartRequest(now, "q", 3_000)
		require.NoError(t, err)
		require.False(t, a.Run, "fits neither worker")
		for _, id := range []string{"big1", "big2"} {
			require.NoError(t, c.EndRequest(now, id, 1, 0))
			require.NoError(t, c.EndSession(now, id))
		}
		c.SetBacklog(1, backlog1)
		c.SetBacklog(2, backlog2)
		info, _ := c.Worker(1)
		require.Equal(t, backlog1, info.Backlog)
		c.Drain(nil)
		c.Tick(now.Add(5 * time.Second))
		for _, d := range c.Drain(nil) {
			if d.Program == "q" && d.Kind == KindResume {
				return d.Worker
			}
		}
		t.Fatal("q was not resumed")
		return 0
	}
	require.Equal(t, WorkerID(1), run(true, 0, 0), "both idle: the worker with the most room, first by id")
	require.Equal(t, WorkerID(2), run(true, 5_000, 0), "worker 1 has 5,000 tokens of prefill queued")
	require.Equal(t, WorkerID(1), run(true, 999, 0), "under the margin")
	require.Equal(t, WorkerID(1), run(true, 5_000, 5_000), "every worker backlogged: placed anyway")
	require.Equal(t, WorkerID(1), run(false, 5_000, 0), "without Rebalance the backlog is not read")
}

// TestBacklogEscape: while a turn waits for room a program between turns
// stays home, unless its worker's prefill backlog is RebalanceMargin or
// more: then it moves to the first worker the router prefers that is not
// backlogged itself and has room under PauseThreshold (not the resume
// ceiling: the move takes no room a resume would give the waiting turn).
func TestBacklogEscape(t *testing.T) {
	now := time.Unix(1000, 0)
	// a (3,000) on worker 1, between turns; b on worker 2; q waits.
	setup := func(b int64) (*RawAdmitter, func(prefer ...WorkerID) Admission) {
		c, err := NewRawAdmitter(Config{Moves: &Moves{Margin: 1_000}})
		require.NoError(t, err)
		require.NoError(t, c.AddWorker(1, 10_000))
		require.NoError(t, c.AddWorker(2, 10_000))
		start := func(id string, tokens int64, prefer ...WorkerID) Admission {
			a, err := c.StartRequestOn(now, id, tokens, prefer)
			require.NoError(t, err)
			return a
		}
		require.Equal(t, WorkerID(1), start("a", 3_000, 1).Worker)
		require.NoError(t, c.EndRequest(now, "a", 3_000, 0))
		require.Equal(t, WorkerID(2), start("b", b, 2).Worker)
		require.False(t, start("q", 6_000).Run, "q fits neither worker and waits")
		turn := func(prefer ...WorkerID) Admission {
			a := start("a", 3_000, prefer...)
			require.NoError(t, c.EndRequest(now, "a", 3_000, 0))
			return a
		}
		return c, turn
	}
	c, turn := setup(6_000)
	a := turn(2)
	require.Equal(t, WorkerID(1), a.Worker, "a turn waits: no move without a backlog")
	require.Equal(t, ReasonActive, a.Reason)
	c.SetBacklog(1, 2_000)
	c.SetBacklog(2, 2_000)
	require.Equal(t, WorkerID(1), turn(2).Worker, "worker 2 is backlogged too")
	c.SetBacklog(2, 999)
	a = turn(2)
	require.Equal(t, WorkerID(2), a.Worker, "6,000 + 3,100 is over the 8,500 ceiling, under the 9,500 threshold")
	require.Equal(t, ReasonPreferred, a.Reason)
	require.Equal(t, StatusQueued, c.Status("q"))

	c, turn = setup(6_500)
	c.SetBacklog(1, 2_000)
	require.Equal(t, WorkerID(1), turn(2).Worker, "6,500 + 3,100 is over the threshold")
}

// TestRebalanceFirstWithRoom: a program between turns moves to the first
// worker of the router's list that has room for it, not only the first.
func TestRebalanceFirstWithRoom(t *testing.T) {
	now := time.Unix(1000, 0)
	c, err := NewRawAdmitter(Config{Moves: &Moves{}})
	require.NoError(t, err)
	for id := WorkerID(1); id <= 3; id++ {
		require.NoError(t, c.AddWorker(id, 10_000))
	}
	require.Equal(t, WorkerID(1), runOn(t, c, now, "a", 3_000, 1).Worker)
	require.NoError(t, c.EndRequest(now, "a", 3_000, 0))
	require.Equal(t, WorkerID(2), runOn(t, c, now, "full", 8_000, 2).Worker)
	a := runOn(t, c, now, "a", 3_000, 2, 3, 1)
	require.Equal(t, WorkerID(3), a.Worker, "worker 2 has no room for 3,100 more under the 8,500 ceiling")
	require.Equal(t, ReasonPreferred, a.Reason)
}

// TestSetBacklogBadInput: a negative backlog counts as none, and an
// unknown worker is ignored.
func TestSetBacklogBadInput(t *testing.T) {
	c, err := NewRawAdmitter(Config{Moves: &Moves{}})
	require.NoError(t, err)
	require.NoError(t, c.AddWorker(1, 10_000))
	c.SetBacklog(1, -5)
	c.SetBacklog(9, 1_000)
	info, ok := c.Worker(1)
	require.True(t, ok)
	require.Zero(t, info.Backlog)
	_, ok = c.Worker(9)
	require.False(t, ok)
}

// movesIf is &Moves{Margin: margin} when on, nil when off.
func movesIf(on bool, margin int64) *Moves {
	if !on {
		return nil
	}
	return &Moves{Margin: margin}
}
