package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/gateway/failover"
)

// This file holds the gateway's side of outlier ejection and deadlines
// (package failover holds the rules): the first-byte deadline of each
// attempt, what an attempt teaches the tracker about its worker's speed,
// the Stack's answer to an ejection, and what /readyz says of ejected
// workers.

// send starts the tracker's attempt of c on wk (see failover.Tracker.Send):
// its first-byte deadline allows for the prompt's size, the work queued
// on the worker and, for a whole reply, its output budget (max_tokens, or
// the context left after the prompt); cancel is called with
// failover.ErrEjected if the worker is ejected for timeouts first.
func (g *Gateway) send(c *call, wk *worker, d *agentkv.Decision, cancel func(error)) *failover.Attempt {
	cached := d.Cached.Device + d.Cached.Host + d.Cached.Disk
	r := failover.Request{Prompt: len(c.tokens), Uncached: max(len(c.tokens)-cached, 0), Stream: c.stream}
	if !c.stream {
		r.MaxTokens = maxTokens(c)
	}
	return g.tracker.Send(wk.ID, r, cancel)
}

// firstByteDeadline is how long attempt at may wait for its first byte (0:
// no bound): the tracker's deadline, capped by FirstByteTimeout for a
// stream. With FirstByteTimeout disabled there is none.
func (g *Gateway) firstByteDeadline(c *call, at *failover.Attempt) time.Duration {
	switch {
	case g.cfg.FirstByteTimeout <= 0:
		return 0
	case c.stream:
		return min(g.cfg.FirstByteTimeout, at.Deadline())
	}
	return at.Deadline()
}

// maxTokens is the most tokens a whole reply of c may generate as the
// request says (0: it does not say).
func maxTokens(c *call) int {
	if c.chat != nil {
		return max(c.chat.MaxOutputTokens(), 0)
	}
	var m struct {
		MaxTokens           *int `json:"max_tokens"`
		MaxCompletionTokens *int `json:"max_completion_tokens"`
	}
	if json.Unmarshal(c.chatB, &m) == nil {
		switch {
		case m.MaxCompletionTokens != nil && *m.MaxCompletionTokens > 0:
			return *m.MaxCompletionTokens
		case m.MaxTokens != nil && *m.MaxTokens > 0:
			return *m.MaxTokens
		}
	}
	return 0
}

// decoded tells the tracker how fast a stream that finished generated.
func decoded(at *failover.Attempt, res *AttemptResult) {
	if res.Outcome == OK && res.Usage.CompletionTokens >= 2 {
		at.Decoded(res.Usage.CompletionTokens - 1)
	}
}

// onEject follows outlier ejections as onHealth follows the probes: an
// ejected worker leaves the router (its capacity leaves admission, its
// paused programs resume elsewhere, its sessions move to the cheapest
// worker with their prefix credited where the index shows it), and comes
// back when its ejection ends (on trial: its breaker half-open), unless
// the probes found it down meanwhile (then it returns when they find it
// up).
func (s *Stack) onEject(id uint64, ejected bool, reason string) {
	w := s.worker(id)
	if w == nil || !w.connected() {
		return
	}
	if ejected {
		s.log.Warn("gateway: worker ejected: its sessions and programs move", "worker", w.spec.URL, "reason", reason)
		s.router.RemoveWorker(id)
		return
	}
	for _, st := range s.gw.tracker.Status() {
		if st.ID == id && st.Health == failover.Down {
			return
		}
	}
	if err := s.rejoin(w); err != nil {
		s.log.Warn("gateway: returning worker refused", "worker", w.spec.URL, "err", err)
	}
}

// ejections describes the ejected workers for /readyz ("" when none).
func (g *Gateway) ejections() string {
	var b strings.Builder
	for _, st := range g.tracker.Status() {
		if !st.Ejected {
			continue
		}
		fmt.Fprintf(&b, "worker %d %s: ejected (%s) until %s", st.ID, st.URL, st.EjectReason,
			st.EjectedUntil.UTC().Format(time.RFC3339Nano))
		if st.LastError != "" {
			b.WriteString(", last error: " + st.LastError)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
