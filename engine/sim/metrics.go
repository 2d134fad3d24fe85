package sim

import (
	"slices"
	"time"
)

// Result is what a replay measured.
type Result struct {
	// Requests counts every request that arrived; Finished those that
	// completed; Rejected those no engine could ever hold (ErrTooLarge).
	Requests, Finished, Rejected int
	// Makespan is the virtual time of the last completion (the clock
	// starts at 0).
	Makespan time.Duration
	// PromptTokens and OutputTokens sum the finished requests' lengths.
	PromptTokens, OutputTokens int64
	// CachedTokens and HostCachedTokens sum the prompt tokens found in the
	// device and host prefix caches at first admission.
	CachedTokens, HostCachedTokens int64
	// HitRate is (CachedTokens + HostCachedTokens) / PromptTokens;
	// DeviceHitRate counts the device only.
	HitRate, DeviceHitRate float64
	// ComputedTokens counts every token the engines computed;
	// RecomputedTokens those computed again after preemptions.
	ComputedTokens, RecomputedTokens int64
	// RePrefillTokens counts prompt tokens a session had already sent in
	// its previous finished turn (the common prefix of the two block
	// chains) that missed the cache and were computed again.
	RePrefillTokens int64
	// Throughput is (PromptTokens + OutputTokens) per second of makespan:
	// model tokens processed, cached or not.
	Throughput float64
	// Steps sums the engines' steps; StepsPerMinute is Steps per minute of
	// makespan.
	Steps          int64
	StepsPerMinute float64
	// TTFT is first token − arrival (router holds and queueing included);
	// E2E is finish − arrival.
	TTFT, E2E Latency
	// Pauses counts requests the router held (each once); Resumes those of
	// them later dispatched; HeldTime their total time held. BadReleases
	// counts released IDs that were not held.
	Pauses, Resumes int
	HeldTime        time.Duration
	BadReleases     int
	// Preemptions, BlockOps and Events sum the engines' counters.
	Preemptions, BlockOps, Events int64
	// Workers has one entry per engine, in order.
	Workers []WorkerResult

	// Window is the steady-state measurement window (see Window);
	// WindowThroughput the model tokens (prompt + output) of requests
	// finished in it per second; Goodput the same counting only requests
	// whose TTFT met ReplayConfig.TTFTSLO; Busy the engines' mean busy
	// fraction in it.
	Window           Window
	WindowThroughput float64
	Goodput          float64
	Busy             float64
	// HoldFirst is the wait to be admitted of programs' first turns (at
	// the door, ReplayConfig.MaxRunning, and held by the router); HoldLater
	// that of every later turn and of subagents' turns. DispatchTTFT is
	// first token − dispatch (engine queueing and prefill): TTFT is the
	// hold plus this. Completion is a program's time from its offer to the
	// end of its last session (closed-loop replay).
	HoldFirst, HoldLater, DispatchTTFT, Completion Latency
}

// Window is where a replay measures steady state. In closed-loop replay
// with MaxActiveSessions programs and more programs than that, it runs from
// the offer of the (MaxActiveSessions/2)-th refill (a program started
// because another ended; fewer when there are few refills) to the last
// offer, after which the workload drains: a throughput that the tail of the
// run, with ever fewer programs left, does not decide. In open-loop replay
// it runs from 10 % of the arrival span to the last arrival. Otherwise
// (every program offered at once) it is the whole run and Steady is false.
type Window struct {
	Start, End time.Duration
	Steady     bool
}

// Latency summarises a latency distribution; percentiles are nearest-rank.
type Latency struct {
	P50, P99, Mean, Max time.Duration
}

// WorkerResult is one engine's share of a run.
type WorkerResult struct {
	Stats
	// Utilisation is the engine's busy time over the makespan.
	Utilisation float64
	// StepsPerMinute is its steps per minute of makespan.
	StepsPerMinute float64
	// Requests counts the requests dispatched to it.
	Requests int
}

func (rp *Replay) account(req *Request) {
	r := &rp.res
	if req.Rejected {
		r.Rejected++
		return
	}
	r.Finished++
	r.PromptTokens += int64(req.InputTokens)
	r.OutputTokens += int64(max(1, req.OutputTokens))
	r.CachedTokens += int64(req.CachedTokens)
	r.HostCachedTokens += int64(req.HostCachedTokens)
	r.ComputedTokens += int64(req.ComputedTokens)
	r.RecomputedTokens += int64(req.RecomputedTokens)
	rp.ttft = append(rp.ttft, req.FirstToken-req.Arrival)
	rp.e2e = append(rp.e2e, req.Finished-req.Arrival)
	if req.Finished > r.Makespan {
		r.Makespan = req.Finished
	}
	prev := rp.sess[rp.byID[req.Session]].prevChain
	common := 0
	for common < len(prev) && common < len(req.SeqHashes) && prev[common] == req.SeqHashes[common] {
		common++
	}
	hit := (req.CachedTokens + req.HostCachedTokens) / rp.bs
	if common > hit {
		r.RePrefillTokens += int64((common - hit) * rp.bs)
	}
}

// addBusy adds engine w's step [at, at+d) to its per-second busy buckets.
func (rp *Replay) addBusy(w int, at, d time.Duration) {
	b := rp.busyBkt[w]
	for d > 0 {
		i := int(at / time.Second)
		for len(b) <= i {
			b = append(b, 0)
		}
		part := min(d, time.Duration(i+1)*time.Second-at)
		b[i] += part
		at += part
		d -= part
	}
	rp.busyBkt[w] = b
}

// busyIn sums engine w's busy time in [from, to), prorating the buckets
// at the edges.
func (rp *Replay) busyIn(w int, from, to time.Duration) time.Duration {
	var sum time.Duration
	for i, v := range rp.busyBkt[w] {
		lo, hi := time.Duration(i)*time.Second, time.Duration(i+1)*time.Second
		a, b := max(lo, from), min(hi, to)
		if b <= a {
			continue
		}
		sum += time.Duration(float64(v) * float64(b-a) / float64(time.Second))
	}
	return sum
}

func (rp *Replay) window() Window {
	if rp.w.OpenLoop {
		var first, last time.Duration
		for i, q := range rp.reqs {
			if i == 0 || q.Arrival < first {
				first = q.Arrival
			}
			last = max(last, q.Arrival)
		}
		if last > first {
			return Window{Start: first + (last-first)/10, End: last, Steady: true}
		}
		return Window{End: rp.res.Makespan}
	}
	l := rp.cfg.MaxActiveSessions
	refills := len(rp.offers) - l
	if l <= 0 || refills <= 0 {
		return Window{End: rp.res.Makespan}
	}
	start := rp.offers[l-1+min(l/2, refills/2)]
	end := rp.offers[len(rp.offers)-1]
	if end <= start {
		return Window{End: rp.res.Makespan}
	}
	return Window{Start: start, End: end, Steady: true}
}

func (rp *Replay) windowMetrics(r *Result) {
	r.Window = rp.window()
	span := (r.Window.End - r.Window.Start).Seconds()
	var hf, hl, disp []time.Duration
	var tok, good int64
	for _, q := range rp.reqs {
		if q.Rejected || q.Finished == 0 && q.FirstToken == 0 {
			continue
		}
		if q.Turn == 0 && q.Parent == "" {
			hf = append(hf, q.Held)
		} else {
			hl = append(hl, q.Held)
		}
		disp = append(disp, q.FirstToken-q.Dispatched)
		if q.Finished >= r.Window.Start && q.Finished < r.Window.End || !r.Window.Steady && q.Finished == r.Window.End {
			n := int64(q.InputTokens + max(1, q.OutputTokens))
			tok += n
			if q.FirstToken-q.Arrival <= rp.cfg.TTFTSLO {
				good += n
			}
		}
	}
	r.HoldFirst, r.HoldLater, r.DispatchTTFT = latency(hf), latency(hl), latency(disp)
	r.Completion = latency(rp.compl)
	if span <= 0 {
		return
	}
	r.WindowThroughput = float64(tok) / span
	r.Goodput = float64(good) / span
	var busy time.Duration
	for w := range rp.engines {
		busy += rp.busyIn(w, r.Window.Start, r.Window.End)
	}
	r.Busy = busy.Seconds() / span / float64(len(rp.engines))
}

func (rp *Replay) result() *Result {
	r := rp.res
	r.Requests = len(rp.reqs)
	if r.PromptTokens > 0 {
		r.HitRate = float64(r.CachedTokens+r.HostCachedTokens) / float64(r.PromptTokens)
		r.DeviceHitRate = float64(r.CachedTokens) / float64(r.PromptTokens)
	}
	secs := r.Makespan.Seconds()
	mins := r.Makespan.Minutes()
	if secs > 0 {
		r.Throughput = float64(r.PromptTokens+r.OutputTokens) / secs
	}
	r.TTFT = latency(rp.ttft)
	r.E2E = latency(rp.e2e)
	perWorker := make([]int, len(rp.engines))
	for _, q := range rp.reqs {
		if q.Worker >= 0 {
			perWorker[q.Worker]++
		}
	}
	r.Workers = make([]WorkerResult, len(rp.engines))
	for i, e := range rp.engines {
		s := e.Stats()
		wr := WorkerResult{Stats: s, Requests: perWorker[i]}
		if secs > 0 {
			wr.Utilisation = s.Busy.Seconds() / secs
			wr.StepsPerMinute = float64(s.Steps) / mins
		}
		r.Workers[i] = wr
		r.Steps += s.Steps
		r.Preemptions += s.Preemptions
		r.BlockOps += s.BlockOps
		r.Events += s.Events
	}
	if mins > 0 {
		r.StepsPerMinute = float64(r.Steps) / mins
	}
	rp.windowMetrics(&r)
	return &r
}

func latency(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	return Latency{
		P50:  nearestRank(s, 50),
		P99:  nearestRank(s, 99),
		Mean: sum / time.Duration(len(s)),
		Max:  s[len(s)-1],
	}
}

// nearestRank returns the p-th percentile of sorted s: the smallest value
// with at least p % of the values at or below it.
func nearestRank(s []time.Duration, p int) time.Duration {
	k := (p*len(s) + 99) / 100
	return s[max(k, 1)-1]
}
