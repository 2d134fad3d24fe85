package eventplane

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/eventplane/embedded"
	"github.com/agentkv/agentkv/flashindex"
)

// waitBound bounds the waits for what must happen (events delivered, a
// replica synced): only a condition that never comes reaches it, so it is
// far above what they take on a loaded 2-core machine.
const waitBound = 2 * time.Minute

const testBS = 4

// natsServer is a restartable in-process JetStream server on loopback.
type natsServer struct {
	t    testing.TB
	dir  string
	port int
	s    *embedded.Server
}

func startNATS(t testing.TB) *natsServer {
	t.Helper()
	ns := &natsServer{t: t, dir: t.TempDir()}
	ns.start()
	t.Cleanup(func() {
		if ns.s != nil {
			ns.s.Stop()
		}
	})
	return ns
}

func (ns *natsServer) start() {
	ns.t.Helper()
	s, err := embedded.Start(embedded.Config{Dir: ns.dir, Port: ns.port})
	require.NoError(ns.t, err)
	ns.s, ns.port = s, s.Port()
}

func (ns *natsServer) stop() {
	ns.s.Stop()
	ns.s = nil
}

func (ns *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", ns.port) }

func testConfig() Config {
	return Config{Model: "test-model", SnapshotEvery: time.Hour, WorkerTTL: 2 * time.Second}
}

func connect(t testing.TB, ns *natsServer, cfg Config) *Plane {
	t.Helper()
	p, err := Connect(ns.url(), cfg, nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	require.NoError(t, p.Ensure(ctx))
	return p
}

func newRouter(t testing.TB, snapshot []byte, workers ...uint64) *agentkv.Router {
	t.Helper()
	cfg := agentkv.Config{BlockSize: testBS, Affinity: agentkv.AffinityHard, Index: agentkv.IndexExact} // workers here may send no events
	if snapshot != nil {
		cfg.IndexSnapshot = bytes.NewReader(snapshot)
	}
	r, err := agentkv.New(cfg)
	require.NoError(t, err)
	for _, id := range workers {
		require.NoError(t, r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo {
			return agentkv.WorkerInfo{ID: id, BlockSize: testBS, KVCapacityTokens: 1 << 20}
		})))
	}
	return r
}

func startReplica(t testing.TB, p *Plane, cfg ReplicaConfig) *Replica {
	t.Helper()
	rp, err := NewReplica(p, cfg)
	require.NoError(t, err)
	rp.Start(context.Background())
	t.Cleanup(func() { _ = rp.Close() })
	return rp
}

func snapshotOf(t testing.TB, ix *flashindex.Index) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, ix.Snapshot(&buf))
	return buf.Bytes()
}

// waitSynced waits until every replica applied the stream's last sequence.
func waitSynced(t testing.TB, p *Plane, rps ...*Replica) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	last, err := p.LastSeq(ctx)
	for err != nil && ctx.Err() == nil { // this connection may still be reconnecting after a NATS restart
		time.Sleep(20 * time.Millisecond)
		last, err = p.LastSeq(ctx)
	}
	require.NoError(t, err)
	for _, rp := range rps {
		require.NoError(t, rp.WaitApplied(ctx, last), "replica %s applied %d of %d: %+v", rp.cfg.Name, rp.Applied(), last, rp.Stats())
	}
}

func flush(t testing.TB, pbs ...*Publisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, pb := range pbs {
		require.NoError(t, pb.Flush(ctx), "stats %+v", pb.Stats())
	}
}

// eventGen produces a valid, realistic KV event stream for several
// workers: chains of stored blocks under resident parents, removals of
// resident blocks, an occasional clear.
type eventGen struct {
	rng      *rand.Rand
	workers  []uint64
	resident map[uint64][]uint64 // worker → resident engine hashes (device)
	next     uint64
}

func newEventGen(seed uint64, workers ...uint64) *eventGen {
	return &eventGen{rng: rand.New(rand.NewPCG(seed, 7)), workers: workers, resident: map[uint64][]uint64{}, next: 1}
}

// event returns the next event (EventID left 0: the publisher stamps it).
func (g *eventGen) event() flashindex.Event {
	w := g.workers[g.rng.IntN(len(g.workers))]
	res := g.resident[w]
	ev := flashindex.Event{Worker: flashindex.Worker{ID: w}}
	switch x := g.rng.IntN(1000); {
	case x < 2:
		ev.Kind = flashindex.Cleared
		g.resident[w] = nil
	case x < 300 && len(res) > 0:
		ev.Kind = flashindex.Removed
		n := 1 + g.rng.IntN(min(3, len(res)))
		for i := 0; i < n; i++ {
			j := g.rng.IntN(len(res))
			ev.Hashes = append(ev.Hashes, res[j])
			res[j] = res[len(res)-1]
			res = res[:len(res)-1]
		}
		g.resident[w] = res
	default:
		ev.Kind = flashindex.Stored
		ev.BlockSize = testBS
		if len(res) > 0 && g.rng.IntN(4) > 0 {
			ev.Parent, ev.HasParent = res[g.rng.IntN(len(res))], true
		}
		n := 1 + g.rng.IntN(4)
		for i := 0; i < n; i++ {
			toks := make([]uint32, testBS)
			for k := range toks {
				toks[k] = uint32(g.rng.IntN(64)) // small vocabulary: shared prefixes
			}
			h := g.next
			g.next++
			ev.Blocks = append(ev.Blocks, flashindex.StoredBlock{EngineHash: h, Tokens: toks})
			res = append(res, h)
		}
		g.resident[w] = res
	}
	return ev
}

// requireSameIndex compares two indexes by their canonical snapshots,
// reporting their stats (not megabytes of bytes) when they differ.
func requireSameIndex(t testing.TB, want, got *flashindex.Index, msg string) {
	t.Helper()
	if !bytes.Equal(snapshotOf(t, want), snapshotOf(t, got)) {
		t.Fatalf("%s: indexes differ\nwant %+v\ngot  %+v", msg, want.Stats(), got.Stats())
	}
}
