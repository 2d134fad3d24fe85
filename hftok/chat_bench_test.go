package hftok

import (
	"encoding/json"
	"fmt"
	"github.com/agentkv/agentkv/internal/cputime"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// benchChat is the Chat the benchmarks use: the first model directory in
// AGENTKV_HF_MODEL_DIRS (Qwen3's, from .ci/tokenizer-ref.sh's npm cache),
// else the test tokenizer with testdata/chat/tools.jinja.
func benchChat(b *testing.B) (*Chat, string) {
	if dirs := filepath.SplitList(os.Getenv("AGENTKV_HF_MODEL_DIRS")); len(dirs) > 0 && dirs[0] != "" {
		c, err := LoadChat(dirs[0], ChatConfig{})
		if err != nil {
			b.Fatal(err)
		}
		return c, filepath.Base(filepath.Dir(dirs[0]))
	}
	return testChat(b, "tools.jinja", ChatConfig{}), "tiny"
}

// agentTurns builds the bodies of one coding-agent session: a 12 K-char
// system prompt, three tool schemas, and turns of an assistant tool call
// and a 2-4 K-char tool result (source code, logs), so that body k
// resends bodies 0..k-1 and adds one turn.
func agentTurns(n int) [][]byte {
	rng := rand.New(rand.NewPCG(3, 4))
	code := func(nchars int) string {
		var b strings.Builder
		for b.Len() < nchars {
			fmt.Fprintf(&b, "func handler%d(w http.ResponseWriter, r *http.Request) {\n\tif err := check(r, %d); err != nil {\n\t\thttp.Error(w, err.Error(), 400) // line %d\n\t}\n}\n",
				rng.IntN(1000), rng.IntN(100), rng.IntN(5000))
		}
		return b.String()
	}
	tools := []any{}
	for _, name := range []string{"read_file", "run_tests", "edit_file"} {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": name,
			"description": "Runs " + name + " in the repository and returns its output.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"},
				"args": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}, "required": []any{"path"}}}})
	}
	msgs := []any{map[string]any{"role": "system", "content": strings.Repeat("You are a careful coding agent. Follow the repository's conventions. ", 170)},
		map[string]any{"role": "user", "content": "The tests in ./gateway fail since yesterday; find out why and fix it."}}
	out := make([][]byte, 0, n)
	for i := range n {
		id := fmt.Sprint("call_", i)
		msgs = append(msgs, map[string]any{"role": "assistant", "content": "Let me look.", "tool_calls": []any{map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": "read_file", "arguments": fmt.Sprintf(`{"path": "gateway/file%d.go"}`, i)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": code(2000 + rng.IntN(2000))})
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "tools": tools, "stream": true})
		out = append(out, b)
	}
	return out
}

// BenchmarkChat times Chat.TokenizeChat on a coding-agent session of 60
// turns (about 200 K chars, 50-60 K tokens at its end):
//   - turn: the bodies of turns 40-59 in order, each resending the last
//     (the per-request case: the segment cache holds the earlier messages);
//   - cold: the same bodies with the caches emptied before each call;
//   - render: the template alone (JSON, conversion, Jinja).
//
// It reports prompt tokens per call and ns per prompt token.
func BenchmarkChat(b *testing.B) {
	c, model := benchChat(b)
	bodies := agentTurns(60)[40:]
	tokens := 0
	for _, body := range bodies {
		ids, err := c.TokenizeChat(body)
		if err != nil {
			b.Fatal(err)
		}
		tokens += len(ids)
	}
	avgTokens := float64(tokens) / float64(len(bodies))
	for _, mode := range []string{"turn", "cold", "render"} {
		b.Run(fmt.Sprintf("model=%s/mode=%s", model, mode), func(b *testing.B) {
			size := 0
			for _, body := range bodies {
				size += len(body)
			}
			b.SetBytes(int64(size / len(bodies)))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				body := bodies[i%len(bodies)]
				switch mode {
				case "cold":
					c.tok.clearCaches()
					fallthrough
				case "turn":
					if _, err := c.TokenizeChat(body); err != nil {
						b.Fatal(err)
					}
				case "render":
					if _, err := c.Render(body); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(avgTokens, "tokens/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/avgTokens, "ns/token")
		})
	}
}

// sessionBodies returns the body of a coding-agent context of about ctx
// prompt tokens and the body of its next turn, which appends about add
// tokens (an assistant tool call and its result), as the model's template
// renders them.
func sessionBodies(c *Chat, ctx, add int) (context, next []byte, err error) {
	rng := rand.New(rand.NewPCG(5, 6))
	code := func(nchars int) string {
		var s strings.Builder
		for s.Len() < nchars {
			fmt.Fprintf(&s, "func handler%d(w http.ResponseWriter, r *http.Request) {\n\tif err := check(r, %d); err != nil {\n\t\thttp.Error(w, err.Error(), 400) // line %d\n\t}\n}\n",
				rng.IntN(1000), rng.IntN(100), rng.IntN(5000))
		}
		return s.String()
	}
	sample := code(8000)
	perTok := float64(len(sample)) / float64(len(c.tok.Encode(nil, sample)))
	msgs := []any{map[string]any{"role": "system", "content": "You are a careful coding agent."},
		map[string]any{"role": "user", "content": "The tests in ./gateway fail; find out why and fix it."}}
	turn := func(i, tokens int) {
		id := fmt.Sprint("call_", i)
		msgs = append(msgs, map[string]any{"role": "assistant", "content": "Let me look.", "tool_calls": []any{map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": "read_file", "arguments": fmt.Sprintf(`{"path": "gateway/file%d.go"}`, i)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": code(int(float64(tokens) * perTok))})
	}
	body := func() []byte {
		out, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "stream": true})
		return out
	}
	for i := 0; ; i++ {
		ids, err := c.TokenizeChat(body())
		if err != nil {
			return nil, nil, err
		}
		if len(ids) >= ctx {
			break
		}
		turn(i, min(2000, ctx-len(ids)))
	}
	context = body()
	turn(-1, add)
	return context, body(), nil
}

// BenchmarkChatSessionTurn times one agent turn that appends about 500
// tokens to a context of 2 K, 32 K or 128 K tokens: whole (TokenizeChat,
// its caches warm from the context, as the gateway tokenized before
// sessions), session (TokenizeChatSession after the context's turn: the
// body parsed from the context's memo, then encoded from its Encoding),
// nomemo (the same without the memo: Render, then EncodeFrom), render (the
// template alone: JSON, conversion, Jinja). The session figure is the
// per-turn cost; against ctx=2K it shows how much the context still
// costs. Each reports cpu-us/op, the thread's CPU time per turn, which
// other jobs on a shared machine do not inflate.
func BenchmarkChatSessionTurn(b *testing.B) {
	c, model := benchChat(b)
	for _, ctx := range []int{2 << 10, 32 << 10, 128 << 10} {
		ctxBody, next, err := sessionBodies(c, ctx, 500)
		if err != nil {
			b.Fatal(err)
		}
		ctxText, err := c.Render(ctxBody)
		if err != nil {
			b.Fatal(err)
		}
		prev, _ := c.tok.EncodeFrom(nil, ctxText)
		name := fmt.Sprintf("model=%s/ctx=%dK", model, ctx>>10)
		// timed runs turn b.N times, before each (untimed) and then
		// timed, and reports the thread's CPU time per turn.
		timed := func(b *testing.B, before, turn func() error) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if before != nil {
					b.StopTimer()
					if err := before(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				t0 := cputime.Thread()
				if err := turn(); err != nil {
					b.Fatal(err)
				}
				cpu += cputime.Thread() - t0
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
		}
		b.Run(name+"/whole", func(b *testing.B) {
			timed(b, nil, func() error { _, err := c.TokenizeChat(next); return err })
		})
		b.Run(name+"/session", func(b *testing.B) {
			timed(b, func() error { _, err := c.TokenizeChatSession("s", ctxBody); return err },
				func() error { _, err := c.TokenizeChatSession("s", next); return err })
		})
		b.Run(name+"/nomemo", func(b *testing.B) {
			reused := 0
			timed(b, nil, func() error {
				text, err := c.Render(next)
				if err == nil {
					_, reused = c.tok.EncodeFrom(prev, text)
				}
				return err
			})
			b.ReportMetric(float64(reused), "reused-tokens")
		})
		b.Run(name+"/render", func(b *testing.B) {
			timed(b, nil, func() error { _, err := c.Render(next); return err })
			b.ReportMetric(float64(len(next)), "body-bytes")
		})
	}
}
