package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/engine/sglang"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/internal/freeport"
	"github.com/agentkv/agentkv/kvhint"
)

// sglangPub is an SGLang KV event publisher on loopback: ZeroMQ PUB,
// [topic, seq, msgpack] in SGLang's shape (tagged arrays in its field
// order, signed int64 hashes).
type sglangPub struct {
	ep  string
	pub zmq4.Socket
	seq uint64
}

func newSGLangPub(t *testing.T) *sglangPub {
	t.Helper()
	p := &sglangPub{ep: fmt.Sprintf("tcp://127.0.0.1:%d", freeport.Port(t)),
		pub: zmq4.NewPub(context.Background(), zmq4.WithLogger(log.New(io.Discard, "", 0)))}
	require.NoError(t, p.pub.Listen(p.ep))
	t.Cleanup(func() { p.pub.Close() })
	return p
}

// publishChain publishes one BlockStored of tokens' full blocks, named as
// SGLang names them (hash_str_to_int64 of a SHA-256 chained over the
// parent's digest), on medium; it returns the names, root first.
func (p *sglangPub) publishChain(t *testing.T, tokens []uint32, bs int, medium string) []uint64 {
	t.Helper()
	var names []uint64
	parent := ""
	for i := 0; i+bs <= len(tokens); i += bs {
		h := sha256.New()
		h.Write([]byte(parent))
		for _, tk := range tokens[i : i+bs] {
			fmt.Fprintf(h, "%d,", tk)
		}
		parent = hex.EncodeToString(h.Sum(nil))
		n, err := sglang.HashFromHex(parent)
		require.NoError(t, err)
		names = append(names, n)
	}
	payload, err := vllm.Encoding{Schema: sglang.Schema, SignedHashes: true}.Append(nil, 1.7e9, []vllm.WireEvent{{
		Kind: flashindex.Stored, Hashes: names, Tokens: tokens[:len(names)*bs], BlockSize: bs, Medium: medium}})
	require.NoError(t, err)
	frame := make([]byte, 8)
	binary.BigEndian.PutUint64(frame, p.seq)
	p.seq++
	require.NoError(t, p.pub.SendMulti(zmq4.NewMsgFrom([]byte("kv-events"), frame, payload)))
	return names
}

// TestSGLangHintNames: SGLang-shaped KV events (SHA-256 names, signed
// int64, on its host tier) for worker 0 (engine=sglang) reach the index
// under the router's own hashes; hints for the SGLang workers then name
// those blocks as SGLang does: a kv.prefetch to worker 0 (its own names)
// and a kv.fetch to worker 1 (engine=sglang, named by its source's map),
// both spelled as signed int64. A kv.fetch to worker 2 (vLLM) in the same
// stack keeps the router's (vLLM's) hashes.
func TestSGLangHintNames(t *testing.T) {
	const bs = 16
	hints, err := kvhint.NamedPolicies("share,tail")
	require.NoError(t, err)
	var caps []*capture
	var specs []WorkerSpec
	var pubs []*sglangPub
	for i := range 3 {
		m, err := mock.Start(mock.Config{Speedup: 1000, Engine: simConfigSmall()})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		cp := newCapture(t, m)
		caps = append(caps, cp)
		spec := WorkerSpec{URL: cp.srv.URL, Tokenizer: m, Hints: HintsInline}
		if i < 2 {
			p := newSGLangPub(t)
			pubs = append(pubs, p)
			spec.Engine, spec.Events = EngineSGLang, p.ep
		} else {
			spec.Events = "tcp://127.0.0.1:1" // an event stream that never speaks: the index stays exact
		}
		specs = append(specs, spec)
	}
	var place atomic.Int64
	var stack *Stack
	gc := Config{Route: func(ctx context.Context, req *agentkv.Request) (*agentkv.Decision, error) {
		req.Override = &agentkv.Override{AllowedWorkers: []uint64{uint64(place.Load())}}
		return stack.Router().Route(ctx, req)
	}}
	stack, srv := testStack(t, StackConfig{Affinity: agentkv.AffinityOff, Hints: hints, Gateway: gc}, specs...)

	body := fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":%q}]}`,
		mock.DefaultModel, strings.Repeat("lorem ipsum dolor sit amet ", 80))
	tokens, err := caps[0].mock.TokenizeChat([]byte(body))
	require.NoError(t, err)
	h, err := flashindex.NewHasher(bs, "")
	require.NoError(t, err)
	_, own := h.AppendHashes(nil, nil, tokens, 0, false)
	require.Greater(t, len(own), 20)

	// PUB drops messages until the subscription arrives: publish until
	// the index holds the blocks (storing them again changes nothing).
	var names []uint64
	for n := 0; ; n++ {
		require.Less(t, n, 6000, "SGLang events never reached the index")
		names = pubs[0].publishChain(t, tokens, bs, "CPU_PINNED")
		if m := stack.Router().Index().FindMatches(own, nil); len(m) == 1 && m[0].Worker.ID == 0 && m[0].Host == len(own) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.True(t, slices.ContainsFunc(names, func(n uint64) bool { return int64(n) < 0 }), "no negative name: pick another prompt")
	signed := func(hs []uint64) string {
		s := make([]string, len(hs))
		for i, x := range hs {
			s[i] = fmt.Sprint(int64(x))
		}
		return "[" + strings.Join(s, ",") + "]"
	}

	for i, want := range []struct {
		kind   kvhint.Kind
		blocks []uint64
	}{{kvhint.KindPrefetch, names}, {kvhint.KindShare, names}, {kvhint.KindShare, own}} {
		place.Store(int64(i))
		resp, out := postJSON(t, srv.URL+ChatPath, map[string]string{"x-dynamo-session-id": fmt.Sprint("s-", i)}, body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(out))
		got := caps[i].got()
		require.Len(t, got, 1, "worker %d", i)
		var sent struct {
			Hints json.RawMessage `json:"kv_hints"`
		}
		require.NoError(t, json.Unmarshal(got[0], &sent))
		var env kvhint.Envelope
		require.NoError(t, kvhint.DecodeJSON(sent.Hints, &env), "worker %d: %s", i, got[0])
		require.Len(t, env.Actions, 1, "worker %d: %s", i, sent.Hints)
		a := env.Actions[0]
		require.Equal(t, want.kind, a.Kind, "worker %d", i)
		require.Equal(t, want.blocks[:len(a.Target.Blocks)], a.Target.Blocks, "worker %d: block names", i)
		require.Len(t, a.Target.Blocks, len(own), "worker %d", i)
		if i < 2 {
			require.Contains(t, string(sent.Hints), `"block_hashes":`+signed(names), "worker %d: SGLang's signed spelling", i)
		}
		if a.Kind == kvhint.KindShare {
			require.Equal(t, caps[0].srv.URL, a.Sources[0].Endpoint)
		}
	}
	require.Zero(t, stack.HintStats(1).Unnamed)
}

// TestParseWorkerSpecEngine reads engine= from a worker spec and a POST
// /workers body.
func TestParseWorkerSpecEngine(t *testing.T) {
	for s, want := range map[string]Engine{"http://h:1": EngineVLLM, "http://h:1,engine=vllm": EngineVLLM,
		"http://h:1,engine=sglang,hints=inline": EngineSGLang} {
		ws, err := ParseWorkerSpec(s)
		require.NoError(t, err, s)
		require.Equal(t, want, ws.Engine, s)
	}
	_, err := ParseWorkerSpec("http://h:1,engine=trt")
	require.ErrorContains(t, err, "engine")
	ws, err := DecodeWorkerRequest([]byte(`{"url":"http://h:1","engine":"sglang"}`))
	require.NoError(t, err)
	require.Equal(t, EngineSGLang, ws.Engine)
	_, err = DecodeWorkerRequest([]byte(`{"url":"http://h:1","engine":"trt"}`))
	require.ErrorIs(t, err, ErrBadWorkerConfig)
}
