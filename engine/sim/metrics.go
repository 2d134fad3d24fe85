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
