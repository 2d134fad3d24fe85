package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/hftok"
)

// growthSession is one agent session's conversation so far, as the JSON
// of its messages: each turn resends it with the model's short reply and
// a new user turn appended, as an agent harness does.
type growthSession struct {
	id    string
	msgs  []byte
	turns int
	tools bool // turns are tool calls and results, not user turns
}

func (g *growthSession) add(tb testing.TB, role, text string) {
	g.addMsg(tb, map[string]any{"role": role, "content": text})
}

func (g *growthSession) addMsg(tb testing.TB, msg map[string]any) {
	m, err := json.Marshal(msg)
	require.NoError(tb, err)
	if len(g.msgs) > 0 {
		g.msgs = append(g.msgs, ',')
	}
	g.msgs = append(g.msgs, m...)
}

func (g *growthSession) body() []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"m","stream":true,"max_tokens":64,"messages":[`)
	b.Write(g.msgs)
	b.WriteString(`]}`)
	return b.Bytes()
}

// growthCode is a user turn of code of about tokens tokens (hftok's
// test BPE), distinct per session and turn, and its tokens.
func growthCode(chat *hftok.Chat, session string, turn, tokens int) (string, int) {
	var code strings.Builder
	fmt.Fprintf(&code, "Turn %d of %s: the test still fails here.\n", turn, session)
	for i := 0; ; i++ {
		fmt.Fprintf(&code, "func handler_%s_%d_%d(w http.ResponseWriter, r *http.Request) {\n\tif err := check(r, %d); err != nil {\n\t\thttp.Error(w, err.Error(), 400)\n\t}\n}\n", session, turn, i, i*7)
		if n := len(chat.Tokenizer().Encode(nil, code.String())); n >= tokens {
			return code.String(), n
		}
	}
}

// growthTurn sends g's next turn to t and returns the process's CPU while
// it ran: a short reply and a user turn of add tokens appended or, with
// g.tools, a tool call and its result of add tokens (a session's first
// turn is a user turn either way).
func growthTurn(tb testing.TB, client *http.Client, chat *hftok.Chat, t frontDoorTarget, g *growthSession, add int) time.Duration {
	code, _ := growthCode(chat, g.id, g.turns, add)
	switch {
	case g.turns > 0 && g.tools:
		id := fmt.Sprintf("call_%d", g.turns)
		g.addMsg(tb, map[string]any{"role": "assistant", "content": fmt.Sprintf("Reading file %d.", g.turns),
			"tool_calls": []any{map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": "Read", "arguments": fmt.Sprintf(`{"path":"f%d.go"}`, g.turns)}}}})
		g.addMsg(tb, map[string]any{"role": "tool", "tool_call_id": id, "content": code})
	case g.turns > 0:
		g.add(tb, "assistant", fmt.Sprintf("Looking at turn %d now.", g.turns))
		g.add(tb, "user", code)
	default:
		g.add(tb, "user", code)
	}
	g.turns++
	req, err := http.NewRequest(http.MethodPost, t.base+"/v1/chat/completions", bytes.NewReader(g.body()))
	require.NoError(tb, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", g.id)
	cpu0 := t.cpu(tb)
	resp, err := client.Do(req)
	require.NoError(tb, err)
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	cpu := t.cpu(tb) - cpu0
	require.NoError(tb, err)
	require.Equal(tb, http.StatusOK, resp.StatusCode, "%s", t.name)
	return cpu
}

// BenchmarkFrontDoorGrowth measures how a session turn's cost grows with
// its context: an agent session's turn that appends about 500 tokens (a
// short reply and a user turn of code) to a context of about 2 K and of
// about 128 K tokens, sent to `agentkv proxy` (a vLLM user's flags,
// --worker URL, with a readable tokenizer) and to the bare hop of
// BenchmarkFrontDoor, each its own process in front of the same engine
// stand-in. The 128 K contexts are 16 sessions per target, each sent
// whole before timing and then one turn after another (the 128 untimed
// warm-up turns and 96 timed ones grow them by 6 %); a 2 K turn is a
// fresh session's second turn, its first (the whole context, untimed)
// sent just before, so it stays 2 K.
// Sessions differ from their first message on, so nothing of one serves
// another. After an untimed turn the target is let go quiet (its CPU
// still for 5 ms) so that turn's garbage collection is not billed to
// the next. Reported per target and context: the process's CPU per turn
// (from /proc); and the 128 K turn's cost over the 2 K turn's, the
// figure the front door's cost target bounds (a turn's cost grows with
// its new tokens, not its context). Turns alternate between the targets
// and the contexts.
//
// Two shapes of turn: turn=tool, a tool call and its result (how an agent's
// context mostly grows), and turn=user, a short reply and a new user turn
// (a template's "last user query" moves every turn, so more of the
// template's loop runs again; see internal/jinja's loop memo).
func BenchmarkFrontDoorGrowth(b *testing.B) {
	for _, tools := range []bool{true, false} {
		name := "turn=user"
		if tools {
			name = "turn=tool"
		}
		b.Run(name, func(b *testing.B) { benchFrontDoorGrowth(b, tools) })
	}
}

func benchFrontDoorGrowth(b *testing.B, tools bool) {
	tokDir, chat := frontDoorTokenizer(b)
	up := newFakeVLLM(b, 16, 1<<20)
	up.tokenize = chat.TokenizeChat
	proxy := startProxyProc(b, "--worker", up.URL(), "--tokenizer", tokDir)
	proxy.listening(b)
	targets := []frontDoorTarget{startBareHop(b, up.URL()), {"proxy", proxy.base, []int{proxy.p.cmd.Process.Pid}}}
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 16, MaxIdleConnsPerHost: 16}}

	const add, long = 500, 16
	contexts := []int{2 << 10, 128 << 10}
	// filler[context]: the earlier turns every session of that context
	// carries after its own first message.
	filler := make([]growthSession, len(contexts))
	for ci, ctx := range contexts {
		f := &filler[ci]
		for left := ctx - add - 64; left > 0; {
			code, n := growthCode(chat, "filler", f.turns, min(4096, left))
			left -= n + 16
			f.add(b, "user", code)
			f.add(b, "assistant", "Checked; next file.")
			f.turns++
		}
	}
	ctxTokens := make([]int, len(contexts))
	session := func(t frontDoorTarget, ci, i int) *growthSession {
		g := &growthSession{id: fmt.Sprintf("%s-%dk-%d", t.name, contexts[ci]>>10, i), tools: tools}
		g.add(b, "system", "You are a careful coding agent in session "+g.id+". Fix the failing tests.")
		g.msgs = append(append(g.msgs, ','), filler[ci].msgs...)
		g.turns = filler[ci].turns
		ids, err := chat.TokenizeChat(g.body())
		require.NoError(b, err)
		ctxTokens[ci] = len(ids)
		growthTurn(b, client, chat, t, g, add) // the context, untimed
		quiet(b, t)
		return g
	}
	longSess := make([][]*growthSession, len(targets))
	for ti, t := range targets {
		for i := range long {
			longSess[ti] = append(longSess[ti], session(t, 1, i))
		}
	}
	cpu := make([][]time.Duration, len(targets))
	for ti := range cpu {
		cpu[ti] = make([]time.Duration, len(contexts))
	}
	// Warm-up, untimed: the processes' heaps grow to their steady size
	// (a first pass touches fresh pages: 3 times the page faults of a
	// warm 128 K turn) and their connections and caches settle.
	for i := range 128 {
		for ti, t := range targets {
			growthTurn(b, client, chat, t, session(t, 0, -1-i), add)
			growthTurn(b, client, chat, t, longSess[ti][i%long], add)
		}
	}
	n := max(b.N, 8)
	b.ResetTimer()
	for i := range n {
		for ti, t := range targets {
			b.StopTimer()
			g := session(t, 0, i)
			b.StartTimer()
			cpu[ti][0] += growthTurn(b, client, chat, t, g, add)
			cpu[ti][1] += growthTurn(b, client, chat, t, longSess[ti][i%long], add)
		}
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(n) }
	for ci, ctx := range contexts {
		b.ReportMetric(float64(ctxTokens[ci]), fmt.Sprintf("ctx%dK-tokens", ctx>>10))
	}
	for ti, t := range targets {
		for ci, ctx := range contexts {
			b.ReportMetric(us(cpu[ti][ci]), fmt.Sprintf("%s-%dK-cpu-us/turn", t.name, ctx>>10))
		}
		b.ReportMetric(float64(cpu[ti][1])/float64(cpu[ti][0]), t.name+"-128K/2K")
	}
	b.ReportMetric(0, "ns/op")
}

// quiet waits until the target's CPU time stands still for 5 ms
// (its garbage collector done with what came before).
func quiet(tb testing.TB, t frontDoorTarget) {
	last := t.cpu(tb)
	for {
		time.Sleep(5 * time.Millisecond)
		now := t.cpu(tb)
		if now == last {
			return
		}
		last = now
	}
}
