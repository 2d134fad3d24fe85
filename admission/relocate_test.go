package admission

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRelocate: a running program moves, with its turn, to the first
// offered worker with room, else to the roomiest offered one; a program
// that is not running, or an offer of only its own worker, changes
// nothing.
func TestRelocate(t *testing.T) {
	now := time.Unix(1000, 0)
	c, err := NewRawAdmitter(Config{})
	require.NoError(t, err)
	for id := range WorkerID(3) {
		require.NoError(t, c.AddWorker(id+1, 1000))
	}
	require.Equal(t, WorkerID(1), runOn(t, c, now, "a", 300, 1).Worker)
	require.Equal(t, WorkerID(2), runOn(t, c, now, "fill2", 700, 2).Worker)
	require.Equal(t, WorkerID(3), runOn(t, c, now, "fill3", 600, 3).Worker)
	c.Drain(nil)

	_, ok := c.Relocate(now, "a", []WorkerID{1})
	require.False(t, ok, "only its own worker offered")
	_, ok = c.Relocate(now, "nobody", []WorkerID{2})
	require.False(t, ok)

	// Worker 2 has no room for 300 + 100 (700 + 400 > 850), worker 3 has
	// none either (600 + 400 > 850): the roomiest, 3, takes it.
	a, ok := c.Relocate(now, "a", []WorkerID{2, 3})
	require.True(t, ok)
	require.Equal(t, Admission{Run: true, Worker: 3, Status: StatusRunnable, Reason: ReasonRelocated}, a)
	p, _ := c.Program(now, "a")
	require.Equal(t, 1, p.Inflight, "the turn moved with it")
	ds := c.Drain(nil)
	require.Len(t, ds, 1)
	require.Equal(t, KindAdmit, ds[0].Kind)
	require.Equal(t, ReasonRelocated, ds[0].Reason)
	require.Equal(t, WorkerID(3), ds[0].Worker)
	require.Equal(t, uint64(1), c.Stats().Relocated)
	w1, _ := c.Worker(1)
	require.Zero(t, w1.Programs)

	// With room on an offered worker, the first such one takes it.
	a, ok = c.Relocate(now, "a", []WorkerID{2, 1})
	require.True(t, ok)
	require.Equal(t, WorkerID(1), a.Worker)

	// A paused program is not running: nothing to relocate. (Its worker
	// removed, it fits on neither other worker, so it stays paused.)
	require.NoError(t, c.EndRequest(now, "a", 300, 0))
	require.NoError(t, c.RemoveWorker(now, 1))
	require.Equal(t, StatusPaused, c.Status("a"))
	_, ok = c.Relocate(now, "a", []WorkerID{2})
	require.False(t, ok)
}

// runOn starts a turn of id with a placement preference and requires it to
// run now.
func runOn(t testing.TB, c *RawAdmitter, now time.Time, id string, tokens int64, prefer ...WorkerID) Admission {
	t.Helper()
	a, err := c.StartRequestOn(now, id, tokens, prefer)
	require.NoError(t, err)
	require.True(t, a.Run)
	return a
}
