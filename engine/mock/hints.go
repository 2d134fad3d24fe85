package mock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/kvhint"
)

// KV hints (package kvhint) reach a mock worker two ways, as they reach
// vLLM and SGLang:
//
//   - inline, as the "kv_hints" field of a generation request's JSON body
//     (vLLM's and SGLang's field): executed before the request is queued,
//     answered in the ReplyHeader response header; a broken envelope is
//     rejected there and the request is served as if it had none;
//   - on the control endpoint, POST /kv/hints with the envelope as the body
//     (JSON, or kvhint's MessagePack with Content-Type
//     application/msgpack), answered with the kvhint.Reply as JSON: between
//     requests (release at session end, demote for a long tool gap).
//
// A worker's control endpoint, the source_control_endpoint a kv.fetch
// names, is its base URL; peers read blocks from it with POST /kv/blocks.

// Hint wire constants.
const (
	// HintsField is the request body field that carries an inline envelope.
	HintsField = "kv_hints"
	// ReplyHeader carries the kvhint.Reply (JSON, one line) to an inline
	// envelope.
	ReplyHeader = "X-Kv-Hints-Reply"
	// HintsPath is the control endpoint's path; BlocksPath is where peers
	// fetch blocks for kv.fetch.
	HintsPath  = "/kv/hints"
	BlocksPath = "/kv/blocks"
)

// Defaults of a zero HintConfig.
const (
	DefaultMaxHintBytes   = 1 << 20
	DefaultFetchTimeout   = 5 * time.Second
	DefaultMaxHintSession = 4096
)

// HintConfig configures how the worker executes KV hints. Zero fields mean
// the documented defaults.
type HintConfig struct {
	// Off makes the worker ignore inline envelopes (no reply header) and
	// answer the control endpoints 404, as an engine without hint support.
	Off bool
	// Bounds are the limits actions are clipped to and validated against;
	// the zero value means kvhint's defaults (64 actions, 8192 blocks, ids
	// up to 512 bytes).
	Bounds kvhint.Bounds
	// MaxBytes bounds one encoded envelope; 0 means 1 MiB.
	MaxBytes int
	// FetchTimeout bounds one kv.fetch transfer from a peer; 0 means 5s.
	FetchTimeout time.Duration
	// MaxSessions bounds the sessions whose hinted blocks the worker
	// remembers (to resolve whole-session and range targets); 0 means 4096.
	MaxSessions int
}

func (c HintConfig) withDefaults() HintConfig {
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxHintBytes
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = DefaultFetchTimeout
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxHintSession
	}
	return c
}

// HintStats counts what the worker did with KV hints.
type HintStats struct {
	// Actions counts actions by kind and outcome (index by kvhint.Kind and
	// kvhint.Outcome).
	Actions [7][6]int64
	// Inline and Control count envelopes by channel; Rejected counts
	// envelopes refused whole (malformed, oversized, invalid).
	Inline, Control, Rejected int64
	// Fetches counts kv.fetch transfers from peers, FetchFailures those
	// that failed; FetchBlocks, FetchBytes and FetchTime what they moved
	// and how long they took. Exported counts blocks served to peers.
	Fetches, FetchFailures, FetchBlocks, FetchBytes int64
	FetchTime                                       time.Duration
	Exported                                        int64
}

// hintState is the server's hint machinery; mu guards sessions.
type hintState struct {
	cfg    HintConfig
	client *http.Client

	mu       sync.Mutex // guards sessions, order
	sessions map[string][]uint64
	order    []string // FIFO of session ids, for the bound

	statsMu sync.Mutex // guards stats
	stats   HintStats

	seq atomic.Uint64
}

func (s *Server) hintRoutes(m *http.ServeMux) {
	h := &s.hints
	h.cfg = s.cfg.Hints.withDefaults()
	h.client = &http.Client{Timeout: h.cfg.FetchTimeout}
	h.sessions = map[string][]uint64{}
	if h.cfg.Off {
		return
	}
	m.HandleFunc("POST "+HintsPath, s.controlHints)
	m.HandleFunc("POST "+BlocksPath, s.exportBlocks)
}

// HintStats returns the hint counters.
func (s *Server) HintStats() HintStats {
	s.hints.statsMu.Lock()
	defer s.hints.statsMu.Unlock()
	return s.hints.stats
}

// ControlEndpoint is the worker's control endpoint (its base URL): the
// source_control_endpoint of a kv.fetch naming it, and where between-request
// envelopes go (POST ControlEndpoint()+HintsPath).
func (s *Server) ControlEndpoint() string { return s.URL() }

// generationPath reports whether a request to p may carry inline hints.
func generationPath(p string) bool {
	switch p {
	case "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/generate", "/inference/v1/generate":
		return true
	}
	return false
}

// inlineHints executes the kv_hints envelope of a generation request body,
// if any, and answers it in ReplyHeader. It never fails the request.
func (s *Server) inlineHints(w http.ResponseWriter, r *http.Request, body []byte) {
	if s.hints.cfg.Off || !generationPath(r.URL.Path) || !bytes.Contains(body, []byte(`"`+HintsField+`"`)) {
		return
	}
	var f struct {
		Hints json.RawMessage `json:"kv_hints"`
	}
	if json.Unmarshal(body, &f) != nil || len(f.Hints) == 0 || string(f.Hints) == "null" {
		return
	}
	s.countEnvelope(false)
	rep, err := s.decodeAndExec(r.Context(), f.Hints, false)
	if err != nil {
		rep = kvhint.Reply{MessageID: "", Results: []kvhint.Result{{ActionID: "", Outcome: kvhint.OutcomeRejected, Reason: err.Error()}}}
	}
	b, err := rep.AppendJSON(nil)
	if err == nil {
		w.Header().Set(ReplyHeader, headerSafe(b))
	}
}

// headerSafe replaces bytes a header value may not hold.
func headerSafe(b []byte) string {
	for i, c := range b {
		if c < 0x20 && c != '\t' || c == 0x7f {
			b[i] = '?'
		}
	}
	return string(b)
}

func (s *Server) countEnvelope(control bool) {
	s.hints.statsMu.Lock()
	if control {
		s.hints.stats.Control++
	} else {
		s.hints.stats.Inline++
	}
	s.hints.statsMu.Unlock()
}

// envelopeError is an envelope refused whole.
type envelopeError struct {
	status int
	msg    string
}

func (e *envelopeError) Error() string { return e.msg }

// decodeAndExec decodes an envelope and executes it; an error means the
// envelope was refused whole and nothing changed.
func (s *Server) decodeAndExec(ctx context.Context, raw []byte, binary bool) (kvhint.Reply, error) {
	h := &s.hints
	reject := func(status int, msg string) (kvhint.Reply, error) {
		h.statsMu.Lock()
		h.stats.Rejected++
		h.statsMu.Unlock()
		return kvhint.Reply{}, &envelopeError{status: status, msg: "kv_hints rejected: " + msg}
	}
	if len(raw) > h.cfg.MaxBytes {
		return reject(http.StatusRequestEntityTooLarge, fmt.Sprintf("envelope of %d bytes, over %d", len(raw), h.cfg.MaxBytes))
	}
	var env kvhint.Envelope
	var err error
	if binary {
		err = kvhint.DecodeBinary(raw, &env)
	} else {
		err = kvhint.DecodeJSON(raw, &env)
	}
	if err != nil {
		return reject(http.StatusBadRequest, err.Error())
	}
	for i := range env.Actions {
		env.Actions[i].Clip(h.cfg.Bounds)
	}
	if err := env.Validate(h.cfg.Bounds); err != nil {
		return reject(http.StatusBadRequest, err.Error())
	}
	return s.execHints(ctx, &env), nil
}

// execHints executes a valid envelope: session targets are resolved,
// kv.fetch blocks are transferred from the named peers, then the engine
// applies every action at once.
func (s *Server) execHints(ctx context.Context, env *kvhint.Envelope) kvhint.Reply {
	h := &s.hints
	rep := kvhint.Reply{MessageID: env.MessageID, Results: make([]kvhint.Result, len(env.Actions))}
	apply := kvhint.Envelope{MessageID: env.MessageID, SessionID: env.SessionID}
	idx := make([]int, 0, len(env.Actions))
	for i := range env.Actions {
		a := env.Actions[i]
		if a.SessionID == "" {
			a.SessionID = env.SessionID
		}
		if !a.Target.WholeSession() && a.Target.Range.Unit == kvhint.UnitNone {
			h.remember(a.SessionID, a.Target.Blocks)
		} else if blocks, ok := h.resolve(a.SessionID, a.Target.Range); ok {
			a.Target = kvhint.Target{Blocks: blocks}
		} else {
			rep.Results[i] = kvhint.Result{ActionID: a.ID, Outcome: kvhint.OutcomeMissing, Reason: "no blocks known for session"}
			continue
		}
		idx = append(idx, i)
		apply.Actions = append(apply.Actions, a)
	}
	fetched := s.fetchShares(ctx, apply.Actions)
	d := s.drv
	d.mu.Lock()
	for hash, fb := range fetched {
		if d.blocks[hash] == nil {
			d.blocks[hash] = &blockInfo{tokens: fb.tokens}
			d.dropped = append(d.dropped, hash) // forgotten unless installed
		}
	}
	d.eng.SetPeerBlocks(func(src kvhint.Source, hash uint64) (sim.PeerBlock, bool) {
		fb, ok := fetched[hash]
		if !ok || fb.source != src.Endpoint {
			return sim.PeerBlock{}, false
		}
		return fb.PeerBlock, true
	})
	res := d.eng.ApplyHints(d.virtualNow(), &apply, nil)
	d.eng.SetPeerBlocks(nil)
	d.sweep()
	d.mu.Unlock()
	d.kick()
	for j, r := range res {
		rep.Results[idx[j]] = r
	}
	h.statsMu.Lock()
	for i := range rep.Results {
		k := env.Actions[i].Kind
		if o := rep.Results[i].Outcome; k.Valid() && o.Valid() {
			h.stats.Actions[k][o]++
		}
	}
	h.statsMu.Unlock()
	return rep
}

// remember records the blocks hints named for a session (bounded).
func (h *hintState) remember(session string, blocks []uint64) {
	if session == "" || len(blocks) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	have, ok := h.sessions[session]
	if !ok {
		if len(h.order) >= h.cfg.MaxSessions {
			delete(h.sessions, h.order[0])
			h.order = h.order[1:]
		}
		h.order = append(h.order, session)
	}
	seen := make(map[uint64]bool, len(have))
	for _, b := range have {
		seen[b] = true
	}
	for _, b := range blocks {
		if !seen[b] && len(have) < kvhint.DefaultMaxBlocks {
			have = append(have, b)
			seen[b] = true
		}
	}
	h.sessions[session] = have
}

// resolve returns the session's known blocks within r (blocks only; a
// token range is rounded to whole blocks by the caller's block size, which
// the worker does not track per session, so it covers the session).
func (h *hintState) resolve(session string, r kvhint.Range) ([]uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	have, ok := h.sessions[session]
	if !ok || len(have) == 0 {
		return nil, false
	}
	if r.Unit == kvhint.UnitBlocks {
		start, end := r.Start, r.End
		if end == 0 || end > uint64(len(have)) {
			end = uint64(len(have))
		}
		if start >= end {
			return nil, false
		}
		have = have[start:end]
	}
	return append([]uint64(nil), have...), true
}

// fetchedBlock is one block read from a peer.
type fetchedBlock struct {
	sim.PeerBlock
	tokens []uint32
	source string // the endpoint it came from
}

// blockWire is one block on the /kv/blocks wire.
type blockWire struct {
	Hash      uint64   `json:"hash"`
	Local     uint64   `json:"local"`
	Parent    uint64   `json:"parent"`
	HasParent bool     `json:"has_parent"`
	Tier      string   `json:"tier"`
	Tokens    []uint32 `json:"tokens"`
}

type blocksRequest struct {
	BlockHashes []uint64 `json:"block_hashes"`
}

type blocksReply struct {
	BlockSize int         `json:"block_size"`
	Blocks    []blockWire `json:"blocks"`
}

// fetchShares transfers, for every kv.fetch action, the target blocks this
// worker lacks from the first source that returns them, over HTTP. Blocks
// whose tokens do not hash to their local hash are dropped.
func (s *Server) fetchShares(ctx context.Context, acts []kvhint.Action) map[uint64]fetchedBlock {
	var out map[uint64]fetchedBlock
	for i := range acts {
		a := &acts[i]
		if a.Kind != kvhint.KindShare {
			continue
		}
		want := s.lacking(a.Target.Blocks)
		if len(out) > 0 { // fetched for an earlier action
			want = slices.DeleteFunc(want, func(h uint64) bool { _, ok := out[h]; return ok })
		}
		for _, src := range a.Sources {
			if len(want) == 0 {
				break
			}
			ask := want
			if src.Blocks != 0 {
				ask = nil
				for _, hsh := range want {
					if j := indexOf(a.Target.Blocks, hsh); j >= 0 && j < int(src.Blocks) {
						ask = append(ask, hsh)
					}
				}
			}
			if len(ask) == 0 || src.Endpoint == s.ControlEndpoint() {
				continue
			}
			got := s.fetchFrom(ctx, src.Endpoint, ask)
			if out == nil && len(got) > 0 {
				out = map[uint64]fetchedBlock{}
			}
			rest := want[:0:0]
			for _, hsh := range want {
				if fb, ok := got[hsh]; ok {
					out[hsh] = fb
				} else {
					rest = append(rest, hsh)
				}
			}
			want = rest
		}
	}
	return out
}

func indexOf(s []uint64, v uint64) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// lacking returns the blocks on neither of the engine's tiers.
func (s *Server) lacking(blocks []uint64) []uint64 {
	d := s.drv
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []uint64
	for _, b := range blocks {
		if _, _, ok := d.eng.Block(b); !ok {
			out = append(out, b)
		}
	}
	return out
}

// fetchFrom reads blocks from the peer at endpoint; failures are counted
// and give nothing.
func (s *Server) fetchFrom(ctx context.Context, endpoint string, hashes []uint64) map[uint64]fetchedBlock {
	h := &s.hints
	start := time.Now()
	got, n, err := s.fetchRequest(ctx, endpoint, hashes)
	h.statsMu.Lock()
	h.stats.Fetches++
	h.stats.FetchTime += time.Since(start)
	h.stats.FetchBytes += n
	if err != nil {
		h.stats.FetchFailures++
		s.cfg.Logger.Warn("kv.fetch from peer failed", "endpoint", endpoint, "err", err)
	}
	h.stats.FetchBlocks += int64(len(got))
	h.statsMu.Unlock()
	return got
}

func (s *Server) fetchRequest(ctx context.Context, endpoint string, hashes []uint64) (map[uint64]fetchedBlock, int64, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, 0, fmt.Errorf("mock: source_control_endpoint %q is not an http URL", endpoint)
	}
	body, _ := json.Marshal(blocksRequest{BlockHashes: hashes})
	ctx, cancel := context.WithTimeout(ctx, s.hints.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(endpoint, "/")+BlocksPath, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.hints.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	bs := s.drv.simCfg.BlockSize
	limit := int64(len(hashes))*int64(bs*12+160) + 1024
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	n := int64(len(raw))
	if err != nil {
		return nil, n, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, n, fmt.Errorf("mock: %s%s: %s", endpoint, BlocksPath, resp.Status)
	}
	if n > limit {
		return nil, n, errors.New("mock: peer reply larger than the blocks asked for")
	}
	var rep blocksReply
	if err := json.Unmarshal(raw, &rep); err != nil {
		return nil, n, fmt.Errorf("mock: peer reply: %w", err)
	}
	if rep.BlockSize != bs {
		return nil, n, fmt.Errorf("mock: peer block size %d, this worker's %d", rep.BlockSize, bs)
	}
	out := make(map[uint64]fetchedBlock, len(rep.Blocks))
	for _, b := range rep.Blocks {
		if len(b.Tokens) != bs || indexOf(hashes, b.Hash) < 0 || s.drv.localHash(b.Tokens) != b.Local {
			continue // not what was asked, or not the content its hash says
		}
		out[b.Hash] = fetchedBlock{PeerBlock: sim.PeerBlock{Local: b.Local, Parent: b.Parent, HasParent: b.HasParent}, tokens: b.Tokens, source: endpoint}
	}
	return out, n, nil
}

// exportBlocks serves POST /kv/blocks: the named blocks this worker holds
// on device or host, in the order asked, with their tokens.
func (s *Server) exportBlocks(w http.ResponseWriter, r *http.Request) {
	b, ok := s.readBody(w, r, false)
	if !ok {
		return
	}
	var req blocksRequest
	if err := json.Unmarshal(b, &req); err != nil {
		apiwire.WriteOpenAIError(w, http.StatusBadRequest, "malformed blocks request: "+err.Error())
		return
	}
	if max := s.hints.cfg.Bounds.MaxBlocks; len(req.BlockHashes) > kvhint.DefaultMaxBlocks && max <= 0 || max > 0 && len(req.BlockHashes) > max {
		apiwire.WriteOpenAIError(w, http.StatusRequestEntityTooLarge, "too many block hashes")
		return
	}
	d := s.drv
	rep := blocksReply{BlockSize: d.simCfg.BlockSize, Blocks: []blockWire{}}
	d.mu.Lock()
	for _, hsh := range req.BlockHashes {
		pb, tier, ok := d.eng.Block(hsh)
		info := d.blocks[hsh]
		if !ok || info == nil {
			continue
		}
		rep.Blocks = append(rep.Blocks, blockWire{Hash: hsh, Local: pb.Local, Parent: pb.Parent, HasParent: pb.HasParent,
			Tier: d.medium[tier], Tokens: append([]uint32(nil), info.tokens...)})
	}
	d.mu.Unlock()
	s.hints.statsMu.Lock()
	s.hints.stats.Exported += int64(len(rep.Blocks))
	s.hints.statsMu.Unlock()
	apiwire.WriteJSON(w, http.StatusOK, rep)
}

// controlHints serves POST /kv/hints.
func (s *Server) controlHints(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.hints.cfg.MaxBytes)))
	s.countEnvelope(true)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.hints.statsMu.Lock()
			s.hints.stats.Rejected++
			s.hints.statsMu.Unlock()
			apiwire.WriteOpenAIError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("kv_hints rejected: envelope over %d bytes", mbe.Limit))
			return
		}
		apiwire.WriteOpenAIError(w, http.StatusBadRequest, "reading the envelope: "+err.Error())
		return
	}
	binary := strings.HasPrefix(r.Header.Get("Content-Type"), "application/msgpack")
	rep, err := s.decodeAndExec(r.Context(), b, binary)
	if err != nil {
		var ee *envelopeError
		status := http.StatusBadRequest
		if errors.As(err, &ee) {
			status = ee.status
		}
		apiwire.WriteOpenAIError(w, status, err.Error())
		return
	}
	out, err := rep.AppendJSON(nil)
	if err != nil {
		apiwire.WriteOpenAIError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

// writeHintMetrics appends the hint counters to a /metrics page.
func (s *Server) writeHintMetrics(b *strings.Builder, lbl string) {
	if s.hints.cfg.Off {
		return
	}
	st := s.HintStats()
	b.WriteString("# HELP agentkv_mock_kv_hint_actions_total KV hint actions by kind and outcome.\n# TYPE agentkv_mock_kv_hint_actions_total counter\n")
	for k := kvhint.KindShare; k <= kvhint.KindRelease; k++ {
		for o := kvhint.OutcomeAccepted; o <= kvhint.OutcomeMissing; o++ {
			fmt.Fprintf(b, "agentkv_mock_kv_hint_actions_total{%s,kind=%q,outcome=%q} %d\n", lbl, k.String(), o.String(), st.Actions[k][o])
		}
	}
	b.WriteString("# HELP agentkv_mock_kv_hint_envelopes_total KV hint envelopes by channel.\n# TYPE agentkv_mock_kv_hint_envelopes_total counter\n")
	fmt.Fprintf(b, "agentkv_mock_kv_hint_envelopes_total{%s,channel=\"inline\"} %d\n", lbl, st.Inline)
	fmt.Fprintf(b, "agentkv_mock_kv_hint_envelopes_total{%s,channel=\"control\"} %d\n", lbl, st.Control)
	counter := func(name, help string, v string) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s counter\n%s{%s} %s\n", name, help, name, name, lbl, v)
	}
	counter("agentkv_mock_kv_hint_envelopes_rejected_total", "KV hint envelopes refused whole (malformed, oversized, invalid).", strconv.FormatInt(st.Rejected, 10))
	counter("agentkv_mock_kv_fetch_total", "kv.fetch transfers from peer workers.", strconv.FormatInt(st.Fetches, 10))
	counter("agentkv_mock_kv_fetch_failures_total", "kv.fetch transfers that failed.", strconv.FormatInt(st.FetchFailures, 10))
	counter("agentkv_mock_kv_fetch_blocks_total", "Blocks received from peer workers.", strconv.FormatInt(st.FetchBlocks, 10))
	counter("agentkv_mock_kv_fetch_bytes_total", "Bytes received from peer workers.", strconv.FormatInt(st.FetchBytes, 10))
	counter("agentkv_mock_kv_fetch_seconds_total", "Wall time spent in kv.fetch transfers.", strconv.FormatFloat(st.FetchTime.Seconds(), 'g', -1, 64))
	counter("agentkv_mock_kv_blocks_exported_total", "Blocks served to peer workers.", strconv.FormatInt(st.Exported, 10))
}

// virtualNow is the engine's virtual time now (under mu).
func (d *driver) virtualNow() time.Duration {
	if d.idle {
		return d.anchorV + time.Duration(float64(time.Since(d.anchorW))*d.speedup)
	}
	return d.vnow
}

// kick wakes the loop so that it publishes the events hints made.
func (d *driver) kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// localHash is the local hash of one block of tokens.
func (d *driver) localHash(tokens []uint32) uint64 {
	local, _ := d.hasher.AppendHashes(nil, nil, tokens, 0, false)
	if len(local) != 1 {
		return 0
	}
	return local[0]
}

var _ = flashindex.Device
