package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/hftok"
	"github.com/agentkv/agentkv/internal/cputime"
)

// stageChat is the in-process tokenizer of the stage benchmark: hftok's
// test tokenizer with its tools template (a real BPE, a real Jinja chat
// template).
func stageChat(b *testing.B) *hftok.Chat {
	tok, err := hftok.Load("../hftok/testdata/tiny.json")
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := os.ReadFile("../hftok/testdata/chat/tools.jinja")
	if err != nil {
		b.Fatal(err)
	}
	c, err := hftok.NewChat(tok, []byte(`{"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"}`), hftok.ChatConfig{Template: string(tmpl)})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// stageBodies returns an agent context of about ctx tokens (turns of
// source code read by tools, as plain messages) and its next turn, which
// appends a message of about add tokens, in api's request shape.
func stageBodies(b *testing.B, chat *hftok.Chat, api API, ctx, add int) (context, next []byte) {
	rng := rand.New(rand.NewPCG(7, 8))
	code := func(tokens int) string {
		var s strings.Builder
		for s.Len() < tokens*13/10 { // the test tokenizer: about 1.3 bytes a token on code
			fmt.Fprintf(&s, "func handler%d(w http.ResponseWriter, r *http.Request) {\n\tif err := check(r, %d); err != nil {\n\t\thttp.Error(w, err.Error(), 400)\n\t}\n}\n",
				rng.IntN(1000), rng.IntN(100))
		}
		return s.String()
	}
	type msg struct{ role, text string }
	msgs := []msg{{"user", "The tests in ./gateway fail; find out why and fix it."}}
	for n := 0; n < ctx; n += 2000 {
		msgs = append(msgs, msg{"assistant", "Let me read the next file."}, msg{"user", code(min(2000, ctx-n))})
	}
	encode := func(msgs []msg) []byte {
		var v any
		switch api {
		case Responses:
			var in []any
			for _, m := range msgs {
				typ := "input_text"
				if m.role == "assistant" {
					typ = "output_text"
				}
				in = append(in, map[string]any{"type": "message", "role": m.role, "content": []any{map[string]any{"type": typ, "text": m.text}}})
			}
			v = map[string]any{"model": "m", "instructions": "You are a coding agent.", "input": in, "stream": true, "store": false}
		case Messages:
			var ms []any
			for _, m := range msgs {
				ms = append(ms, map[string]any{"role": m.role, "content": []any{map[string]any{"type": "text", "text": m.text}}})
			}
			v = map[string]any{"model": "m", "system": "You are a coding agent.", "messages": ms, "max_tokens": 64, "stream": true}
		default:
			ms := []any{map[string]any{"role": "system", "content": "You are a coding agent."}}
			for _, m := range msgs {
				ms = append(ms, map[string]any{"role": m.role, "content": m.text})
			}
			v = map[string]any{"model": "m", "messages": ms, "stream": true}
		}
		out, err := json.Marshal(v)
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	context = encode(msgs)
	msgs = append(msgs, msg{"assistant", "Now the failing test."}, msg{"user", code(add)})
	return context, encode(msgs)
}

// stageNames are the stages of BenchmarkGatewayStages, in request order.
var stageNames = []string{"read", "parse", "identify", "tokenize", "route", "forward", "finish"}

// BenchmarkGatewayStages profiles one request's stages on realistic agent
// bodies: a turn appending about 500 tokens to a context of 2 K, 32 K or
// 128 K tokens, per API, with an exact in-process tokenizer (hftok, the
// session's previous turn remembered) and a fast engine on loopback. The
// stages are the request path's (serve.go): read (the body), parse (decode
// and translate to chat), identify (the session), tokenize, route
// (hashing, index lookup, cost, decision), forward (the worker's request,
// relay of its stream, usage sniffing) and finish (the router's Done,
// trace, metrics). Each stage's time per request is reported as
// <stage>-us and its share of the request as <stage>-%, what the process
// allocated during it as <stage>-B/op and <stage>-allocs/op (forward's
// include the engine stand-in's, which runs in this process); cpu-us/op is the
// process's CPU time per request (every thread: the engine stand-in's
// reading of the body and the garbage collector included), which other
// jobs on a shared machine do not inflate as they do wall time.
func BenchmarkGatewayStages(b *testing.B) {
	up := httptest.NewServer(&benchUpstream{chunks: 8})
	defer up.Close()
	chat := stageChat(b)
	for _, api := range []API{Chat, Responses, Messages} {
		for _, ctx := range []int{2 << 10, 32 << 10, 128 << 10} {
			ctxBody, next := stageBodies(b, chat, api, ctx, 500)
			b.Run(fmt.Sprintf("api=%s/ctx=%dK", api, ctx>>10), func(b *testing.B) {
				s, err := NewStack(context.Background(), StackConfig{Workers: []WorkerSpec{{URL: up.URL, Tokenizer: chat}},
					Refresh: -1, Registry: prometheus.NewRegistry(),
					// The fake engine's /tokenize is not the tokenizer's.
					Gateway: Config{TokenizerCheckEvery: -1}})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				benchStages(b, s.Gateway(), api, ctxBody, next)
			})
		}
	}
}

func benchStages(b *testing.B, g *Gateway, api API, ctxBody, next []byte) {
	ctx := context.Background()
	req := httptest.NewRequest(http.MethodPost, api.Path(), nil)
	req.Header.Set("X-Dynamo-Session-Id", "bench")
	var spent [7]time.Duration
	var allocB, allocN [7]uint64
	var cpu time.Duration
	// The process's allocations at each stage boundary, exact
	// (runtime.ReadMemStats stops the world and flushes every cache; the
	// fake engine's allocations land in forward). The stage's time runs
	// from after one read to before the next, and the reads' CPU is taken
	// out of cpu-us/op.
	var ms runtime.MemStats
	var ab, an [8]uint64
	var start, end [8]time.Time
	var readCPU time.Duration
	mark := func(i int) {
		end[i] = time.Now()
		c := cputime.Process()
		runtime.ReadMemStats(&ms)
		ab[i], an[i] = ms.TotalAlloc, ms.Mallocs
		readCPU += cputime.Process() - c
		start[i] = time.Now()
	}
	turn := func(raw []byte, timed bool) {
		c0, r0 := cputime.Process(), readCPU
		mark(0)
		body, _ := io.ReadAll(bytes.NewReader(raw))
		mark(1)
		c, err := g.parse(api, body, nil)
		if err != nil {
			b.Fatal(err)
		}
		c.hdr, c.start = req.Header, start[0]
		mark(2)
		if err := g.identify(c, req, body); err != nil {
			b.Fatal(err)
		}
		mark(3)
		if c.tokens, err = g.tokens(ctx, c); err != nil {
			b.Fatal(err)
		}
		c.id = "bench"
		mark(4)
		d, err := g.router.Route(ctx, &agentkv.Request{ID: c.id, Tokens: c.tokens, Agent: c.agent})
		if err != nil {
			b.Fatal(err)
		}
		wk := g.set().byID[d.Worker.ID]
		mark(5)
		var sv streamSoFar
		res := g.attempt(ctx, httptest.NewRecorder(), c, wk, d, &sv)
		if res.Err != nil {
			b.Fatal(res.Err)
		}
		mark(6)
		g.finish(c, d, res.Usage, nil)
		mark(7)
		if timed {
			cpu += cputime.Process() - c0 - (readCPU - r0)
			for i := range spent {
				spent[i] += end[i+1].Sub(start[i])
				allocB[i] += ab[i+1] - ab[i]
				allocN[i] += an[i+1] - an[i]
			}
		}
	}
	turn(ctxBody, false)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Labelled, so a CPU profile shows the timed turns alone:
		// go tool pprof -tagfocus turn=timed.
		pprof.Do(ctx, pprof.Labels("turn", "timed"), func(context.Context) { turn(next, true) })
		b.StopTimer()
		turn(ctxBody, false) // the session's memory back to the context
		b.StartTimer()
	}
	var total time.Duration
	for _, d := range spent {
		total += d
	}
	for i, name := range stageNames {
		b.ReportMetric(float64(spent[i])/float64(b.N)/1e3, name+"-us")
		b.ReportMetric(100*float64(spent[i])/float64(total), name+"-%")
		b.ReportMetric(float64(allocB[i])/float64(b.N), name+"-B/op")
		b.ReportMetric(float64(allocN[i])/float64(b.N), name+"-allocs/op")
	}
	b.ReportMetric(float64(len(next)), "body-bytes")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
	b.ReportMetric(0, "ns/op")
}
