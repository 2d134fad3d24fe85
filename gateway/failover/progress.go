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
// cumulative prefill and generation token counters and finished
// requests (vLLM's and SGLang's names).
var ProgressCounters = []string{
	"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
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
	at time.Time // real time of the read (zero: none)
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

// snapshotLocked takes w's first progress read of a run of timeouts, in
// the background; t.mu held.
func (t *Tracker) snapshotLocked(w *tracked) {
	if w.snapping || !w.snap.at.IsZero() {
		return
	}
	w.snapping = true
	t.goLocked(func(ctx context.Context) {
		s := t.readProgress(ctx, w)
		t.mu.Lock()
		w.snapping = false
		if ctx.Err() == nil && w.touts() > 0 {
			w.snap = s
		}
		t.mu.Unlock()
	})
}

// confirmWedge decides, in the background, whether w, whose timeouts just
// reached TimeoutThreshold, is wedged: its progress counters read
// ConfirmWait apart (from the run's first read, or two reads now) did
// not advance, or could not be read. A wedged worker is ejected
// (ReasonTimeout, subject to MaxEjectedShare) and the attempts it holds
// are cancelled (ErrEjected); a busy one is left in, its timeouts held at
// the threshold so the next one checks again.
func (t *Tracker) confirmWedge(ctx context.Context, w *tracked) {
	t.mu.Lock()
	s0 := w.snap
	t.mu.Unlock()
	if s0.at.IsZero() {
		s0 = t.readProgress(ctx, w)
	}
	if wait := t.cfg.Outlier.ConfirmWait - time.Since(s0.at); s0.ok && wait > 0 {
		tm := time.NewTimer(wait)
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
	wedged := !s0.ok || !s1.ok || s1.v <= s0.v
	now := t.cfg.Now()
	var evs []ejectEvent
	var cancels []func(error)
	capped, opened := false, false
	t.mu.Lock()
	w.confirming = false
	switch {
	case t.workers[w.id] != w:
	case !wedged:
		w.snap = s1 // the next timeout compares with this read
	case !t.mayEjectLocked(now, w):
		capped = true
	case w.br.Eject(now):
		opened = true
		w.lastErr = fmt.Sprintf("%d timeouts in a row, no progress in %s", t.cfg.Breaker.TimeoutThreshold,
			t.cfg.Outlier.ProgressPath)
		if !s0.ok {
			w.lastErr = fmt.Sprintf("%d timeouts in a row, %s unreadable", t.cfg.Breaker.TimeoutThreshold,
				t.cfg.Outlier.ProgressPath)
		}
		evs = append(evs, t.ejectedLocked(now, w, ReasonTimeout))
		cancels = w.heldCancelsLocked()
		t.notifyLocked()
	}
	t.mu.Unlock()
	t.afterConfirm(w, wedged, capped, opened, s0, s1)
	t.fire(evs)
	cancelAll(cancels)
}

// afterConfirm logs and counts a wedge confirmation's result.
func (t *Tracker) afterConfirm(w *tracked, wedged, capped, opened bool, s0, s1 progressSnap) {
	switch {
	case !wedged:
		t.log.Info("failover: worker timed out but its engine makes progress: not ejected", "worker", w.id,
			"progress_from", s0.v, "progress_to", s1.v)
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
