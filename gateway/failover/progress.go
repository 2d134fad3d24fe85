package failover

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
)

// This file confirms a wedge before a worker is ejected on its timeouts
// alone: a worker whose engine still makes progress (its token counters
// advance) is busy, not wedged.

// ProgressCounters are the metrics ParseProgress sums: the engines'
// cumulative prefill and generation token counters, finished requests,
// and vLLM's engine steps (the count of its iteration_tokens histogram,
// which advances through a long chunked prefill, before the prompt's
// tokens are counted at its first token), by vLLM's and SGLang's names.
var ProgressCounters = []string{
	"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
	"vllm:iteration_tokens_total_count",
	"sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_requests_total",
}

// maxProgressBody bounds a /metrics body read for progress.
const maxProgressBody = 4 << 20

// ParseProgress reads a Prometheus text exposition and returns the sum of
// the ProgressCounters' samples (every label set), and whether any was
// found. Malformed lines are skipped; it never fails on content, only on
// a read error.
func ParseProgress(r io.Reader) (sum float64, found bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		v, ok := progressLine(sc.Bytes())
		if ok {
			sum += v
			found = true
		}
	}
	if err := sc.Err(); err != nil {
		return sum, found, err
	}
	return sum, found, nil
}

// progressLine returns the value of one sample line of a progress counter.
func progressLine(line []byte) (float64, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == '#' {
		return 0, false
	}
	end := bytes.IndexAny(line, "{ \t")
	if end < 0 {
		return 0, false
	}
	name, rest := line[:end], line[end:]
	known := false
	for _, c := range ProgressCounters {
		if string(name) == c {
			known = true
			break
		}
	}
	if !known {
		return 0, false
	}
	if rest[0] == '{' {
		i, ok := labelsEnd(rest)
		if !ok {
			return 0, false
		}
		rest = rest[i:]
	}
	f := bytes.Fields(rest)
	if len(f) == 0 || len(f) > 2 {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, false
	}
	return v, true
}

// labelsEnd returns the index just past the label block's closing brace
// (quoted values may hold braces and escaped quotes).
func labelsEnd(b []byte) (int, bool) {
	quoted := false
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return i + 1, true
		}
	}
	return 0, false
}

// progressSnap is one read of a worker's progress counters.
type progressSnap struct {
	v  float64
	ok bool      // the counters were read
	at time.Time // real time of the read
}

// readProgress reads w's progress counters.
func (t *Tracker) readProgress(ctx context.Context, w *tracked) progressSnap {
	s := progressSnap{at: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Probe.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.url+t.cfg.Outlier.ProgressPath, nil)
	if err != nil {
		return s
	}
	resp, err := t.cfg.HTTPClient.Do(req)
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return s
	}
	v, found, err := ParseProgress(io.LimitReader(resp.Body, maxProgressBody))
	s.v, s.ok = v, found && err == nil
	return s
}

// confirms reports whether wedges are confirmed from progress counters.
func (t *Tracker) confirms() bool { return t.cfg.Outlier.ConfirmWait > 0 }

// goLocked runs f in a goroutine Close waits for; t.mu held.
func (t *Tracker) goLocked(f func(ctx context.Context)) {
	if t.closed {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f(t.ctx)
	}()
}

// confirmWedge decides, in the background, whether w, which just timed
// out having sent nothing (or holds a whole reply past its prefill's
// deadline with nothing sent: Tracker.suspect), is wedged: its progress counters read
// ConfirmWait apart did not advance (or could not be read) while it held
// requests. It is then ejected (ReasonTimeout, subject to
// MaxEjectedShare) and the attempts it holds are cancelled (ErrEjected)
// when its timeouts reached TimeoutThreshold or it still holds an attempt,
// sent before the first read, that it sent nothing of (a stalled engine
// with work it does not do); an unreadable /metrics needs the threshold.
// A worker whose counters advanced is busy, not wedged, and stays in, its
// timeouts held below the threshold so the next one checks again.
func (t *Tracker) confirmWedge(ctx context.Context, w *tracked) {
	s0 := t.readProgress(ctx, w)
	if s0.ok {
		tm := time.NewTimer(t.cfg.Outlier.ConfirmWait)
		select {
		case <-ctx.Done():
			tm.Stop()
		case <-tm.C:
		}
	}
	if ctx.Err() != nil {
		t.mu.Lock()
		w.confirming = false
		t.mu.Unlock()
		return
	}
	s1 := progressSnap{}
	if s0.ok {
		s1 = t.readProgress(ctx, w)
	}
	still := !s0.ok || !s1.ok || s1.v <= s0.v
	now := t.cfg.Now()
	var evs []ejectEvent
	var cancels []func(error)
	capped, opened, wedged := false, false, false
	t.mu.Lock()
	w.confirming = false
	if !still {
		w.lastProgress = time.Now()
	}
	if still && t.workers[w.id] == w && w.br.State(now) == Closed {
		atThreshold := w.touts() >= t.cfg.Breaker.TimeoutThreshold-1
		wedged = atThreshold || (s0.ok && s1.ok && w.heldSilentSince(s0.at))
	}
	switch {
	case !wedged:
	case !t.mayEjectLocked(now, w):
		capped = true
	case w.br.Eject(now):
		opened = true
		w.lastErr = fmt.Sprintf("timed out, no progress in %s for %v while it held requests", t.cfg.Outlier.ProgressPath,
			t.cfg.Outlier.ConfirmWait)
		if !s0.ok || !s1.ok {
			w.lastErr = fmt.Sprintf("%d timeouts in a row, %s unreadable", t.cfg.Breaker.TimeoutThreshold,
				t.cfg.Outlier.ProgressPath)
		}
		evs = append(evs, t.ejectedLocked(now, w, ReasonTimeout))
		cancels = w.heldCancelsLocked()
		t.notifyLocked()
	}
	t.mu.Unlock()
	t.afterConfirm(w, still, wedged, capped, opened, s0, s1)
	t.fire(evs)
	cancelAll(cancels)
}

// heldSilentSince reports whether w holds an attempt sent before at that
// it sent nothing of; t.mu held.
func (w *tracked) heldSilentSince(at time.Time) bool {
	for a := range w.held {
		if !a.sent.Load() && a.start.Before(at) {
			return true
		}
	}
	return false
}

// afterConfirm logs and counts a wedge confirmation's result.
func (t *Tracker) afterConfirm(w *tracked, still, wedged, capped, opened bool, s0, s1 progressSnap) {
	switch {
	case !still:
		t.log.Info("failover: worker timed out but its engine makes progress: not ejected", "worker", w.id,
			"progress_from", s0.v, "progress_to", s1.v)
	case !wedged:
	case capped:
		if t.m != nil {
			t.m.capped.WithLabelValues(w.label).Inc()
		}
		t.log.Warn("failover: wedged worker not ejected: the share of workers ejected is at its cap", "worker", w.id,
			"max_share", t.cfg.Outlier.MaxEjectedShare)
	case opened && t.m != nil:
		t.m.opens.WithLabelValues(w.label).Inc()
	}
}
