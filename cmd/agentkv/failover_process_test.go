package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/internal/freeport"
)

// These tests meet worker failures the way a user of "agentkv proxy"
// does: real "agentkv mock-worker" processes (KV events on ZeroMQ) behind
// a real "agentkv proxy" process, driven by the official OpenAI and
// Anthropic SDKs, the workers killed with SIGKILL and restarted on their
// ports. Every wait polls with a deadline; nothing sleeps to synchronise.

// Reply lengths of the mock workers: at --speedup 1 a token takes about
// 12 ms, so a stream runs for about half a second to a second and a half,
// long enough to be killed in the middle.
const (
	pfMinOutput = 40
	pfMaxOutput = 110
	pfModel     = "agentkv-mock"
)

// mockProc is an "agentkv mock-worker" process on fixed ports, so it can
// be killed and started again where the proxy expects it.
type mockProc struct {
	t         *testing.T
	port, zmq int
	p         *cliProcess
}

func newMockProc(t *testing.T) *mockProc {
	return &mockProc{t: t, port: freeport.Port(t), zmq: freeport.Port(t)}
}

func (m *mockProc) url() string { return "http://127.0.0.1:" + strconv.Itoa(m.port) }

// spec is the proxy's --worker value for it.
func (m *mockProc) spec() string {
	return m.url() + ",events=tcp://127.0.0.1:" + strconv.Itoa(m.zmq)
}

// start runs the worker and waits for its startup line (it serves then).
func (m *mockProc) start() {
	m.t.Helper()
	m.p = startProcess(m.t, "mock-worker", "--listen", "127.0.0.1:"+strconv.Itoa(m.port),
		"--events", "tcp://127.0.0.1:"+strconv.Itoa(m.zmq), "--speedup", "1",
		"--min-output", strconv.Itoa(pfMinOutput), "--max-output", strconv.Itoa(pfMaxOutput))
	m.p.line(m.t, "mock worker "+m.url())
	noRaces(m.t, "mock worker", m.p)
}

// kill ends the worker with SIGKILL (no goodbye: its sockets are reset by
// the kernel) and reaps it.
func (m *mockProc) kill() {
	m.t.Helper()
	require.NoError(m.t, m.p.cmd.Process.Signal(syscall.SIGKILL))
	_ = m.p.cmd.Wait()
}

// proxyProc is an "agentkv proxy" process.
type proxyProc struct {
	p    *cliProcess
	base string
}

// startProxyProc starts "agentkv proxy" on a free port with args; it does
// not wait for it.
func startProxyProc(t testing.TB, args ...string) *proxyProc {
	t.Helper()
	base := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	p := startProcess(t, append([]string{"proxy", "--listen", base}, args...)...)
	noRaces(t, "proxy", p)
	return &proxyProc{p: p, base: "http://" + base}
}

// noRaces fails the test if p, under -race, reported a data race.
func noRaces(t testing.TB, name string, p *cliProcess) {
	t.Cleanup(func() {
		if log := p.stderr.String(); strings.Contains(log, "WARNING: DATA RACE") {
			t.Errorf("the %s process reported a data race:\n%s", name, log)
		}
	})
}

// listening waits for the proxy's "listening" line.
func (pp *proxyProc) listening(t testing.TB) string {
	t.Helper()
	return pp.p.line(t, "agentkv proxy listening on "+pp.base)
}

// get GETs path on the proxy: its status and body (0 when it does not
// answer).
func (pp *proxyProc) get(path string) (int, string) {
	c := http.Client{Timeout: 30 * time.Second} // a bound for a hung proxy, not a window
	resp, err := c.Get(pp.base + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metrics scrapes the proxy's /metrics into series → value ("name{labels}"
// exactly as exposed).
func (pp *proxyProc) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	code, body := pp.get("/metrics")
	require.Equal(t, http.StatusOK, code, body)
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	return out
}

// routable reads agentkv_failover_worker_routable of worker id: 1, 0, or
// -1 when the series is absent.
func (pp *proxyProc) routable(t *testing.T, id int) float64 {
	v, ok := pp.metrics(t)[`agentkv_failover_worker_routable{worker="`+strconv.Itoa(id)+`"}`]
	if !ok {
		return -1
	}
	return v
}

// waitBound bounds the waits for what must happen (a worker routable, a
// proxy ready): only a condition that never comes reaches it, so it is
// far above what they take on a loaded 2-core machine. What a wait took
// is logged, never asserted against a wall-clock window.
const waitBound = 2 * time.Minute

// pollUntil polls cond every 10 ms until it holds or d has passed; it
// returns how long it took and whether it held.
func pollUntil(d time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for {
		if cond() {
			return time.Since(start), true
		}
		if time.Since(start) > d {
			return time.Since(start), false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// replyOracle is an in-process mock worker configured like the worker
// processes: a mock's reply is a function of the prompt's tokens alone,
// so it tells what any worker answers to a conversation, fast (its clock
// runs 10,000 times faster).
type replyOracle struct {
	url string
}

func newReplyOracle(t *testing.T) *replyOracle {
	t.Helper()
	s, err := mock.Start(mock.Config{Speedup: 1e4, MinOutput: pfMinOutput, MaxOutput: pfMaxOutput, Aliases: []string{"*"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return &replyOracle{url: s.URL()}
}

// reply is the text a worker answers to msgs; with cont, the last
// message is the assistant's, continued (vLLM's continue_final_message,
// what the proxy sends when it migrates a stream).
func (o *replyOracle) reply(t *testing.T, msgs []chatMsg, cont bool) string {
	t.Helper()
	req := map[string]any{"model": pfModel, "messages": msgs}
	if cont {
		req["continue_final_message"], req["add_generation_prompt"] = true, false
	}
	b, err := json.Marshal(req)
	require.NoError(t, err)
	resp, err := http.Post(o.url+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(rb))
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(rb, &out))
	require.Len(t, out.Choices, 1)
	return out.Choices[0].Message.Content
}

// continuity checks that got is what a client must see for msgs: the
// whole reply, or (migrated) the first k words of the reply, as a cut
// worker sent them, then exactly what a worker answers when asked to
// continue those k words: nothing lost, nothing repeated. It returns
// whether got was migrated, and k.
func (o *replyOracle) continuity(t *testing.T, msgs []chatMsg, got string) (bool, int) {
	t.Helper()
	whole := o.reply(t, msgs, false)
	if got == whole {
		return false, 0
	}
	ww, gw := strings.Fields(whole), strings.Fields(got)
	j := 0
	for j < len(ww) && j < len(gw) && ww[j] == gw[j] {
		j++
	}
	// The cut came after word k ≤ j (the continuation may happen to
	// begin with the reply's next words).
	for k := j; k >= 1 && k > j-4; k-- {
		sent := strings.Join(ww[:k], " ")
		rest := o.reply(t, append(append([]chatMsg(nil), msgs...), chatMsg{"assistant", sent}), true)
		if got == sent+rest {
			return true, k
		}
	}
	t.Errorf("the stream is neither the whole reply nor a continuous migration:\n got  %q\n want %q (or its first words, then their continuation)", got, whole)
	return false, 0
}

// turnResult is one turn of a session as its SDK client saw it.
type turnResult struct {
	session, turn int
	api           string // chat or messages
	msgs          []chatMsg
	worker        string // X-Agentkv-Worker
	status        int
	chunks        int // text deltas received
	text          string
	finish        string
	err           error
	start, end    time.Time
}

// liveStream is a stream in flight, for the test to pick its victim.
type liveStream struct {
	worker string
	chunks int
}

// sessionDriver runs multi-turn streamed sessions through the proxy:
// chat completions with the OpenAI SDK (OpenCode's session header) and
// Messages with the Anthropic SDK (Claude Code's).
type sessionDriver struct {
	base string

	mu      sync.Mutex // guards the fields below
	live    map[int]*liveStream
	results []*turnResult
}

func newSessionDriver(base string) *sessionDriver {
	return &sessionDriver{base: base, live: map[int]*liveStream{}}
}

func (d *sessionDriver) progress(s int, worker string, chunks int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if worker == "" {
		delete(d.live, s)
		return
	}
	d.live[s] = &liveStream{worker: worker, chunks: chunks}
}

// inFlight counts, per worker, the streams in flight with at least
// minChunks text deltas received.
func (d *sessionDriver) inFlight(minChunks int) map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for _, l := range d.live {
		if l.chunks >= minChunks {
			out[l.worker]++
		}
	}
	return out
}

// liveOn lists the sessions whose stream in flight on worker has at
// least minChunks text deltas received.
func (d *sessionDriver) liveOn(worker string, minChunks int) []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []int
	for s, l := range d.live {
		if l.worker == worker && l.chunks >= minChunks {
			out = append(out, s)
		}
	}
	return out
}

func (d *sessionDriver) record(r *turnResult) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.results = append(d.results, r)
}

func (d *sessionDriver) all() []*turnResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*turnResult(nil), d.results...)
}

const pfSystem = "You are a careful coding agent."

// firstPrompt is session s's opening request: unique words, so sessions
// share no KV blocks and spread over the workers.
func firstPrompt(tag string, s int) string {
	return fmt.Sprintf("%s session %d please refactor parser module number %d and explain each change briefly", tag, s, s*7919)
}

// chatTurn streams one chat completion with the OpenAI SDK.
func (d *sessionDriver) chatTurn(ctx context.Context, s, turn int, msgs []chatMsg) *turnResult {
	r := &turnResult{session: s, turn: turn, api: "chat", msgs: msgs, start: time.Now()}
	oc := openai.NewClient(option.WithBaseURL(d.base+"/v1/"), option.WithAPIKey("sk-local"), option.WithMaxRetries(0),
		option.WithHeader("X-Session-Id", "oc-"+strconv.Itoa(s)))
	var params []openai.ChatCompletionMessageParamUnion
	for _, m := range msgs {
		switch m.Role {
		case "system":
			params = append(params, openai.SystemMessage(m.Content))
		case "user":
			params = append(params, openai.UserMessage(m.Content))
		case "assistant":
			params = append(params, openai.AssistantMessage(m.Content))
		}
	}
	var resp *http.Response
	st := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: pfModel, Messages: params},
		option.WithResponseInto(&resp))
	if resp != nil {
		r.status, r.worker = resp.StatusCode, resp.Header.Get(headerWorker)
	}
	var text strings.Builder
	for st.Next() {
		ch := st.Current()
		for _, c := range ch.Choices {
			if c.Delta.Content != "" {
				text.WriteString(c.Delta.Content)
				r.chunks++
			}
			if c.FinishReason != "" {
				r.finish = c.FinishReason
			}
		}
		d.progress(s, r.worker, r.chunks)
	}
	d.progress(s, "", 0)
	r.err, r.text, r.end = st.Err(), text.String(), time.Now()
	_ = st.Close()
	return r
}

// messagesTurn streams one Messages request with the Anthropic SDK; the
// proxy translates it to chat completions (the workers are given without
// apis=), which it can migrate.
func (d *sessionDriver) messagesTurn(ctx context.Context, s, turn int, msgs []chatMsg) *turnResult {
	r := &turnResult{session: s, turn: turn, api: "messages", msgs: msgs, start: time.Now()}
	ac := anthropic.NewClient(aoption.WithBaseURL(d.base), aoption.WithAPIKey("sk-local"), aoption.WithMaxRetries(0),
		aoption.WithHeader("X-Claude-Code-Session-Id", "cc-"+strconv.Itoa(s)))
	p := anthropic.MessageNewParams{Model: pfModel, MaxTokens: 1024}
	for _, m := range msgs {
		switch m.Role {
		case "system":
			p.System = []anthropic.TextBlockParam{{Text: m.Content}}
		case "user":
			p.Messages = append(p.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(m.Content)))
		case "assistant":
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(anthropic.NewTextBlock(m.Content)))
		}
	}
	var resp *http.Response
	st := ac.Messages.NewStreaming(ctx, p, aoption.WithResponseInto(&resp))
	if resp != nil {
		r.status, r.worker = resp.StatusCode, resp.Header.Get(headerWorker)
	}
	var text strings.Builder
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "content_block_delta":
			if ev.Delta.Text != "" {
				text.WriteString(ev.Delta.Text)
				r.chunks++
			}
		case "message_delta":
			r.finish = string(ev.Delta.StopReason)
		}
		d.progress(s, r.worker, r.chunks)
	}
	d.progress(s, "", 0)
	r.err, r.text, r.end = st.Err(), text.String(), time.Now()
	_ = st.Close()
	return r
}

// runSession runs session s (Messages when anth, else chat) turn after
// turn until done says stop. A turn whose stream broke off is sent again
// (what an agent does), so a session goes on through a failure.
func (d *sessionDriver) runSession(ctx context.Context, s int, anth bool, done func(s, okTurns int) bool) {
	tag := "opencode"
	if anth {
		tag = "claude"
	}
	msgs := []chatMsg{{"system", pfSystem}, {"user", firstPrompt(tag, s)}}
	for turn, ok := 0, 0; !done(s, ok) && ctx.Err() == nil; turn++ {
		var r *turnResult
		if anth {
			r = d.messagesTurn(ctx, s, turn, msgs)
		} else {
			r = d.chatTurn(ctx, s, turn, msgs)
		}
		d.record(r)
		if r.err != nil {
			continue // the same turn again
		}
		ok++
		msgs = append(append([]chatMsg(nil), msgs...), chatMsg{"assistant", r.text},
			chatMsg{"user", fmt.Sprintf("%s turn %d of session %d: the tests pass, go on with step %d", tag, ok, s, ok+1)})
	}
}

// TestProcessFailoverWorkerKilled runs three mock-worker processes behind
// a proxy process and sends nine concurrent multi-turn sessions through
// it (six chat completions with the OpenAI SDK, three Messages with the
// Anthropic SDK, all streamed). While streams are in flight, the worker
// serving the most of them is killed with SIGKILL. No request fails
// before its first byte; every cut stream either continues on another
// worker as one continuous text (--migration-limit 1) or ends with an
// error the SDK reports (migration off); the sessions continue on the
// two surviving workers; /readyz stays 200; the proxy's metrics show the
// dead worker not routable within 2 s of the kill. Started again on the
// same ports, the worker becomes routable again and gets new sessions.
func TestProcessFailoverWorkerKilled(t *testing.T) {
	for _, tc := range []struct {
		name      string
		migration bool
	}{{"migration", true}, {"no_migration", false}} {
		t.Run(tc.name, func(t *testing.T) { testWorkerKilled(t, tc.migration) })
	}
}

func testWorkerKilled(t *testing.T, migration bool) {
	t0 := time.Now()
	oracle := newReplyOracle(t)
	workers := []*mockProc{newMockProc(t), newMockProc(t), newMockProc(t)}
	var args []string
	for _, w := range workers {
		w.start()
		args = append(args, "--worker", w.spec())
	}
	if migration {
		args = append(args, "--migration-limit", "1")
	}
	px := startProxyProc(t, args...)
	px.listening(t)
	_, ok := pollUntil(waitBound, func() bool {
		return px.routable(t, 0) == 1 && px.routable(t, 1) == 1 && px.routable(t, 2) == 1
	})
	require.True(t, ok, "the three workers never became routable; proxy log:\n%s", px.p.stderr.String())
	tUp := time.Since(t0)

	// Nine sessions; each runs until the worker was killed and it has
	// then finished two turns.
	const sessions, anthSessions, afterKill = 9, 3, 2
	d := newSessionDriver(px.base)
	var killedAt atomic.Int64 // unix nanos; 0 before the kill
	var okBefore sync.Map     // session → turns finished before its first turn sent after the kill
	done := func(s, ok int) bool {
		if killedAt.Load() == 0 {
			return false
		}
		base, _ := okBefore.LoadOrStore(s, ok)
		return ok-base.(int) >= afterKill
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.runSession(ctx, s, s < anthSessions, done)
		}()
	}

	// The victim: the worker with the most streams well under way (at
	// least two, each with 3 words sent, so the kill cuts them mid-way).
	victim := -1
	_, ok = pollUntil(waitBound, func() bool {
		best := 0
		for u, n := range d.inFlight(3) {
			for i, w := range workers {
				if w.url() == u && n >= 2 && n > best {
					victim, best = i, n
				}
			}
		}
		return victim >= 0
	})
	require.True(t, ok, "never two streams in flight on one worker")
	// These streams are well under way (3 words or more of 40 to 110):
	// the kill cuts them mid-way.
	underWay := d.liveOn(workers[victim].url(), 3)
	kill := time.Now()
	workers[victim].kill()
	killedAt.Store(kill.UnixNano())

	// /readyz stays 200 from the kill on.
	var notReady atomic.Int64
	var readyChecks atomic.Int64
	stopReady := make(chan struct{})
	readyDone := make(chan struct{})
	go func() {
		defer close(readyDone)
		for {
			select {
			case <-stopReady:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if code, _ := px.get("/readyz"); code != http.StatusOK {
				notReady.Add(1)
			}
			readyChecks.Add(1)
		}
	}()

	// The proxy sees it: the worker is not routable (its breaker open,
	// or its health down). Within about 100 ms on an idle machine (the
	// cut streams open its breaker and probe it at once): logged, not
	// asserted, since a loaded machine stretches it; that no turn sent
	// after the kill reaches it is asserted below.
	_, ok = pollUntil(waitBound, func() bool { return px.routable(t, victim) == 0 })
	ejected := time.Since(kill)
	require.True(t, ok, "the killed worker is still routable %v after the kill; proxy log:\n%s", ejected, px.p.stderr.String())
	m := px.metrics(t)
	vl := `{worker="` + strconv.Itoa(victim) + `"}`
	t.Logf("worker %d killed with %d streams well under way; not routable after %v (breaker state %v, health %v, breaker opens %v)",
		victim, len(underWay), ejected, m["agentkv_failover_breaker_state"+vl], m["agentkv_failover_worker_health"+vl],
		m["agentkv_failover_breaker_opens_total"+vl])

	wg.Wait()
	require.NoError(t, ctx.Err(), "the sessions did not finish in time")
	close(stopReady)
	<-readyDone
	require.Zero(t, notReady.Load(), "/readyz answered other than 200 %d of %d times after the kill", notReady.Load(), readyChecks.Load())
	tSessions := time.Since(kill)

	// What the clients saw.
	results := d.all()
	var cutSeen, migrated int
	cutUnderWay := map[int]bool{} // sessions of underWay whose stream was cut as it must be
	for _, r := range results {
		where := fmt.Sprintf("session %d (%s) turn %d on %s", r.session, r.api, r.turn, r.worker)
		require.Equal(t, http.StatusOK, r.status, "%s: no request fails before its first byte (%v)", where, r.err)
		if r.start.After(kill) {
			require.NotEqual(t, workers[victim].url(), r.worker, "%s: a turn sent after the kill is served by a live worker", where)
		}
		inFlightAtKill := r.start.Before(kill) && r.end.After(kill) && slices.Contains(underWay, r.session)
		if r.err != nil {
			// Only a stream cut by the kill ends in an error, and only
			// with migration off; it had started.
			require.False(t, migration, "%s: with migration on no stream fails: %v", where, r.err)
			require.Equal(t, workers[victim].url(), r.worker, "%s: %v", where, r.err)
			require.Greater(t, r.chunks, 0, "%s: the stream had started", where)
			require.True(t, r.start.Before(kill), where)
			require.Contains(t, r.err.Error(), "broke off", "%s: the API's own error event", where)
			cutSeen++
			if inFlightAtKill && r.chunks >= 3 {
				cutUnderWay[r.session] = true
			}
			continue
		}
		require.NotEmpty(t, r.finish, "%s: the stream ended properly", where)
		wasMigrated, k := oracle.continuity(t, r.msgs, r.text)
		if wasMigrated {
			require.True(t, migration, "%s: migrated with migration off", where)
			require.Equal(t, workers[victim].url(), r.worker, where)
			t.Logf("%s: migrated after %d words", where, k)
			migrated++
			if inFlightAtKill && k >= 3 {
				cutUnderWay[r.session] = true
			}
		}
	}
	require.Len(t, cutUnderWay, len(underWay), "each stream well under way at the kill was cut (sessions %v, cut as they must be %v)", underWay, cutUnderWay)
	m = px.metrics(t)
	kinds := func(kind string) float64 {
		return m[`agentkv_gateway_failures_total{api="chat",kind="`+kind+`"}`] + m[`agentkv_gateway_failures_total{api="messages",kind="`+kind+`"}`]
	}
	if migration {
		// Streams cut before their first word migrate too (as the
		// original request: their text is the whole reply).
		require.GreaterOrEqual(t, m[`agentkv_failover_migrations_total`+vl], float64(migrated))
		require.Equal(t, m[`agentkv_failover_migrations_total`+vl], kinds("migrated"))
		require.Zero(t, kinds("cut"), "no stream ended cut")
	} else {
		require.Equal(t, float64(cutSeen), kinds("cut"), "every cut the clients saw is counted, and only those")
		require.Zero(t, kinds("migrated"))
	}

	// Start it again on the same ports: routable again, and new sessions
	// reach it.
	workers[victim].start()
	back, ok := pollUntil(waitBound, func() bool { return px.routable(t, victim) == 1 })
	require.True(t, ok, "the restarted worker never became routable; proxy log:\n%s", px.p.stderr.String())
	reached := -1
	for i := 0; i < 60 && reached < 0; i++ {
		hdr := map[string]string{"X-Session-Id": "new-" + strconv.Itoa(i)}
		body, _ := json.Marshal(map[string]any{"model": pfModel, "max_tokens": 1,
			"messages": []chatMsg{{"user", firstPrompt("fresh", 1000+i)}}})
		resp, b := post(t, px.base+"/v1/chat/completions", hdr, body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		if resp.Header.Get(headerWorker) == workers[victim].url() {
			reached = i + 1
		}
	}
	require.Positive(t, reached, "no new session reached the restarted worker")
	t.Logf("up in %v; %d turns by %d sessions (%d cut, %d migrated); sessions done %v after the kill; restarted worker routable after %v, new session #%d reached it; total %v",
		tUp, len(results), sessions, cutSeen, migrated, tSessions, back, reached, time.Since(t0))
}

// TestProcessFailoverWorkersDownAtStart starts the proxy in front of two
// worker processes that are not running yet: with --block-size it serves
// at once; without, it must wait for a first worker to learn the block
// size, and answers /healthz and /readyz meanwhile. Either way /readyz is
// 503 until a worker is up, then requests succeed; the second worker,
// started later, joins and gets sessions. With --block-size, every
// worker is then killed: /readyz is 503 and requests get a clean 503 or
// 502 in their API's shape. Without, a client that leaves mid-stream is
// logged and counted as 499.
func TestProcessFailoverWorkersDownAtStart(t *testing.T) {
	for _, tc := range []struct {
		name      string
		blockSize bool
	}{{"block_size", true}, {"no_block_size", false}} {
		t.Run(tc.name, func(t *testing.T) { testWorkersDownAtStart(t, tc.blockSize) })
	}
}

func testWorkersDownAtStart(t *testing.T, blockSize bool) {
	t0 := time.Now()
	a, b := newMockProc(t), newMockProc(t)
	args := []string{"--worker", a.spec(), "--worker", b.spec()}
	if blockSize {
		args = append(args, "--block-size", "16")
	}
	px := startProxyProc(t, args...)
	if blockSize {
		px.listening(t) // it does not wait for a worker
	} else {
		_, ok := pollUntil(waitBound, func() bool {
			return strings.Contains(px.p.stderr.String(), "waiting for a worker to answer")
		})
		require.True(t, ok, "the proxy does not say it waits; log:\n%s", px.p.stderr.String())
	}
	// It answers while no worker is up: live, not ready.
	_, ok := pollUntil(waitBound, func() bool { code, _ := px.get("/healthz"); return code == http.StatusOK })
	require.True(t, ok, "/healthz never answered 200 while the workers are down; log:\n%s", px.p.stderr.String())
	code, body := px.get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	tWaiting := time.Since(t0)

	a.start()
	if !blockSize {
		px.listening(t) // it learnt the block size from a
	}
	up, ok := pollUntil(waitBound, func() bool { code, _ := px.get("/readyz"); return code == http.StatusOK })
	require.True(t, ok, "/readyz never 200 with worker a up; log:\n%s", px.p.stderr.String())
	// Requests succeed at once, through both SDKs.
	d := newSessionDriver(px.base)
	ctx := context.Background()
	for i, r := range []*turnResult{
		d.chatTurn(ctx, 100, 0, []chatMsg{{"system", pfSystem}, {"user", firstPrompt("opencode", 100)}}),
		d.messagesTurn(ctx, 101, 0, []chatMsg{{"system", pfSystem}, {"user", firstPrompt("claude", 101)}}),
	} {
		require.NoError(t, r.err, "request %d", i)
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, a.url(), r.worker)
		require.NotEmpty(t, r.finish)
		require.NotEmpty(t, r.text)
	}

	// The second worker comes up later: it joins and gets new sessions.
	b.start()
	joined, ok := pollUntil(waitBound, func() bool { return px.routable(t, 1) == 1 })
	require.True(t, ok, "worker b never became routable; log:\n%s", px.p.stderr.String())
	reached := -1
	for i := 0; i < 60 && reached < 0; i++ {
		body, _ := json.Marshal(map[string]any{"model": pfModel, "max_tokens": 1,
			"messages": []chatMsg{{"user", firstPrompt("later", 2000+i)}}})
		resp, rb := post(t, px.base+"/v1/chat/completions", map[string]string{"X-Session-Id": "later-" + strconv.Itoa(i)}, body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(rb))
		if resp.Header.Get(headerWorker) == b.url() {
			reached = i + 1
		}
	}
	require.Positive(t, reached, "no new session reached worker b")
	t.Logf("answering (worker-less) after %v; ready %v after worker a started; worker b routable %v after it started, new session #%d reached it",
		tWaiting, up, joined, reached)

	if !blockSize {
		clientLeaves(t, px)
		return
	}
	// Every worker dies: requests get a clean error in their API's shape
	// (502: every worker tried failed; 503: none is routable any more, after
	// the proxy waited a moment for one), and /readyz is 503.
	a.kill()
	b.kill()
	killed := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	raws := make([]struct {
		code int
		body []byte
	}, 2)
	wg.Add(4)
	go func() {
		defer wg.Done()
		errs[0] = d.chatTurn(ctx, 102, 0, []chatMsg{{"user", firstPrompt("opencode", 102)}}).err
	}()
	go func() {
		defer wg.Done()
		errs[1] = d.messagesTurn(ctx, 103, 0, []chatMsg{{"user", firstPrompt("claude", 103)}}).err
	}()
	for i, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(map[string]any{"model": pfModel, "max_tokens": 16, "stream": true,
				"messages": []chatMsg{{"user", firstPrompt("raw", 104+i)}}})
			resp, rb := post(t, px.base+path, map[string]string{"anthropic-version": "2023-06-01"}, b)
			raws[i].code, raws[i].body = resp.StatusCode, rb
		}()
	}
	wg.Wait()
	answered := time.Since(killed)
	down, ok := pollUntil(waitBound, func() bool { code, _ := px.get("/readyz"); return code == http.StatusServiceUnavailable })
	require.True(t, ok, "/readyz still 200 with every worker dead")
	_, body = px.get("/readyz")
	var oe *openai.Error
	require.ErrorAs(t, errs[0], &oe)
	require.Contains(t, []int{http.StatusBadGateway, http.StatusServiceUnavailable}, oe.StatusCode, "%v", errs[0])
	var ae *anthropic.Error
	require.ErrorAs(t, errs[1], &ae)
	require.Contains(t, []int{http.StatusBadGateway, http.StatusServiceUnavailable}, ae.StatusCode, "%v", errs[1])
	for i, r := range raws {
		require.Contains(t, []int{http.StatusBadGateway, http.StatusServiceUnavailable}, r.code, string(r.body))
		var shape struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(r.body, &shape), string(r.body))
		require.NotEmpty(t, shape.Error.Message, string(r.body))
		require.NotEmpty(t, shape.Error.Type, string(r.body))
		if i == 1 {
			require.Equal(t, "error", shape.Type, "Anthropic's shape: %s", r.body)
		} else {
			require.Empty(t, shape.Type, "OpenAI's shape: %s", r.body)
		}
	}
	t.Logf("every worker killed: requests answered within %v (SDKs: chat %d, messages %d; raw: chat %d, messages %d), then /readyz 503 after %v (%q); total %v",
		answered, oe.StatusCode, ae.StatusCode, raws[0].code, raws[1].code, down, strings.TrimSpace(body), time.Since(t0))
}

// clientLeaves opens a chat stream through the proxy, reads its first
// event and hangs up: the proxy logs the request as 499 and counts it.
func clientLeaves(t *testing.T, px *proxyProc) {
	t.Helper()
	const series = `agentkv_gateway_responses_total{api="chat",code="499"}`
	before := px.metrics(t)[series]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body, _ := json.Marshal(map[string]any{"model": pfModel, "stream": true,
		"messages": []chatMsg{{"user", firstPrompt("leaver", 1)}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, px.base+"/v1/chat/completions", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", "leaver")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "data: "), line)
	cancel()
	resp.Body.Close()
	took, ok := pollUntil(waitBound, func() bool {
		return px.metrics(t)[series] == before+1 && strings.Contains(px.p.stderr.String(), "status=499")
	})
	require.True(t, ok, "no 499 in the proxy's log and metrics (%v → %v); log:\n%s", before, px.metrics(t)[series], px.p.stderr.String())
	var logLine string
	for _, l := range strings.Split(px.p.stderr.String(), "\n") {
		if strings.Contains(l, "status=499") {
			logLine = l
		}
	}
	require.Contains(t, logLine, "session=leaver")
	t.Logf("client gone: 499 logged and counted %v after it hung up: %s", took, logLine)
}
