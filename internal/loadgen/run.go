package loadgen

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentkv/agentkv/trace"
)

// Runner replays workloads live against one endpoint. It is safe for
// concurrent use: Progress may be called while Run runs; concurrent Runs
// work but share Progress's counters (the latest Run's are reported).
type Runner struct {
	cfg resolved
	cur atomic.Pointer[run] // the latest Run, for Progress
}

// New validates cfg and returns a Runner. It sends nothing.
func New(cfg Config) (*Runner, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	return &Runner{cfg: r}, nil
}

// URL returns the completions URL the requests are posted to.
func (r *Runner) URL() string { return r.cfg.url }

// Progress is a snapshot of a running replay, for a progress line.
type Progress struct {
	Planned  int // requests the workload holds (capped by MaxRequests)
	Sent     int // requests sent
	Finished int // requests finished (successfully or not; cancelled ones excluded)
	Errors   int // finished with an error
	InFlight int // sent and not finished
	// Programs is the number of agent programs running (closed loop) or
	// requests in flight (open loop).
	Programs     int
	OutputTokens int64 // completion tokens received
	Elapsed      time.Duration
}

// Progress returns the counters of the current (or last) Run; the zero
// Progress before the first.
func (r *Runner) Progress() Progress {
	rs := r.cur.Load()
	if rs == nil {
		return Progress{}
	}
	return Progress{
		Planned:      rs.planned,
		Sent:         int(min(rs.sent.Load(), int64(rs.planned))),
		Finished:     int(rs.finished.Load()),
		Errors:       int(rs.errors.Load()),
		InFlight:     int(rs.inFlight.Load()),
		Programs:     int(rs.programs.Load()),
		OutputTokens: rs.outTokens.Load(),
		Elapsed:      rs.cfg.Now().Sub(rs.start),
	}
}

// Report is the outcome of a Run.
type Report struct {
	// Model is the model the requests named; URL where they went.
	Model, URL string
	Harness    Harness
	Summary    Summary
	// Results holds every request sent, in order of sending (cancelled
	// requests included, with KindCanceled). The caller owns it.
	Results []Result
}

// Run replays w against the endpoint and returns what it measured.
//
// It first asks GET /v1/models (unless SkipPreflight) and fails with
// ErrUnreachable when nothing answers, and with ErrNoModel when no model
// was configured and none is listed. A closed-loop workload runs each
// session's turns in order: turn k+1 is sent when turn k's reply has
// ended, its dependencies (WaitFor) have finished and its Delay (scaled by
// 1/Speed) has passed; a subagent starts Start/Speed after its parent's
// ParentTurn ends and runs concurrently with it; programs (a root with
// everything it spawns or waits for) start in workload order at their
// Start, at most Concurrency at once. An open-loop workload sends every
// turn at Arrival/Speed, at most Concurrency in flight (late requests
// record their Lag).
//
// Failed requests are counted by kind and never stop the run. When ctx is
// cancelled, the requests in flight are abandoned and Run returns the
// partial Report with an error wrapping ctx.Err().
func (r *Runner) Run(ctx context.Context, w *trace.Workload) (*Report, error) {
	if w == nil || len(w.Sessions) == 0 {
		return nil, fmt.Errorf("%w: no sessions", ErrWorkload)
	}
	if err := w.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrWorkload, err)
	}
	model := r.cfg.Model
	if !r.cfg.SkipPreflight {
		var err error
		if model, err = r.preflight(ctx); err != nil {
			return nil, err
		}
	}
	rs := newRun(&r.cfg, w, model)
	r.cur.Store(rs)
	schedCtx, stop := context.WithCancel(ctx)
	rs.reqCtx, rs.schedCtx, rs.stopFn = ctx, schedCtx, stop
	defer stop()
	if w.OpenLoop {
		rs.openLoop()
	} else {
		rs.closedLoop()
	}
	wall := r.cfg.Now().Sub(rs.start)
	rs.mu.Lock()
	results := rs.results
	rs.results = nil
	rs.mu.Unlock()
	slices.SortFunc(results, func(a, b Result) int { return cmp.Or(a.Sent.Compare(b.Sent), cmp.Compare(a.seq, b.seq)) })
	rep := &Report{Model: model, URL: r.cfg.url, Harness: r.cfg.Harness, Results: results,
		Summary: Summarize(results, wall)}
	rep.Summary.Planned = rs.planned
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("loadgen: run interrupted: %w", err)
	}
	return rep, nil
}

// preflight checks that the endpoint answers HTTP and picks the model.
func (r *Runner) preflight(ctx context.Context) (string, error) {
	cfg := &r.cfg
	pctx, cancel := context.WithTimeout(ctx, min(cfg.Timeout, 30*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, cfg.modelsURL, nil)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrConfig, err)
	}
	copyHeader(req.Header, cfg.Header)
	resp, err := cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("loadgen: preflight: %w", ctx.Err())
		}
		return "", fmt.Errorf("%w: GET %s: %v", ErrUnreachable, cfg.modelsURL, err)
	}
	defer resp.Body.Close()
	if cfg.Model != "" {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return cfg.Model, nil
	}
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("%w: GET %s answered %s; name the model", ErrNoModel, cfg.modelsURL, resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&list); err != nil {
		return "", fmt.Errorf("%w: GET %s: %v; name the model", ErrNoModel, cfg.modelsURL, err)
	}
	for _, m := range list.Data {
		if m.ID != "" {
			return m.ID, nil
		}
	}
	return "", fmt.Errorf("%w: GET %s lists no model; name the model", ErrNoModel, cfg.modelsURL)
}

// run is the state of one Run.
type run struct {
	cfg      *resolved
	w        *trace.Workload
	model    string
	prompter Prompter
	planned  int
	start    time.Time

	reqCtx   context.Context // the caller's: cancels requests in flight
	schedCtx context.Context // reqCtx, also cancelled by stop: ends waits
	stopFn   context.CancelFunc

	sessions []sessRun
	byID     map[string]int

	sent      atomic.Int64 // requests reserved by take (may exceed planned by the losers of the last race)
	finished  atomic.Int64
	errors    atomic.Int64
	inFlight  atomic.Int64
	programs  atomic.Int64
	outTokens atomic.Int64

	mu      sync.Mutex // guards results
	results []Result
}

// sessRun is one session's replay state; everything but done is
// immutable once the run starts.
type sessRun struct {
	s        *trace.Session
	who      identity
	salt     uint64
	atStart  []int         // children spawned when the session starts (ParentTurn -1)
	atTurn   map[int][]int // children spawned when turn k ends
	done     chan struct{} // closed when the session has finished or given up
	doneOnce sync.Once
}

func (s *sessRun) finish() { s.doneOnce.Do(func() { close(s.done) }) }

func newRun(cfg *resolved, w *trace.Workload, model string) *run {
	rs := &run{cfg: cfg, w: w, model: model, prompter: NewPrompter(w.BlockTokens, cfg.Seed),
		sessions: make([]sessRun, len(w.Sessions)), byID: make(map[string]int, len(w.Sessions))}
	for i := range w.Sessions {
		rs.byID[w.Sessions[i].ID] = i
		rs.planned += len(w.Sessions[i].Turns)
	}
	if cfg.MaxRequests > 0 {
		rs.planned = min(rs.planned, cfg.MaxRequests)
	}
	for i := range w.Sessions {
		s := &w.Sessions[i]
		st := &rs.sessions[i]
		st.s, st.done = s, make(chan struct{})
		st.salt = mix64(uint64(i) + 0x5851f42d4c957f2d)
		root := i
		for hops := 0; w.Sessions[root].Parent != "" && hops <= len(w.Sessions); hops++ {
			root = rs.byID[w.Sessions[root].Parent]
		}
		p := cfg.SessionPrefix
		st.who = identity{id: p + s.ID, root: p + w.Sessions[root].ID, agentName: s.Agent}
		if s.Parent != "" {
			pi := rs.byID[s.Parent]
			st.who.parent = p + s.Parent
			st.who.agent = agentID(s.ID, w.Sessions[root].ID)
			if pi != root {
				st.who.parentAgent = agentID(s.Parent, w.Sessions[root].ID)
			}
			ps := &rs.sessions[pi]
			if s.ParentTurn < 0 {
				ps.atStart = append(ps.atStart, i)
			} else {
				if ps.atTurn == nil {
					ps.atTurn = make(map[int][]int)
				}
				ps.atTurn[s.ParentTurn] = append(ps.atTurn[s.ParentTurn], i)
			}
		}
	}
	rs.start = cfg.Now()
	return rs
}

// scale converts a trace duration to replay time.
func (rs *run) scale(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(float64(d) / rs.cfg.Speed)
}

// sleep waits d on the scheduling context.
func (rs *run) sleep(d time.Duration) error {
	if d <= 0 {
		return rs.schedCtx.Err()
	}
	return rs.cfg.Sleep(rs.schedCtx, d)
}

// until sleeps until start+at on the run's clock.
func (rs *run) until(at time.Duration) error {
	return rs.sleep(rs.start.Add(at).Sub(rs.cfg.Now()))
}

// take reserves one request; false once MaxRequests were reserved or the
// run is stopping. Reserving the last one stops the schedule.
func (rs *run) take() (seq int64, ok bool) {
	if rs.schedCtx.Err() != nil {
		return 0, false
	}
	n := rs.sent.Add(1)
	if max := int64(rs.cfg.MaxRequests); max > 0 {
		if n > max {
			return 0, false
		}
		if n == max {
			rs.stopFn()
		}
	}
	return n, true
}

// program is a set of sessions that start together: a root, its
// subagents, and any session linked to them by WaitFor.
type program struct {
	roots    []int
	minStart time.Duration
}

// programs groups the sessions into programs in workload order (by their
// first session) with a union-find over parent and WaitFor links, so that
// no program waits for a session of another (which, under a concurrency
// bound, might never start).
func (rs *run) programsOf() []program {
	ss := rs.w.Sessions
	parent := make([]int, len(ss))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(x int) int {
		for parent[x] != x {
			parent[x] = parent[parent[x]]
			x = parent[x]
		}
		return x
	}
	union := func(a, b int) {
		ra, rb := find(a), find(b)
		if ra < rb {
			parent[rb] = ra
		} else if rb < ra {
			parent[ra] = rb
		}
	}
	for i := range ss {
		if ss[i].Parent != "" {
			union(i, rs.byID[ss[i].Parent])
		}
		for _, t := range ss[i].Turns {
			for _, id := range t.WaitFor {
				union(i, rs.byID[id])
			}
		}
	}
	idx := map[int]int{}
	var progs []program
	for i := range ss {
		if ss[i].Parent != "" {
			continue
		}
		c := find(i)
		k, ok := idx[c]
		if !ok {
			k = len(progs)
			idx[c] = k
			progs = append(progs, program{minStart: ss[i].Start})
		}
		progs[k].roots = append(progs[k].roots, i)
		progs[k].minStart = min(progs[k].minStart, ss[i].Start)
	}
	return progs
}

// closedLoop launches programs in order under the concurrency bound and
// waits for all of them.
func (rs *run) closedLoop() {
	var sem chan struct{}
	if c := rs.cfg.Concurrency; c > 0 {
		sem = make(chan struct{}, c)
	}
	var all sync.WaitGroup
	defer all.Wait()
	for _, p := range rs.programsOf() {
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-rs.schedCtx.Done():
				return
			}
		}
		if rs.until(rs.scale(p.minStart)) != nil {
			if sem != nil {
				<-sem
			}
			return
		}
		rs.programs.Add(1)
		var wg sync.WaitGroup
		for _, root := range p.roots {
			rs.spawn(root, rs.scale(rs.w.Sessions[root].Start-p.minStart), &wg)
		}
		all.Add(1)
		go func() {
			defer all.Done()
			wg.Wait()
			rs.programs.Add(-1)
			if sem != nil {
				<-sem
			}
		}()
	}
}

// spawn starts session i after delay d, counted in wg.
func (rs *run) spawn(i int, d time.Duration, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		st := &rs.sessions[i]
		defer st.finish()
		if rs.sleep(d) != nil {
			return
		}
		rs.session(i, wg)
	}()
}

// session runs session i's turns in order.
func (rs *run) session(i int, wg *sync.WaitGroup) {
	st := &rs.sessions[i]
	for _, c := range st.atStart {
		rs.spawn(c, rs.scale(rs.w.Sessions[c].Start), wg)
	}
	for k := range st.s.Turns {
		t := &st.s.Turns[k]
		for _, id := range t.WaitFor {
			select {
			case <-rs.sessions[rs.byID[id]].done:
			case <-rs.schedCtx.Done():
				return
			}
		}
		if rs.sleep(rs.scale(t.Delay)) != nil {
			return
		}
		seq, ok := rs.take()
		if !ok {
			return
		}
		rs.send(i, k, seq, time.Time{}, 0)
		for _, c := range st.atTurn[k] {
			rs.spawn(c, rs.scale(rs.w.Sessions[c].Start), wg)
		}
	}
}

// openLoop sends every turn at its arrival, at most Concurrency in flight.
func (rs *run) openLoop() {
	type arrival struct {
		at      time.Duration
		sess, k int
	}
	var arr []arrival
	for i := range rs.w.Sessions {
		for k, t := range rs.w.Sessions[i].Turns {
			arr = append(arr, arrival{t.Arrival, i, k})
		}
	}
	slices.SortStableFunc(arr, func(a, b arrival) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.sess, b.sess), cmp.Compare(a.k, b.k))
	})
	var sem chan struct{}
	if c := rs.cfg.Concurrency; c > 0 {
		sem = make(chan struct{}, c)
	}
	var all sync.WaitGroup
	defer all.Wait()
	for _, a := range arr {
		at := rs.scale(a.at)
		if rs.until(at) != nil {
			return
		}
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-rs.schedCtx.Done():
				return
			}
		}
		seq, ok := rs.take()
		if !ok {
			if sem != nil {
				<-sem
			}
			return
		}
		now := rs.cfg.Now()
		lag := max(now.Sub(rs.start.Add(at)), 0)
		rs.programs.Add(1)
		all.Add(1)
		go func() {
			defer all.Done()
			rs.send(a.sess, a.k, seq, now, lag)
			rs.programs.Add(-1)
			if sem != nil {
				<-sem
			}
		}()
	}
}

// send performs one request and records its Result. sent is when it was
// dispatched (zero: now).
func (rs *run) send(i, k int, seq int64, sent time.Time, lag time.Duration) {
	st := &rs.sessions[i]
	t := &st.s.Turns[k]
	cfg := rs.cfg
	res := Result{
		Session: st.who.id, Parent: st.who.parent, Turn: k, Final: k == len(st.s.Turns)-1,
		RequestID: st.who.id + "/" + strconv.Itoa(k), Model: rs.model, Lag: lag, seq: seq,
		InputTokens: t.InputTokens, OutputTokens: t.OutputTokens, Words: Words(t.InputTokens),
		BlockTokens: rs.w.BlockTokens, HashIDs: t.HashIDs,
	}
	body := rs.body(t, mix64(st.salt+uint64(k)))
	rctx, cancel := context.WithTimeout(rs.reqCtx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, cfg.url, bytes.NewReader(body))
	if err != nil { // the URL was validated by New: only a bug gets here
		res.Error, res.Detail = KindTransport, err.Error()
		rs.record(&res)
		return
	}
	copyHeader(req.Header, cfg.Header)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if cfg.API == Messages && req.Header.Get("Anthropic-Version") == "" {
		req.Header.Set("Anthropic-Version", "2023-06-01")
	}
	setSessionHeaders(req.Header, cfg.Harness, &st.who, k, res.Final)

	rs.inFlight.Add(1)
	defer rs.inFlight.Add(-1)
	res.Sent = sent
	if sent.IsZero() {
		res.Sent = cfg.Now()
	}
	res.Offset = res.Sent.Sub(rs.start)
	ss := streamStats{api: cfg.API}
	stream := false
	resp, err := cfg.Client.Do(req)
	switch {
	case err != nil:
		res.Error, res.Detail = rs.classify(rctx, err, false)
	case resp.StatusCode/100 != 2:
		res.Status = resp.StatusCode
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		res.Error, res.Detail = KindHTTP, truncate(string(bytes.TrimSpace(b)), 200)
		if rs.reqCtx.Err() != nil {
			res.Error, res.Detail = KindCanceled, rs.reqCtx.Err().Error()
		}
	default:
		res.Status = resp.StatusCode
		if stream = isEventStream(resp.Header.Get("Content-Type")); stream {
			err = readStream(resp.Body, cfg.Now, &ss)
		} else {
			err = readWhole(resp.Body, cfg.Now, &ss)
		}
		resp.Body.Close()
		switch {
		case errors.Is(err, errLineTooLong):
			res.Error, res.Detail = KindMalformed, err.Error()
		case err != nil:
			res.Error, res.Detail = rs.classify(rctx, err, true)
		case ss.streamError != "":
			res.Error, res.Detail = KindStreamError, ss.streamError
		case ss.malformed > 0:
			res.Error, res.Detail = KindMalformed, fmt.Sprintf("%d malformed events", ss.malformed)
		case ss.events == 0:
			res.Error, res.Detail = KindMalformed, "no events in the reply"
		}
	}
	end := cfg.Now()
	res.E2E = end.Sub(res.Sent)
	if !ss.firstToken.IsZero() {
		res.TTFT = ss.firstToken.Sub(res.Sent)
		if !stream {
			res.TTFT = res.E2E // a whole reply: its tokens came with its end
		}
	}
	res.Events, res.Malformed, res.FinishReason = ss.events, ss.malformed, ss.finishReason
	res.HasUsage = ss.hasUsage
	if ss.hasUsage {
		res.PromptTokens, res.CompletionTokens = ss.usage.PromptTokens, ss.usage.CompletionTokens
		if d := ss.usage.PromptTokensDetails; d != nil && d.CachedTokens != nil {
			res.CachedTokens, res.HasCached = *d.CachedTokens, true
		}
	} else {
		res.CompletionTokens = ss.contentEvents
	}
	rs.record(&res)
}

// classify names a transport error. inBody is true when the reply had
// started.
func (rs *run) classify(rctx context.Context, err error, inBody bool) (ErrorKind, string) {
	switch {
	case rs.reqCtx.Err() != nil:
		return KindCanceled, rs.reqCtx.Err().Error()
	case errors.Is(rctx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return KindTimeout, fmt.Sprintf("no complete reply within %v", rs.cfg.Timeout)
	case inBody:
		return KindStream, err.Error()
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return KindConnect, err.Error()
	}
	return KindTransport, err.Error()
}

// record counts res and hands it out.
func (rs *run) record(res *Result) {
	if res.Error != KindCanceled {
		rs.finished.Add(1)
		if !res.OK() {
			rs.errors.Add(1)
		}
		rs.outTokens.Add(int64(res.CompletionTokens))
		if rs.cfg.OnResult != nil {
			cp := *res
			rs.cfg.OnResult(&cp)
		}
	}
	rs.mu.Lock()
	rs.results = append(rs.results, *res)
	rs.mu.Unlock()
}

// body builds the JSON request for turn t.
func (rs *run) body(t *trace.Turn, salt uint64) []byte {
	words := Words(t.InputTokens)
	b := make([]byte, 0, words*8+256)
	b = append(b, `{"model":`...)
	b = appendJSONString(b, rs.model)
	switch rs.cfg.API {
	case Completions:
		b = append(b, `,"prompt":"`...)
	case Responses:
		b = append(b, `,"store":false,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"`...)
	default:
		b = append(b, `,"messages":[{"role":"user","content":"`...)
	}
	b = rs.prompter.Append(b, t.HashIDs, t.InputTokens, salt) // [a-z ] only: no escaping
	switch rs.cfg.API {
	case Completions:
		b = append(b, '"')
	case Responses:
		b = append(b, `"}]}]`...)
	default:
		b = append(b, `"}]`...)
	}
	switch rs.cfg.API {
	case Responses:
		b = append(b, `,"max_output_tokens":`...)
	default:
		b = append(b, `,"max_tokens":`...)
	}
	b = strconv.AppendInt(b, int64(max(t.OutputTokens, 1)), 10)
	if rs.cfg.API == Chat || rs.cfg.API == Completions {
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	} else {
		b = append(b, `,"stream":true`...)
	}
	if rs.cfg.IgnoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

func isEventStream(ct string) bool {
	return len(ct) >= 17 && bytes.EqualFold([]byte(ct[:17]), []byte("text/event-stream"))
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
}
