package eventplane

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/internal/freeport"
)

// TestEnsureBeforeServerSaysNotConnected: a relay or replica started
// before its NATS server (the README's replica block, pasted at once)
// gets ErrNotConnected from Ensure, not NATS's "outbound buffer limit
// exceeded", and the same Plane works once the server is up.
func TestEnsureBeforeServerSaysNotConnected(t *testing.T) {
	port := freeport.Port(t)
	p, err := Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), testConfig())
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err = p.Ensure(ctx)
	cancel()
	require.ErrorIs(t, err, ErrNotConnected)
	require.NotContains(t, err.Error(), "outbound buffer")

	ns := &natsServer{t: t, dir: t.TempDir(), port: port}
	ns.start()
	t.Cleanup(ns.stop)
	// The connection retries in the background; Ensure succeeds once it
	// is up (ensureLoop is what the relay and replica loops run).
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, p.ensureLoop(ctx))
	require.False(t, errors.Is(p.Ensure(ctx), ErrNotConnected))
}

// TestWarmReplicaReportsItsSequence: a replica started from a snapshot
// reports the sequence the snapshot covers as applied at once, before any
// new event (the process test waited on it to see a restart catch up).
func TestWarmReplicaReportsItsSequence(t *testing.T) {
	ns := startNATS(t)
	p := connect(t, ns, testConfig())
	m, err := NewMetrics(nil)
	require.NoError(t, err)
	_, err = NewReplica(p, ReplicaConfig{Name: "warm", Router: newRouter(t, nil, 1), StartSeq: 42, Metrics: m, NoSharedLoad: true})
	require.NoError(t, err)
	require.Equal(t, 41.0, testutil.ToFloat64(m.applied))
}
