package gateway

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/admission"
)

// TestFailoverKilledWorkerAdmission: with admission on, every session is a
// program placed on a worker; when that worker dies, its programs' next
// turns run on the live worker (the Router relocates a program whose
// worker the gateway cannot use, and a removed worker's programs resume
// elsewhere at once), and no request fails. Before, the first turn of
// each program on the dead worker got 502: admission kept it there.
func TestFailoverKilledWorkerAdmission(t *testing.T) {
	f := newFleet(t, 2, nil, Config{Failover: fastFailover()}, true)
	f.waitRoutable(0, true)
	f.waitRoutable(1, true)
	onDead := 0
	for i := range 16 {
		s := fmt.Sprintf("p%d", i)
		resp, body, err := f.post(context.Background(), ChatPath, s, chatBody(longPrompt(i), false))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		if f.workerOf(resp) == 0 {
			onDead++
		}
	}
	require.Positive(t, onDead, "some programs are placed on the worker that dies")
	f.kill(0)
	for turn := range 3 {
		for i := range 16 {
			s := fmt.Sprintf("p%d", i)
			resp, body, err := f.post(context.Background(), ChatPath, s, chatBody(longPrompt(i)+fmt.Sprintf(" turn %d", turn), false))
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "turn %d of %s: %s", turn, s, body)
			require.Equal(t, 1, f.workerOf(resp), "program %s continues on the live worker", s)
		}
	}
	t.Logf("%d of 16 programs were on the killed worker; every later turn served", onDead)
}

// TestStackAdmissionIsAgentic: a Stack with admission runs
// admission.Agentic, the configuration the README's study measures, ticking
// at the Stack's Tick; without admission there is none.
func TestStackAdmissionIsAgentic(t *testing.T) {
	f := newFleet(t, 1, nil, Config{}, true)
	cfg, on := f.stack.Router().AdmissionConfig()
	require.True(t, on)
	want := admission.Agentic()
	require.Equal(t, want.Waits, cfg.Waits)
	require.Equal(t, want.DecayHalfLife, cfg.DecayHalfLife)
	require.Equal(t, want.Moves, cfg.Moves)
	require.Equal(t, want.Door, cfg.Door)
	require.Equal(t, f.stack.cfg.Tick, cfg.Interval, "admission ticks at the Stack's Tick")

	_, on = newFleet(t, 1, nil, Config{}, false).stack.Router().AdmissionConfig()
	require.False(t, on)
}
