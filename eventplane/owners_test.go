package eventplane

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProgramOwnership(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	var rps []*Replica
	for _, name := range []string{"a", "b", "c"} {
		rps = append(rps, startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: name, Router: newRouter(t, nil, 1),
			URL: "http://" + name, NoSharedLoad: true, BindTimeout: 10 * time.Second}))
	}
	ctx := context.Background()
	// Presence records are written at start; wait for all three.
	deadline := time.Now().Add(waitBound)
	for time.Now().Before(deadline) {
		n := 0
		for _, rp := range rps {
			if rps[0].replicaAlive(ctx, rp.cfg.Name) {
				n++
			}
		}
		if n == 3 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The first replica to see a program owns it; the others point there.
	o, err := rps[1].Owner(ctx, "prog-1")
	require.NoError(t, err)
	require.True(t, o.Self)
	for _, rp := range []*Replica{rps[0], rps[2]} {
		o, err := rp.Owner(ctx, "prog-1")
		require.NoError(t, err)
		require.Equal(t, Owner{Name: "b", URL: "http://b"}, o)
	}
	o, err = rps[1].Owner(ctx, "prog-1")
	require.NoError(t, err)
	require.True(t, o.Self)

	// The owner goes: the next replica to see the program takes it over,
	// and the third follows the new owner.
	require.NoError(t, rps[1].Close())
	o, err = rps[2].Owner(ctx, "prog-1")
	require.NoError(t, err)
	require.True(t, o.Self, "took over from a replica that is gone")
	o, err = rps[0].Owner(ctx, "prog-1")
	require.NoError(t, err)
	require.Equal(t, Owner{Name: "c", URL: "http://c"}, o)

	// NATS down: every replica owns what it sees, and says so.
	ns.stop()
	o, err = rps[0].Owner(ctx, "prog-1")
	require.ErrorIs(t, err, ErrDegraded)
	require.True(t, o.Self)
}
