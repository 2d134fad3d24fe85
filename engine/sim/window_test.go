package sim

import (
	"strconv"
	"testing"
	"time"

	"github.com/agentkv/agentkv/trace"
)

// programs builds n closed-loop root programs of two turns each, with a
// tool gap of gap between them.
func programs(n int, gap time.Duration) *trace.Workload {
	w := &trace.Workload{Name: "programs"}
	for i := range n {
		w.Sessions = append(w.Sessions, trace.Session{ID: "p" + strconv.Itoa(i), ParentTurn: -1, Turns: []trace.Turn{
			{InputTokens: 2000, OutputTokens: 50},
			{InputTokens: 2100, OutputTokens: 50, Delay: gap},
		}})
	}
	return w
}

// TestMaxRunningCapsPrograms: with a global cap of 2 programs out of 4
// offered, no more than 2 programs are ever between their first dispatch
// and their end; the others' first turns wait at the door, and that wait is
// their HoldFirst and part of their TTFT, never of later turns.
func TestMaxRunningCapsPrograms(t *testing.T) {
	w := programs(12, 3*time.Second)
	res, reqs := run(t, w, engines(t, 2, Config{}, nil), &rrRouter{n: 2}, ReplayConfig{MaxActiveSessions: 4, MaxRunning: 2})
	type span struct{ from, to time.Duration }
	spans := map[string]*span{}
	for _, r := range reqs {
		s := spans[r.Root]
		if s == nil {
			s = &span{from: r.Dispatched, to: r.Finished}
			spans[r.Root] = s
		}
		s.from, s.to = min(s.from, r.Dispatched), max(s.to, r.Finished)
		if r.Turn > 0 && r.Held != 0 {
			t.Fatalf("later turn %s/%d held %v", r.Session, r.Turn, r.Held)
		}
		if r.DoorHeld != (r.Turn == 0 && r.Held > 0) {
			t.Fatalf("turn %s/%d: DoorHeld %v with Held %v", r.Session, r.Turn, r.DoorHeld, r.Held)
		}
		if r.FirstToken-r.Arrival < r.Held {
			t.Fatalf("turn %s/%d: TTFT %v excludes its hold %v", r.Session, r.Turn, r.FirstToken-r.Arrival, r.Held)
		}
	}
	for _, a := range spans {
		n := 0
		for _, b := range spans {
			if b.from <= a.from && a.from < b.to {
				n++
			}
		}
		if n > 2 {
			t.Fatalf("%d programs running at %v, cap 2", n, a.from)
		}
	}
	if res.HoldFirst.Max <= 0 || res.HoldLater.Max != 0 {
		t.Fatalf("hold first %+v, later %+v: want door waits on first turns only", res.HoldFirst, res.HoldLater)
	}
	if !res.Window.Steady || res.Window.End <= res.Window.Start {
		t.Fatalf("window %+v: want a steady window (12 programs, 4 offered)", res.Window)
	}
	if res.WindowThroughput <= 0 || res.Busy <= 0 || res.Busy > 1 {
		t.Fatalf("window throughput %.0f, busy %.3f", res.WindowThroughput, res.Busy)
	}
	if len(res.Workers) != 2 || res.Completion.P50 <= 0 {
		t.Fatalf("completion %+v", res.Completion)
	}
}

// TestWindowNaiveReference checks the window metrics against a direct
// recount: window throughput is the tokens of requests finished in the
// window over its length, goodput those whose TTFT met the objective, and
// with no refills (every program offered at once) there is no steady window.
func TestWindowNaiveReference(t *testing.T) {
	w := programs(30, 20*time.Second)
	slo := 500 * time.Millisecond
	res, reqs := run(t, w, engines(t, 2, Config{MaxBatch: 4}, nil), &rrRouter{n: 2}, ReplayConfig{MaxActiveSessions: 8, TTFTSLO: slo})
	var tok, good int64
	for _, r := range reqs {
		if r.Finished >= res.Window.Start && r.Finished < res.Window.End {
			n := int64(r.InputTokens + r.OutputTokens)
			tok += n
			if r.FirstToken-r.Arrival <= slo {
				good += n
			}
		}
	}
	span := (res.Window.End - res.Window.Start).Seconds()
	if got, want := res.WindowThroughput, float64(tok)/span; got != want {
		t.Fatalf("window throughput %v, recount %v", got, want)
	}
	if got, want := res.Goodput, float64(good)/span; got != want || good == tok || good == 0 {
		t.Fatalf("goodput %v, recount %v (%d of %d tokens met the SLO: the test needs some of each)", got, want, good, tok)
	}
	all, _ := run(t, w, engines(t, 2, Config{}, nil), &rrRouter{n: 2}, ReplayConfig{})
	if all.Window.Steady || all.Window.End != all.Makespan {
		t.Fatalf("no refills: window %+v, makespan %v", all.Window, all.Makespan)
	}
}
