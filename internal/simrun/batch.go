package simrun

import (
	"fmt"
	"slices"
	"time"

	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/trace"
)

// This file holds batch mode (Options.Batch): an RL rollout step, every
// program offered at once with no refills, the step over when its last
// program ends; with Options.Steps, several steps in a row with the
// engines' prefix caches flushed between them, as a weight update does.

// Batch returns the workload of rollout step step (from 0) with n programs
// per step: the root sessions n·step … n·step+n−1 of w (wrapping around
// its roots; a wrapped program's sessions get the suffix "#s<step>", so
// no session of one run repeats), with their subagents, every root
// starting at 0. n ≤ 0 means every root of w. A batch larger than w's
// roots is an error: a step never runs a program twice. Open-loop
// workloads have no programs to batch. The result shares w's turns; the
// caller must not modify either.
func Batch(w *trace.Workload, n, step int) (*trace.Workload, error) {
	if w.OpenLoop {
		return nil, fmt.Errorf("simrun: batch mode needs a closed-loop workload, %s is open-loop", w.Name)
	}
	var roots []int
	root := make(map[string]string, len(w.Sessions)) // session → its root
	for i := range w.Sessions {
		s := &w.Sessions[i]
		if s.Parent == "" {
			roots = append(roots, i)
			root[s.ID] = s.ID
		}
	}
	for changed := true; changed; {
		changed = false
		for i := range w.Sessions {
			s := &w.Sessions[i]
			if _, ok := root[s.ID]; !ok {
				if r, ok := root[s.Parent]; ok {
					root[s.ID], changed = r, true
				}
			}
		}
	}
	if n <= 0 {
		n = len(roots)
	}
	if n > len(roots) {
		return nil, fmt.Errorf("simrun: a batch of %d programs, but %s has %d (more sessions or --tile)", n, w.Name, len(roots))
	}
	if step < 0 {
		return nil, fmt.Errorf("simrun: negative step %d", step)
	}
	first := n * step
	pick := make(map[string]string, n) // root → suffix
	for k := range n {
		j := first + k
		suffix := ""
		if j >= len(roots) {
			suffix = fmt.Sprintf("#s%d", step)
		}
		pick[w.Sessions[roots[j%len(roots)]].ID] = suffix
	}
	out := &trace.Workload{Name: w.Name, BlockTokens: w.BlockTokens}
	for i := range w.Sessions {
		s := w.Sessions[i]
		suffix, ok := pick[root[s.ID]]
		if !ok {
			continue
		}
		if s.Parent == "" {
			s.Start = 0
		}
		if suffix != "" {
			s.ID += suffix
			if s.Parent != "" {
				s.Parent += suffix
			}
			turns := slices.Clone(s.Turns)
			for k := range turns {
				if len(turns[k].WaitFor) > 0 {
					wf := make([]string, len(turns[k].WaitFor))
					for x, id := range turns[k].WaitFor {
						wf[x] = id + suffix
					}
					turns[k].WaitFor = wf
				}
			}
			s.Turns = turns
		}
		out.Sessions = append(out.Sessions, s)
	}
	return out, nil
}

// mergeSteps sums the steps of a batch run: counters add up, the makespan
// is the steps' sum (each step starts when the one before ends), throughput
// and goodput are over it, the busy share is weighted by each step's
// makespan, and the latency and completion percentiles count every turn and
// program of every step (a program's completion is from its step's start,
// where it was offered). Per-worker detail is the last step's.
func mergeSteps(rs []*sim.Result, reqs [][]*sim.Request) *sim.Result {
	m := *rs[len(rs)-1]
	m.Requests, m.Finished, m.Rejected = 0, 0, 0
	m.Makespan, m.PromptTokens, m.OutputTokens, m.CachedTokens, m.HostCachedTokens = 0, 0, 0, 0, 0
	m.ComputedTokens, m.RecomputedTokens, m.RePrefillTokens, m.Steps = 0, 0, 0, 0
	m.Pauses, m.Resumes, m.HeldTime, m.BadReleases = 0, 0, 0, 0
	m.Preemptions, m.BlockOps, m.Events = 0, 0, 0
	var busy, good float64
	for _, r := range rs {
		m.Requests += r.Requests
		m.Finished += r.Finished
		m.Rejected += r.Rejected
		m.Makespan += r.Makespan
		m.PromptTokens += r.PromptTokens
		m.OutputTokens += r.OutputTokens
		m.CachedTokens += r.CachedTokens
		m.HostCachedTokens += r.HostCachedTokens
		m.ComputedTokens += r.ComputedTokens
		m.RecomputedTokens += r.RecomputedTokens
		m.RePrefillTokens += r.RePrefillTokens
		m.Steps += r.Steps
		m.Pauses += r.Pauses
		m.Resumes += r.Resumes
		m.HeldTime += r.HeldTime
		m.BadReleases += r.BadReleases
		m.Preemptions += r.Preemptions
		m.BlockOps += r.BlockOps
		m.Events += r.Events
		busy += r.Busy * r.Makespan.Seconds()
		good += r.Goodput * (r.Window.End - r.Window.Start).Seconds()
	}
	secs := m.Makespan.Seconds()
	m.HitRate, m.DeviceHitRate, m.Throughput, m.StepsPerMinute, m.Busy, m.Goodput = 0, 0, 0, 0, 0, 0
	if m.PromptTokens > 0 {
		m.HitRate = float64(m.CachedTokens+m.HostCachedTokens) / float64(m.PromptTokens)
		m.DeviceHitRate = float64(m.CachedTokens) / float64(m.PromptTokens)
	}
	if secs > 0 {
		m.Throughput = float64(m.PromptTokens+m.OutputTokens) / secs
		m.StepsPerMinute = float64(m.Steps) / m.Makespan.Minutes()
		m.Busy = busy / secs
		m.Goodput = good / secs
	}
	m.Window = sim.Window{End: m.Makespan}
	m.WindowThroughput = m.Throughput
	var ttft, e2e, hf, hl, disp, compl []time.Duration
	for _, step := range reqs {
		end := map[string]time.Duration{}
		for _, q := range step {
			end[q.Root] = max(end[q.Root], q.Finished) // a rejected turn ends its program too
			if q.Rejected || q.Finished == 0 && q.FirstToken == 0 {
				continue
			}
			if q.Turn == 0 && q.Parent == "" {
				hf = append(hf, q.Held)
			} else {
				hl = append(hl, q.Held)
			}
			disp = append(disp, q.FirstToken-q.Dispatched)
			ttft = append(ttft, q.FirstToken-q.Arrival)
			e2e = append(e2e, q.Finished-q.Arrival)
		}
		for _, e := range end {
			compl = append(compl, e)
		}
	}
	m.TTFT, m.E2E, m.HoldFirst, m.HoldLater, m.DispatchTTFT, m.Completion =
		latency(ttft), latency(e2e), latency(hf), latency(hl), latency(disp), latency(compl)
	return &m
}

// latency summarises d as sim does (nearest-rank percentiles).
func latency(d []time.Duration) sim.Latency {
	if len(d) == 0 {
		return sim.Latency{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	rank := func(p int) time.Duration { return s[max((p*len(s)+99)/100, 1)-1] }
	return sim.Latency{P50: rank(50), P99: rank(99), Mean: sum / time.Duration(len(s)), Max: s[len(s)-1]}
}
