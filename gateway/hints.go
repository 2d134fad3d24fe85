package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentkv/agentkv/kvhint"
)

// KV hints (package kvhint) reach the engines from here. The router
// evaluates its hint policies (agentkv.Config.Hints) after it selects a
// worker, as Dynamo's KvHintPolicy does, and hands each worker's envelope
// to that worker's HintChannel:
//
//   - route-time hints (share, prefetch, pin, retain) wait in the channel's
//     mailbox and ride the worker's next forwarded request, in the body
//     field vLLM (PR #53423) and SGLang read, "kv_hints";
//   - between-request hints (demote for a long tool gap, release at
//     session end) go to the worker's control endpoint
//     (URL + ControlPath) through a bounded queue: never blocking a
//     request, drops counted.
//
// A worker whose mode is HintsOff (the default) gets nothing: its traffic
// is byte for byte what it would be without hints.

// HintMode is how a worker takes KV hints ("hints=" in a worker spec).
type HintMode uint8

const (
	// HintsOff: the worker takes no hints (the zero value).
	HintsOff HintMode = iota
	// HintsInline: route-time hints in the request body, between-request
	// hints on the control endpoint.
	HintsInline
	// HintsControl: every hint on the control endpoint, between requests
	// (for an engine that reads no body field).
	HintsControl
)

func (m HintMode) String() string {
	switch m {
	case HintsOff:
		return "off"
	case HintsInline:
		return "inline"
	case HintsControl:
		return "control"
	}
	return fmt.Sprintf("hintmode(%d)", uint8(m))
}

// ParseHintMode parses "inline", "control" or "off".
func ParseHintMode(s string) (HintMode, error) {
	switch strings.TrimSpace(s) {
	case "off", "":
		return HintsOff, nil
	case "inline":
		return HintsInline, nil
	case "control":
		return HintsControl, nil
	}
	return HintsOff, fmt.Errorf("%w: hints=%q (want inline, control or off)", ErrConfig, s)
}

// ControlPath is where a worker's control endpoint takes envelopes (the
// mock worker's POST /kv/hints).
const ControlPath = "/kv/hints"

// Defaults of HintChannel.
const (
	DefaultHintQueue   = 256             // envelopes waiting for the control endpoint
	DefaultHintTimeout = 2 * time.Second // one control call
	DefaultHintMailbox = 4 * 64          // actions waiting for a request
	hintCloseWait      = 2 * time.Second // Close's drain of the control queue
)

// HintStats are one worker's hint counters.
type HintStats struct {
	// Attached counts envelopes and actions added to forwarded requests.
	AttachedEnvelopes, AttachedActions uint64
	// MailboxDropped counts route-time actions dropped before a request
	// took them (the mailbox holds DefaultHintMailbox actions).
	MailboxDropped uint64
	// SplitDropped counts actions with no channel (control hints for a
	// worker without a control endpoint).
	SplitDropped uint64
	// Control is the control queue's counters (zero without one).
	Control kvhint.QueueStats
	// Replies tallies the outcomes the control endpoint answered.
	Replies kvhint.Counts
	// Unnamed counts actions for an SGLang worker dropped because no
	// worker's events had named their blocks (sglang.go).
	Unnamed uint64
}

// HintChannel delivers one worker's hints. It is the worker's
// kvhint.Sink (Sink), never blocks, and is safe for concurrent use.
type HintChannel struct {
	mode  HintMode
	box   *kvhint.Mailbox // inline; nil in control mode
	queue *kvhint.Queue   // control
	split *kvhint.Split
	sink  kvhint.Sink
	names *sglangHints // SGLang workers: the sink's block-name rewriting
	// text caches the JSON of the block lists the hints name, per session
	// (shared by a Stack's channels).
	text *kvhint.HashText

	envelopes, actions atomic.Uint64
	replies            [6]atomic.Uint64 // by kvhint.Outcome; [0] counts blocks
}

// NewHintChannel returns the channel for a worker at baseURL taking hints
// in mode, or nil for HintsOff. client makes the control calls (nil:
// http.DefaultClient).
func NewHintChannel(mode HintMode, baseURL string, client *http.Client) (*HintChannel, error) {
	if mode == HintsOff {
		return nil, nil
	}
	if mode != HintsInline && mode != HintsControl {
		return nil, fmt.Errorf("%w: hint mode %v", ErrConfig, mode)
	}
	h := &HintChannel{mode: mode}
	hs := &kvhint.HTTPSink{URL: strings.TrimRight(baseURL, "/") + ControlPath, Client: client, OnReply: h.countReply}
	q, err := kvhint.NewQueue(hs, kvhint.QueueConfig{Capacity: DefaultHintQueue, Timeout: DefaultHintTimeout, DropOldest: true})
	if err != nil {
		return nil, err
	}
	h.queue = q
	if mode == HintsControl {
		h.sink = q
		return h, nil
	}
	h.box = kvhint.NewMailbox(DefaultHintMailbox)
	h.text = kvhint.NewHashText(0)
	h.split = &kvhint.Split{Inline: h.box, Control: q}
	h.sink = h.split
	return h, nil
}

func (h *HintChannel) countReply(r *kvhint.Reply) {
	for i := range r.Results {
		if o := r.Results[i].Outcome; o.Valid() {
			h.replies[o].Add(1)
			h.replies[0].Add(uint64(r.Results[i].Blocks))
		}
	}
}

// Mode is the channel's mode.
func (h *HintChannel) Mode() HintMode { return h.mode }

// Sink is what the router sends this worker's envelopes to.
func (h *HintChannel) Sink() kvhint.Sink { return h.sink }

// Body returns body with the waiting route-time hints added as its
// kv_hints field, or body itself when none wait (or in control mode, or
// for a nil channel): then not a byte changes. It copies body; the relay
// forwards a HintPayload instead, which does not.
func (h *HintChannel) Body(body []byte) []byte {
	p := h.Payload(body)
	defer p.Release()
	return p.Bytes()
}

// HintPayload is a forwarded request body: Head, then the parts of Tail
// (the kv_hints field and what follows the body's closing brace; nil when
// no hints ride the request, and Head is the body unchanged). The bytes
// are never copied to join them, and the block-hash lists in Tail are
// shared with the channel's kvhint.HashText, read-only. Tail's buffer is
// pooled: its holder calls Release when done, and the requests NewRequest
// makes hold it until the transport closes their bodies.
type HintPayload struct {
	Head []byte
	Tail [][]byte
	t    *kvhint.Tail
}

// Release drops the holder's hold on the payload's tail; Tail must not be
// read after it (but by the bodies of requests made before it).
func (p HintPayload) Release() {
	if p.t != nil {
		p.t.Release()
	}
}

// Payload takes the waiting route-time hints and returns body with them
// (see Body) as a HintPayload.
func (h *HintChannel) Payload(body []byte) HintPayload {
	if h == nil || h.box == nil {
		return HintPayload{Head: body}
	}
	env := h.box.Take()
	if env == nil {
		return HintPayload{Head: body}
	}
	head, tail, err := h.text.BodyTail(body, env)
	n := len(env.Actions)
	kvhint.Recycle(env) // encoded: nothing reads it after
	if err != nil {
		return HintPayload{Head: body} // not a JSON object: forwarded as it is
	}
	h.envelopes.Add(1)
	h.actions.Add(uint64(n))
	return HintPayload{Head: body[:head:head], Tail: tail.Parts, t: tail}
}

// Len is the payload's length in bytes.
func (p HintPayload) Len() int {
	n := len(p.Head)
	for _, t := range p.Tail {
		n += len(t)
	}
	return n
}

// Bytes returns the payload as one slice (Head itself when there is no
// Tail).
func (p HintPayload) Bytes() []byte {
	if p.Tail == nil {
		return p.Head
	}
	out := make([]byte, 0, p.Len())
	out = append(out, p.Head...)
	for _, t := range p.Tail {
		out = append(out, t...)
	}
	return out
}

// payloadReader reads a HintPayload's parts in turn (one allocation,
// where io.MultiReader over bytes.Readers takes one per part), holding
// its tail until closed.
type payloadReader struct {
	p      HintPayload
	part   int // -1: Head
	off    int
	closed bool
}

func newPayloadReader(p HintPayload) *payloadReader {
	if p.t != nil {
		p.t.Hold()
	}
	return &payloadReader{p: p, part: -1}
}

func (r *payloadReader) Read(b []byte) (int, error) {
	for {
		cur := r.p.Head
		if r.part >= 0 {
			if r.part >= len(r.p.Tail) {
				return 0, io.EOF
			}
			cur = r.p.Tail[r.part]
		}
		if r.off < len(cur) {
			n := copy(b, cur[r.off:])
			r.off += n
			return n, nil
		}
		r.part, r.off = r.part+1, 0
	}
}

// Close drops the reader's hold on the tail (once; the transport closes
// every request body it was given, possibly after RoundTrip returned).
func (r *payloadReader) Close() error {
	if !r.closed {
		r.closed = true
		r.p.Release()
	}
	return nil
}

// NewRequest returns a POST of the payload to url, with the length and
// GetBody (so the transport may resend it on a fresh connection) that
// http.NewRequest sets for a bytes.Reader.
func (p HintPayload) NewRequest(ctx context.Context, url string) (*http.Request, error) {
	if p.Tail == nil {
		return http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(p.Head))
	}
	body := newPayloadReader(p)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		body.Close()
		return nil, err
	}
	req.ContentLength = int64(p.Len())
	req.GetBody = func() (io.ReadCloser, error) { return newPayloadReader(p), nil }
	return req, nil
}

// Stats returns the channel's counters.
func (h *HintChannel) Stats() HintStats {
	if h == nil {
		return HintStats{}
	}
	st := HintStats{AttachedEnvelopes: h.envelopes.Load(), AttachedActions: h.actions.Load(), Control: h.queue.Stats()}
	if h.names != nil {
		st.Unnamed = h.names.dropped.Load()
	}
	if h.box != nil {
		st.MailboxDropped = h.box.Dropped()
		st.SplitDropped = h.split.Dropped()
	}
	st.Replies = kvhint.Counts{Accepted: int(h.replies[kvhint.OutcomeAccepted].Load()), Clipped: int(h.replies[kvhint.OutcomeClipped].Load()),
		Deferred: int(h.replies[kvhint.OutcomeDeferred].Load()), Rejected: int(h.replies[kvhint.OutcomeRejected].Load()),
		Missing: int(h.replies[kvhint.OutcomeMissing].Load()), Blocks: h.replies[0].Load()}
	return st
}

// Close drains the control queue (bounded by ctx) and stops it.
func (h *HintChannel) Close(ctx context.Context) error {
	if h == nil {
		return nil
	}
	return h.queue.Close(ctx)
}

// workerHints returns the hint channel of worker w: nil when the stack
// has no hint policies or the worker takes no hints. An SGLang worker's
// channel names blocks as SGLang does (sglangHints).
func (s *Stack) workerHints(w *stackWorker) *HintChannel {
	spec := w.spec
	if len(s.cfg.Hints) == 0 || spec.Hints == HintsOff {
		return nil
	}
	h, err := NewHintChannel(spec.Hints, spec.URL, s.cfg.HTTPClient)
	if err != nil {
		s.log.Warn("gateway: worker takes no hints", "worker", spec.URL, "err", err)
		return nil
	}
	if h.text != nil {
		h.text = s.hintText
	}
	if spec.Engine == EngineSGLang {
		h.names = &sglangHints{self: &w.names, peer: s.sglangNames, inner: h.sink}
		h.sink = h.names
	}
	return h
}

// closeHints drains the workers' control queues, a bounded wait.
func (s *Stack) closeHints() {
	ctx, cancel := context.WithTimeout(context.Background(), hintCloseWait)
	defer cancel()
	for _, w := range s.list() {
		_ = w.hints.Close(ctx)
	}
}

// HintSink implements agentkv.HintReceiver: nil for a worker that takes no
// hints.
func (w *stackWorker) HintSink() kvhint.Sink {
	if w.hints == nil {
		return nil
	}
	return w.hints.Sink()
}

// hintEndpoint is the worker's control endpoint, named as the source of a
// kv.fetch: its base URL when it takes hints, else "" (not a source).
func (w *stackWorker) hintEndpoint() string {
	if w.hints == nil {
		return ""
	}
	return w.spec.URL
}

// HintStats returns worker id's hint counters (zero when it takes none).
func (s *Stack) HintStats(id uint64) HintStats {
	w := s.worker(id)
	if w == nil {
		return HintStats{}
	}
	return w.hints.Stats()
}
