package kvhint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the delivery side a proxy needs: the built-in policies by
// name, the request-body field an engine reads (vLLM's and SGLang's
// "kv_hints"), a mailbox that holds a worker's route-time hints until its
// request is forwarded, a sink that splits hints between that mailbox and
// a control channel, and an HTTP control sink.

// Names of the built-in policies, as flags spell them.
const (
	PolicyShare   = "share"   // PeerShare
	PolicyTail    = "tail"    // TailOffload
	PolicyPin     = "pin"     // PrefixPin
	PolicyRelease = "release" // FinishRelease
)

// NamedPolicies returns the built-in policies named in spec, a comma
// separated list of share, tail, pin and release ("all" is the four, ""
// and "off" none), in a fixed order (tail, pin, share, release, as the
// simulated study runs them). The configurations are the study's: tail
// demotes after 30s acting; pin pins the prefix 4 live sessions share for
// 5 minutes; share names the two best peers when one holds at least 16
// more blocks (device or host); release frees what only a finished session
// used.
func NamedPolicies(spec string) ([]Policy, error) {
	want := map[string]bool{}
	for _, f := range strings.Split(spec, ",") {
		switch f = strings.TrimSpace(f); f {
		case "", "off", "none":
		case "all":
			want[PolicyTail], want[PolicyPin], want[PolicyShare], want[PolicyRelease] = true, true, true, true
		case PolicyShare, PolicyTail, PolicyPin, PolicyRelease:
			want[f] = true
		default:
			return nil, configErr("unknown hint policy %q (want share, tail, pin, release, all or off)", f)
		}
	}
	var out []Policy
	if want[PolicyTail] {
		p, err := NewTailOffload(TailOffloadConfig{After: 30 * time.Second})
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if want[PolicyPin] {
		p, err := NewPrefixPin(PrefixPinConfig{MinSessions: 4, TTL: 5 * time.Minute})
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if want[PolicyShare] {
		p, err := NewPeerShare(PeerShareConfig{MinGain: 16, MaxSources: 2, SourceHost: true})
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if want[PolicyRelease] {
		p, err := NewFinishRelease(FinishReleaseConfig{})
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// BodyField is the request body field vLLM (PR #53423, carried through
// EngineCoreRequest.kv_hints) and SGLang read the envelope from.
const BodyField = "kv_hints"

// AppendToBody appends to dst the JSON object body with env added as its
// last field, "kv_hints": body's bytes are kept as they are up to its
// closing brace. body must be a JSON object (leading and trailing space
// allowed); anything else is a *DecodeError and dst is returned unchanged.
// A body that already has a kv_hints field gets a second one, which JSON
// readers resolve to the last: the router's.
func AppendToBody(dst, body []byte, env *Envelope) ([]byte, error) {
	end, empty, err := bodyBounds(body)
	if err != nil {
		return dst, err
	}
	n := len(dst)
	dst = append(dst, body[:end-1]...)
	if dst, err = appendHintsField(dst, body, end, empty, env, nil, nil); err != nil {
		return dst[:n], err
	}
	return dst, nil
}

// AppendBodyTail is AppendToBody without the copy of body: the body with
// env added is body[:head] followed by tail, tail being dst with the rest
// appended (the kv_hints field, the closing brace and body's trailing
// space). A proxy forwards the two parts as they are (an io.MultiReader),
// so a long prompt is never copied to add hints to it. Errors are
// AppendToBody's; dst is then returned unchanged.
func AppendBodyTail(dst, body []byte, env *Envelope) (head int, tail []byte, err error) {
	return appendBodyTailSplice(dst, body, env, nil, nil)
}

// appendBodyTailSplice is AppendBodyTail with block-hash lists from c,
// spliced in (sp) or copied.
func appendBodyTailSplice(dst, body []byte, env *Envelope, c *HashText, sp *splices) (head int, tail []byte, err error) {
	end, empty, err := bodyBounds(body)
	if err != nil {
		return 0, dst, err
	}
	n := len(dst)
	if dst == nil {
		dst = make([]byte, 0, env.jsonSizeHint()+len(body)-end+32)
	}
	if tail, err = appendHintsField(dst, body, end, empty, env, c, sp); err != nil {
		return 0, tail[:n], err
	}
	return end - 1, tail, nil
}

// jsonSizeHint is about the size of e's JSON encoding: block hashes at
// their longest, a little for everything else.
func (e *Envelope) jsonSizeHint() int {
	n := 128 + len(e.MessageID) + len(e.SessionID)
	for i := range e.Actions {
		a := &e.Actions[i]
		n += 320 + len(a.ID) + len(a.SessionID) + 21*len(a.Target.Blocks)
		for j := range a.Sources {
			n += 160 + len(a.Sources[j].Endpoint)
		}
	}
	return n
}

// bodyBounds checks that body is a JSON object and returns the index after
// its closing brace and whether the object is empty.
func bodyBounds(body []byte) (end int, empty bool, err error) {
	end = len(body)
	for end > 0 && isSpace(body[end-1]) {
		end--
	}
	start := 0
	for start < end && isSpace(body[start]) {
		start++
	}
	if end-start < 2 || body[start] != '{' || body[end-1] != '}' {
		return 0, false, jsonErr("request body is not a JSON object")
	}
	empty = true
	for i := end - 2; i > start; i-- {
		if !isSpace(body[i]) {
			empty = false
			break
		}
	}
	return end, empty, nil
}

// appendHintsField appends what follows body[:end-1] in the body with
// hints: the kv_hints field, the closing brace and body's trailing space.
func appendHintsField(dst, body []byte, end int, empty bool, env *Envelope, c *HashText, sp *splices) ([]byte, error) {
	if !empty {
		dst = append(dst, ',')
	}
	dst = append(dst, `"`+BodyField+`":`...)
	dst, err := env.appendJSON(dst, c, sp)
	if err != nil {
		return dst, err
	}
	dst = append(dst, '}')
	return append(dst, body[end:]...), nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// BetweenRequests reports whether actions of kind k belong between
// requests (a control channel) rather than on the next request: demote
// (a long tool gap) and release (session end). Share, prefetch, pin and
// retain are route-time hints that ride the request they were made for.
func BetweenRequests(k Kind) bool { return k == KindDemote || k == KindRelease }

// Split is a Sink that sends route-time actions to Inline and
// between-request actions (BetweenRequests) to Control, splitting an
// envelope when it holds both (the halves keep its message id; the second
// gets a "/c" suffix). A nil side drops its actions (counted in Dropped).
// Split never blocks when both sides do not (a Mailbox and a Queue).
type Split struct {
	Inline, Control Sink
	dropped         atomic.Uint64
}

// Dropped counts actions dropped for want of a sink.
func (s *Split) Dropped() uint64 { return s.dropped.Load() }

// Send implements Sink.
func (s *Split) Send(ctx context.Context, env *Envelope) error {
	between := 0
	for i := range env.Actions {
		if BetweenRequests(env.Actions[i].Kind) {
			between++
		}
	}
	var in, ctl *Envelope
	switch between {
	case 0:
		in = env
	case len(env.Actions):
		ctl = env
	default:
		a, b := *env, *env
		a.Actions, b.Actions = nil, nil
		b.MessageID += "/c"
		for i := range env.Actions {
			if BetweenRequests(env.Actions[i].Kind) {
				b.Actions = append(b.Actions, env.Actions[i])
			} else {
				a.Actions = append(a.Actions, env.Actions[i])
			}
		}
		in, ctl = &a, &b
	}
	var err error
	if in != nil {
		err = s.send(ctx, s.Inline, in)
	}
	if ctl != nil {
		if e := s.send(ctx, s.Control, ctl); err == nil {
			err = e
		}
	}
	return err
}

func (s *Split) send(ctx context.Context, sink Sink, env *Envelope) error {
	if sink == nil {
		s.dropped.Add(uint64(len(env.Actions)))
		return nil
	}
	return sink.Send(ctx, env)
}

// Mailbox holds envelopes for one worker until its next request takes them
// (Take): the inline channel. It holds at most Capacity actions; a Send
// beyond that drops the oldest envelopes (newer hints supersede older
// ones), counted. A Mailbox is safe for concurrent use and never blocks.
type Mailbox struct {
	capacity int

	mu      sync.Mutex // guards envs, actions
	envs    []*Envelope
	actions int

	dropped atomic.Uint64
}

// NewMailbox returns a mailbox for capacity actions (0 means
// DefaultMaxActions).
func NewMailbox(capacity int) *Mailbox {
	if capacity <= 0 {
		capacity = DefaultMaxActions
	}
	return &Mailbox{capacity: capacity}
}

// Send implements Sink: it keeps env (the Mailbox owns it) and never fails.
func (m *Mailbox) Send(_ context.Context, env *Envelope) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.envs = append(m.envs, env)
	m.actions += len(env.Actions)
	for m.actions > m.capacity && len(m.envs) > 1 {
		m.actions -= len(m.envs[0].Actions)
		m.dropped.Add(uint64(len(m.envs[0].Actions)))
		m.envs[0] = nil
		m.envs = m.envs[1:]
	}
	return nil
}

// Take removes the waiting envelopes and returns them merged into one (the
// first one's message and session ids; the session id is cleared when they
// differ, each action keeping its own), or nil when none waits.
func (m *Mailbox) Take() *Envelope {
	m.mu.Lock()
	envs := m.envs
	if len(envs) <= 1 { // the usual case: the list is kept for the next Send
		var env *Envelope
		if len(envs) == 1 {
			env, envs[0] = envs[0], nil
		}
		m.envs, m.actions = envs[:0], 0
		m.mu.Unlock()
		return env
	}
	m.envs, m.actions = nil, 0
	m.mu.Unlock()
	out := *envs[0]
	out.Actions = nil
	for _, e := range envs {
		for _, a := range e.Actions {
			if a.SessionID == "" {
				a.SessionID = e.SessionID
			}
			out.Actions = append(out.Actions, a)
		}
		if e.SessionID != out.SessionID {
			out.SessionID = ""
		}
	}
	return &out
}

// Dropped counts actions dropped because the mailbox was full.
func (m *Mailbox) Dropped() uint64 { return m.dropped.Load() }

// HTTPSink posts each envelope as JSON to URL (a worker's control
// endpoint, e.g. a mock worker's base URL + "/kv/hints") and decodes the
// kvhint Reply. Wrap it in a Queue: Send blocks for the round trip.
type HTTPSink struct {
	URL    string
	Client *http.Client // nil means http.DefaultClient
	// SignedHashes writes block hashes as SGLang names them.
	SignedHashes bool
	// OnReply, if set, receives each decoded reply (from the Queue's
	// goroutine).
	OnReply func(*Reply)
}

// Send implements Sink. A non-2xx status or an undecodable reply is an
// error.
func (h *HTTPSink) Send(ctx context.Context, env *Envelope) error {
	if h.SignedHashes {
		e := *env
		e.SignedHashes = true
		env = &e
	}
	body, err := env.AppendJSON(nil)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("kvhint: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	c := h.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("kvhint: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("kvhint: reading reply: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("kvhint: %s: %s: %s", h.URL, resp.Status, bytes.TrimSpace(raw))
	}
	var rep Reply
	if err := DecodeReplyJSON(raw, &rep); err != nil {
		return err
	}
	if h.OnReply != nil {
		h.OnReply(&rep)
	}
	return nil
}
