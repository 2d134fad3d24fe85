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

// firstByteDeadline is how long an attempt of c on wk may wait for its
// first byte (0: no bound): the tracker's deadline scaled by the prompt
// (and, for a whole reply, by its output budget: max_tokens, or
// failover.DefaultOutputBudget), capped by FirstByteTimeout for a stream.
// With FirstByteTimeout disabled there is none.
func (g *Gateway) firstByteDeadline(c *call, wk *worker) time.Duration {
	if g.cfg.FirstByteTimeout <= 0 {
		return 0
	}
	if c.stream {
		return min(g.cfg.FirstByteTimeout, g.tracker.FirstByteDeadline(wk.ID, len(c.tokens), 0))
	}
	return g.tracker.FirstByteDeadline(wk.ID, len(c.tokens), outputBudget(c))
}

// outputBudget is the most tokens a whole reply of c may generate, as the
// request says, or failover.DefaultOutputBudget.
func outputBudget(c *call) int {
	if c.chat != nil {
		if n := c.chat.MaxOutputTokens(); n > 0 {
			return n
		}
		return failover.DefaultOutputBudget
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
	return failover.DefaultOutputBudget
}

// speed follows one streamed attempt for the tracker: its time to first
// token (by the prompt tokens the worker had to prefill) and its time per
// output token after.
type speed struct {
	worker   uint64
	uncached int
	start    time.Time // the request went to the worker
	first    time.Time // its first byte came back (zero: not yet)
}

func newSpeed(c *call, wk *worker, d *agentkv.Decision) *speed {
	if !c.stream {
		return nil // a whole reply's first byte is its last
	}
	cached := d.Cached.Device + d.Cached.Host + d.Cached.Disk
	return &speed{worker: wk.ID, uncached: max(len(c.tokens)-cached, 0), start: time.Now()}
}

// firstByte records the first byte of the worker's stream.
func (s *speed) firstByte(t *failover.Tracker) {
	if s == nil || !s.first.IsZero() {
		return
	}
	s.first = time.Now()
	t.ObserveFirstToken(s.worker, s.uncached, s.first.Sub(s.start))
}

// done records a stream that finished with completion tokens.
func (s *speed) done(t *failover.Tracker, res *AttemptResult) {
	if s == nil || s.first.IsZero() || res.Outcome != OK || res.Usage.CompletionTokens < 2 {
		return
	}
	t.ObserveDecode(s.worker, res.Usage.CompletionTokens-1, time.Since(s.first))
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
