package kvhint

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// benchEnvelope is a realistic envelope: n actions cycling through the six
// kinds, each naming `blocks` random 64-bit sequence hashes, UUID-length
// session ids and router-style ids.
func benchEnvelope(n, blocks int) Envelope {
	r := rand.New(rand.NewPCG(1, 1))
	e := Envelope{MessageID: "router-a1b2c3-000000012345", SessionID: "0f8fad5b-d9cb-469f-a165-70867728950e"}
	for i := range n {
		a := Action{ID: fmt.Sprintf("%s.%d", e.MessageID, i), Kind: Kind(1 + i%6), SessionID: e.SessionID}
		a.Target.Blocks = make([]uint64, blocks)
		for j := range a.Target.Blocks {
			a.Target.Blocks[j] = r.Uint64()
		}
		switch a.Kind {
		case KindShare:
			a.Dest = TierDevice
			a.Sources = []Source{{Worker: WorkerID{ID: 7}, Endpoint: "tcp://10.0.0.7:23280", Tier: TierDevice, Blocks: uint32(blocks)}}
		case KindPrefetch:
			a.Dest = TierDevice
		case KindDemote:
			a.Dest = TierHost
		case KindPin:
			a.TTL = 5 * time.Minute
		case KindRetain:
			a.TTL, a.Priority = 90*time.Second, 60
		}
		e.Actions = append(e.Actions, a)
	}
	return e
}

// Naive baseline: the same document through encoding/json with struct tags.
type naiveSource struct {
	WorkerID     uint64 `json:"worker_id"`
	DPRank       uint32 `json:"dp_rank"`
	Endpoint     string `json:"endpoint"`
	Tier         string `json:"tier,omitempty"`
	PrefixBlocks uint32 `json:"prefix_blocks,omitempty"`
}

type naivePayload struct {
	SessionID   string        `json:"session_id,omitempty"`
	BlockHashes []uint64      `json:"block_hashes,omitempty"`
	DestTier    string        `json:"dest_tier,omitempty"`
	TTLSeconds  float64       `json:"ttl_seconds,omitempty"`
	Priority    int32         `json:"priority,omitempty"`
	Endpoint    string        `json:"source_control_endpoint,omitempty"`
	Sources     []naiveSource `json:"sources,omitempty"`
}

type naiveAction struct {
	ActionID      string       `json:"action_id"`
	ActionType    string       `json:"action_type"`
	ActionVersion string       `json:"action_version"`
	Payload       naivePayload `json:"payload"`
}

type naiveEnvelope struct {
	ProtocolVersion string        `json:"protocol_version"`
	MessageID       string        `json:"message_id"`
	SessionID       string        `json:"session_id,omitempty"`
	Actions         []naiveAction `json:"actions"`
}

func naive(e *Envelope) naiveEnvelope {
	out := naiveEnvelope{ProtocolVersion: ProtocolVersion, MessageID: e.MessageID, SessionID: e.SessionID}
	for _, a := range e.Actions {
		p := naivePayload{SessionID: a.SessionID, BlockHashes: a.Target.Blocks, DestTier: a.Dest.String(), TTLSeconds: a.TTL.Seconds(), Priority: a.Priority}
		for _, s := range a.Sources {
			p.Sources = append(p.Sources, naiveSource{s.Worker.ID, s.Worker.DPRank, s.Endpoint, s.Tier.String(), s.Blocks})
		}
		if len(a.Sources) > 0 {
			p.Endpoint = a.Sources[0].Endpoint
		}
		out.Actions = append(out.Actions, naiveAction{a.ID, a.Kind.ActionType(), ActionVersion, p})
	}
	return out
}

// TestNaiveBaselineMatches: the benchmark baseline encodes the same
// document, so the ratio compares like with like.
func TestNaiveBaselineMatches(t *testing.T) {
	e := benchEnvelope(16, 8)
	theirs, _ := json.Marshal(naive(&e))
	var a, b any
	_ = json.Unmarshal(mustJSON(t, &e), &a)
	_ = json.Unmarshal(theirs, &b)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("baseline differs:\n%v\n%v", a, b)
	}
}

var benchShapes = []struct{ actions, blocks int }{{16, 0}, {16, 4}, {16, 8}, {16, 32}}

// cpuLoop runs f b.N times via b.Loop and reports CPU ns per op alongside
// the wall-clock ns/op.
func cpuLoop(b *testing.B, f func()) {
	c0 := processCPU()
	for b.Loop() {
		f()
	}
	if c0 >= 0 {
		b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
	}
}

// baselineNs times f over n iterations (for ratios measured in the same run).
func baselineNs(n int, f func()) float64 {
	start := time.Now()
	for range n {
		f()
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

func BenchmarkEncodeJSON(b *testing.B) {
	for _, sh := range benchShapes {
		b.Run(fmt.Sprintf("n=%d/blocks=%d", sh.actions, sh.blocks), func(b *testing.B) {
			e := benchEnvelope(sh.actions, sh.blocks)
			buf, _ := e.AppendJSON(nil)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			b.ResetTimer()
			cpuLoop(b, func() { buf, _ = e.AppendJSON(buf[:0]) })
			ours := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			ne := naive(&e)
			base := baselineNs(b.N, func() { _, _ = json.Marshal(&ne) })
			b.ReportMetric(base/ours, "x-vs-encoding/json")
		})
	}
}

func BenchmarkEncodeBinary(b *testing.B) {
	for _, sh := range benchShapes {
		b.Run(fmt.Sprintf("n=%d/blocks=%d", sh.actions, sh.blocks), func(b *testing.B) {
			e := benchEnvelope(sh.actions, sh.blocks)
			buf, _ := e.AppendBinary(nil)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			b.ResetTimer()
			cpuLoop(b, func() { buf, _ = e.AppendBinary(buf[:0]) })
			ours := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			g := generic(&e)
			base := baselineNs(b.N, func() { _, _ = msgpack.Marshal(g) })
			b.ReportMetric(base/ours, "x-vs-vmihailenco")
		})
	}
}

func BenchmarkDecodeJSON(b *testing.B) {
	e := benchEnvelope(16, 8)
	doc, _ := e.AppendJSON(nil)
	b.Run("n=16/blocks=8", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		var out Envelope
		cpuLoop(b, func() {
			if err := DecodeJSON(doc, &out); err != nil {
				b.Fatal(err)
			}
		})
	})
}

func BenchmarkDecodeBinary(b *testing.B) {
	e := benchEnvelope(16, 8)
	doc, _ := e.AppendBinary(nil)
	b.Run("n=16/blocks=8", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		var out Envelope
		cpuLoop(b, func() {
			if err := DecodeBinary(doc, &out); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkPolicies evaluates all four built-in policies on an admission
// with a 64-block prefix and 8 workers' residency.
func BenchmarkPolicies(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	prefix := randHashes(r, 64)
	in := Input{Event: EventAdmit, Worker: WorkerID{ID: 3}, Prefix: prefix, Session: Session{
		ID: "s", Shared: prefix[:16], SharedRefs: make([]int32, 16), Unique: prefix[16:], Worker: WorkerID{ID: 3},
	}}
	for i := range in.Session.SharedRefs {
		in.Session.SharedRefs[i] = 9
	}
	for w := range 8 {
		in.Cached = append(in.Cached, Residency{Worker: WorkerID{ID: uint64(w)}, Device: r.IntN(64), Host: r.IntN(8), Endpoint: "tcp://w"})
	}
	ps := Policies{must(NewTailOffload(TailOffloadConfig{})), must(NewPrefixPin(PrefixPinConfig{})), must(NewPeerShare(PeerShareConfig{MaxSources: 2})), must(NewFinishRelease(FinishReleaseConfig{}))}
	b.Run("n=8", func(b *testing.B) {
		b.ReportAllocs()
		var dst []Hint
		cpuLoop(b, func() { dst = ps.Evaluate(dst[:0], &in) })
	})
}

func BenchmarkQueueSend(b *testing.B) {
	q := must(NewQueue(SinkFunc(func(context.Context, *Envelope) error { return nil }), QueueConfig{Capacity: 1024}))
	defer func() { _ = q.Close(context.Background()) }()
	e := &Envelope{MessageID: "m"}
	b.ReportAllocs()
	cpuLoop(b, func() { _ = q.Send(context.Background(), e) })
}
