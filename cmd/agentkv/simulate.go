package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentkv/agentkv/internal/simrun"
	"github.com/agentkv/agentkv/trace"
)

func init() {
	register(&command{
		name:    "simulate",
		summary: "replay an agentic workload against simulated engines and compare policies",
		usage:   "[flags]",
		help: `
Replay an agentic workload on a cluster of simulated engines (engine/sim:
a vLLM-style prefix cache with LRU eviction, continuous batching, chunked
prefill, preemption, and a step-time model of Llama-3-8B on an A100) routed by
the real agentkv Router, and compare routing and admission policies across a
concurrency sweep. The engines feed the router's KV index through the same
event path a vLLM adapter uses.

With no flags it runs the built-in synthetic agentic workload (seeded, fitted
to public Claude Code sessions: a shared system prompt, growing contexts,
heavy-tailed tool gaps, subagent fan-out; 1,536 programs) on 4 workers
(440K-token KV pools each, an 8B model on an A100) that the working set
outgrows at high concurrency, for KV-aware routing, KV-aware routing with the
best fixed global concurrency cap (searched per level: 6, 8, 12 and 16
programs per worker, and none), and KV-aware routing with program-aware
admission, at 32 to 512 concurrent agent programs (a closed loop: a program
that ends is replaced by the next).

Throughput is measured in a steady-state window, from half a cohort of
refills after the start to the last refill (not tokens over the makespan of a
draining workload); goodput counts only turns whose TTFT met --slo. The
wait to be admitted (hold: a program's first turn, later turns at p99 and
at most) is reported apart from dispatch-to-first-token. Latency and
completion percentiles count every turn and program of the run: where the
window is under a quarter of a run (too few programs per slot), a note says
so, since they then mostly describe the cold start and the drain. It prints
a table, writes the results as JSON and a plot of throughput and prefix hit
rate against concurrency (SVG).

--batch adds RL rollout steps beside the closed loop: at each level N, N
programs are offered at once with no refills and the step ends with its last
program; it reports the makespan (first offer to last end), tokens/s over
it, program completion p50/p99 and the engines' idle share, and compares
the policies by makespan. --steps K runs K steps in a row (the next N
programs each), the engines' prefix caches flushed and the router's index
cleared between steps as a weight update does, and sums them. With --batch
the default policies add global-lb (VERL's default rollout balancer).

The table's columns (the README's tables use the same names):
` + simLegend + `

--workload reads any trace format the trace package reads (agentkv/Dynamo
request traces, Mooncake JSONL, Claude Code session files).`,
		run: runSimulate,
	})
}

type simulateFlags struct {
	workloadFlags
	workers      int
	blockSize    int
	deviceBlocks int
	hostBlocks   int
	policies     string
	levels       string
	jsonOut      string
	plotOut      string
	parallel     int
	slo          time.Duration
	priority     bool
	batch        bool
	closedLoop   bool
	steps        int
	infer        bool
}

// simDefaultPolicies and simBatchPolicies are --policies' defaults
// without and with --batch (an RL rollout is measured against VERL's
// balancer).
const (
	simDefaultPolicies = "kv,kv+cap,kv+admission"
	simBatchPolicies   = "kv,kv+cap,global-lb,kv+admission"
)

func runSimulate(env *cmdEnv, args []string) error {
	c := commands["simulate"]
	fs := newFlags(env, c)
	var f simulateFlags
	fs.StringVar(&f.workload, "workload", "", "trace file to replay (default: the built-in synthetic agentic workload)")
	fs.StringVar(&f.format, "format", "auto", "trace format of --workload: auto, agentkv, dynamo, mooncake, claude-code")
	fs.IntVar(&f.tile, "tile", 1, "replay this many copies of the workload's sessions, each with its own hash namespace past the shared prefix")
	fs.IntVar(&f.tileShared, "tile-shared-tokens", 15_040, "with --tile: the prompt prefix, in tokens, every copy of a session shares (system prompt and tools; 0 = copies share nothing)")
	fs.IntVar(&f.sessions, "sessions", 1536, "root sessions (agent programs) of the synthetic workload")
	fs.StringVar(&f.synthetic, "synthetic", "claude-code", "shape of the synthetic workload: claude-code (fitted to Claude Code sessions) or swe-bench (autonomous coding agents: 20-60 turns, long tool gaps)")
	fs.IntVar(&f.workers, "workers", 0, "simulated workers (default 4; for an open-loop trace, enough for its arrival rate: one per 5,000 offered prompt tokens/s, at least 4)")
	fs.IntVar(&f.blockSize, "block-size", 64, "KV block size in tokens (the synthetic workload's hash block; 16 is vLLM's default and 4× slower to simulate)")
	fs.IntVar(&f.deviceBlocks, "device-blocks", 0, "device KV pool per worker, in blocks (default: 440,000 tokens)")
	fs.IntVar(&f.hostBlocks, "host-blocks", 0, "host (CPU) KV tier per worker, in blocks; 0 = none")
	fs.StringVar(&f.policies, "policies", simDefaultPolicies, "policies to compare, a comma list of: "+policyNames()+" (with --batch the default is "+simBatchPolicies+")")
	fs.StringVar(&f.levels, "concurrency", "32,64,128,256,512", "concurrent agent programs, a comma list (0 = no bound)")
	fs.DurationVar(&f.slo, "slo", 10*time.Second, "TTFT objective of goodput")
	fs.BoolVar(&f.infer, "infer-sessions", false, "route every request without its session id: the router infers sessions from the prompt's blocks")
	fs.BoolVar(&f.priority, "priority", false, "run the engines with vLLM's priority scheduling; requests carry admission's priorities (resume boost, soft demote)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the synthetic workload and the router's tie-breaking")
	fs.StringVar(&f.jsonOut, "json", filepath.Join("out", "simulate.json"), "write results as JSON here (empty: don't)")
	fs.StringVar(&f.plotOut, "plot", filepath.Join("out", "simulate.svg"), "write the plot here: SVG, or PNG for a .png name (empty: don't)")
	fs.IntVar(&f.parallel, "parallel", runtime.GOMAXPROCS(0), "runs at once")
	fs.BoolVar(&f.batch, "batch", false, "also run rollout steps: each --concurrency level offers that many programs at once, no refills, the step ends with its last program (reported: makespan, tok/s over it, completion, engines' idle share)")
	fs.IntVar(&f.steps, "steps", 1, "with --batch: rollout steps in a row, the engines' prefix caches flushed (and the router's index cleared) between them as a weight update does; the table sums them")
	fs.BoolVar(&f.closedLoop, "closed-loop", true, "run the closed-loop sweep (--closed-loop=false with --batch runs only the batches)")
	if err := parseFlags(env, c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("simulate: unexpected argument %q", fs.Arg(0))
	}
	if f.deviceBlocks == 0 && f.blockSize > 0 {
		f.deviceBlocks = 440_000 / f.blockSize
	}
	if f.steps < 1 {
		return usagef("simulate: --steps must be ≥ 1, got %d", f.steps)
	}
	if !f.batch && (!f.closedLoop || f.steps != 1) {
		return usagef("simulate: --steps and --closed-loop=false go with --batch")
	}
	if f.batch {
		set := false
		fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "policies" })
		if !set {
			f.policies = simBatchPolicies
		}
	}
	if f.slo <= 0 {
		return usagef("simulate: --slo must be positive, got %v", f.slo)
	}
	var bad error
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "workers" && f.workers < 1 {
			bad = usagef("simulate: --workers must be ≥ 1, got %d", f.workers)
		}
	})
	if bad != nil {
		return bad
	}
	var policies []simrun.Policy
	for _, name := range splitList(f.policies) {
		p, err := simrun.PolicyByName(name)
		if err != nil {
			return usagef("simulate: %v", err)
		}
		policies = append(policies, p)
	}
	if len(policies) == 0 {
		return usagef("simulate: --policies is empty")
	}
	var levels []int
	for _, s := range splitList(f.levels) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return usagef("simulate: bad concurrency %q: want a non-negative integer", s)
		}
		levels = append(levels, n)
	}
	if len(levels) == 0 {
		return usagef("simulate: --concurrency is empty")
	}
	for name, v := range map[string]int{"block-size": f.blockSize, "device-blocks": f.deviceBlocks,
		"sessions": f.sessions, "tile": f.tile, "parallel": f.parallel} {
		if v < 1 {
			return usagef("simulate: --%s must be ≥ 1, got %d", name, v)
		}
	}
	if f.hostBlocks < 0 {
		return usagef("simulate: --host-blocks must be ≥ 0, got %d", f.hostBlocks)
	}

	w, err := f.workloadFlags.load("simulate")
	if err != nil {
		return err
	}
	if f.workers == 0 {
		f.workers = defaultWorkers(&w)
	}
	sum, err := trace.Summarize(&w)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "workload %s: %d sessions (with subagents), %d requests, %.0f input / %.0f output tokens per request\n",
		w.Name, sum.Sessions+sum.Subagents, sum.Requests,
		float64(sum.InputTokens)/float64(max(sum.Requests, 1)), float64(sum.OutputTokens)/float64(max(sum.Requests, 1)))
	runs := 0
	if f.closedLoop {
		runs = simrun.SweepRuns(policies, levels, f.workers)
	}
	if f.batch {
		runs += simrun.SweepRuns(policies, levels, f.workers)
	}
	fmt.Fprintf(env.stdout, "cluster: %d workers × %d blocks of %d tokens (%d tokens each), host tier %d blocks; %d runs\n\n",
		f.workers, f.deviceBlocks, f.blockSize, f.deviceBlocks*f.blockSize, f.hostBlocks, runs)

	tty := isTerminal(env.stderr)
	start := time.Now()
	progress := func(done, total int, r *simrun.Result) {
		line := fmt.Sprintf("[%d/%d] %-13s concurrency %-4d cap %-4d done in %5.1fs (%.0fs elapsed)",
			done, total, r.Policy, r.Concurrency, r.Cap, r.Wall.Seconds(), time.Since(start).Seconds())
		if tty {
			fmt.Fprintf(env.stderr, "\r\033[K%s", line)
			if done == total {
				fmt.Fprintln(env.stderr)
			}
		} else {
			fmt.Fprintln(env.stderr, line)
		}
	}
	base := simrun.Options{
		Cluster: simrun.Cluster{Workers: f.workers, BlockSize: f.blockSize, DeviceBlocks: f.deviceBlocks, HostBlocks: f.hostBlocks,
			Priority: f.priority},
		Seed:    f.seed,
		TTFTSLO: f.slo,
	}
	base.InferSessions = f.infer
	var results, batch []*simrun.Result
	if f.closedLoop {
		if results, err = simrun.Sweep(&w, base, policies, levels, f.parallel, progress); err != nil {
			return err
		}
		printSimTable(env.stdout, results)
		printShortWindows(env.stdout, results, levels)
		printSimComparison(env.stdout, results, policies, levels, "throughput", (*simrun.Result).SteadyThroughput)
	}
	if f.batch {
		bb := base
		bb.Batch, bb.Steps = true, f.steps
		if batch, err = simrun.Sweep(&w, bb, policies, levels, f.parallel, progress); err != nil {
			return err
		}
		if f.closedLoop {
			fmt.Fprintln(env.stdout)
		}
		fmt.Fprintf(env.stdout, "batch: every program of a level offered at once, no refills; %d step(s), caches flushed between steps\n", f.steps)
		printBatchTable(env.stdout, batch)
		printSimComparison(env.stdout, batch, policies, levels, "batch makespan", func(r *simrun.Result) float64 { return r.Makespan.Seconds() })
		printBestBaseline(env.stdout, batch, policies, levels)
	}
	if f.jsonOut != "" {
		if err := writeSimJSON(f.jsonOut, &f, w.Name, results, batch); err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "\nresults: %s\n", f.jsonOut)
	}
	if f.plotOut != "" {
		if err := writeSimPlot(f.plotOut, w.Name, results, batch, policies); err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "plot:    %s\n", f.plotOut)
	}
	return nil
}

func policyNames() string {
	names := make([]string, len(simrun.Policies))
	for i, p := range simrun.Policies {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// simColumns are the closed-loop table's columns, the README's names;
// simLegend explains them under the table (and in --help).
var simColumns = []string{"policy", "programs", "cap", "tok/s", "goodput", "busy%", "hit%", "TTFT p50", "TTFT p99",
	"hold p99 first", "hold p99 later", "hold max later", "dispatch p99", "completion p50", "completion p99", "forced", "preempt", "window"}

const simLegend = `programs: agent programs at once (closed loop: one that ends is replaced by the next).
cap: kv+cap's best fixed global cap on running programs (none: no cap won; n/a: not a capped policy).
tok/s: prompt + output tokens of the turns finished in the steady-state window, per second; goodput: those whose TTFT met --slo.
busy%: the engines' busy time in the window; hit%: prompt tokens found in the prefix cache.
TTFT: arrival to first token, holds included; hold p99 first: the wait to be admitted of programs' first turns (at the door);
hold p99 later / hold max later: that of their later turns; dispatch p99: dispatch to first token.
completion: a program's time from its offer to its end; forced: admission's forced resumes; preempt: engine preemptions.
window: the steady-state window (none: every program offered at once).`

// batchColumns are the batch table's columns; batchLegend explains them.
var batchColumns = []string{"policy", "programs", "steps", "cap", "makespan", "tok/s", "idle%", "hit%", "completion p50", "completion p99",
	"hold p99 first", "hold p99 later", "preempt"}

const batchLegend = `programs: programs offered at once per step, no refills; steps: rollout steps summed (caches flushed between).
makespan: first offer to last end (summed over steps); tok/s: prompt + output tokens over the makespan.
idle%: the engines' idle share of the makespan; completion: a program's time from its step's start to its end.
cap, hit%, hold, preempt: as in the closed-loop table.`

func printSimTable(w io.Writer, results []*simrun.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(simColumns, "\t")+"\t")
	for _, r := range results {
		win := dur(r.Window.End - r.Window.Start)
		if !r.Window.Steady {
			win = "none"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.0f\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t\n",
			r.Policy, concLabel(r.Concurrency), capLabel(r), r.SteadyThroughput(), r.Goodput, 100*r.Busy, 100*r.HitRate,
			dur(r.TTFT.P50), dur(r.TTFT.P99), dur(r.HoldFirst.P99), dur(r.HoldLater.P99), dur(r.HoldLater.Max), dur(r.DispatchTTFT.P99),
			dur(r.Completion.P50), dur(r.Completion.P99), r.Admission.Forced, r.Preemptions, win)
	}
	tw.Flush()
	fmt.Fprintln(w, "\n"+simLegend)
}

func printBatchTable(w io.Writer, results []*simrun.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(batchColumns, "\t")+"\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.0f\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%d\t\n",
			r.Policy, concLabel(r.Concurrency), r.RolloutSteps, capLabel(r), dur(r.Makespan), r.Throughput, 100*(1-r.Busy), 100*r.HitRate,
			dur(r.Completion.P50), dur(r.Completion.P99), dur(r.HoldFirst.P99), dur(r.HoldLater.P99), r.Preemptions)
	}
	tw.Flush()
	fmt.Fprintln(w, "\n"+batchLegend)
}

// capLabel is a run's cap column: the cap a capped policy ran with, "none"
// when no cap won (the uncapped candidate was best), "n/a" for a policy
// that runs no cap.
func capLabel(r *simrun.Result) string {
	switch {
	case r.Cap > 0:
		return strconv.Itoa(r.Cap)
	case len(r.CapsTried) > 0:
		return "none"
	}
	return "n/a"
}

func concLabel(c int) string {
	if c == 0 {
		return "all"
	}
	return strconv.Itoa(c)
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return fmt.Sprintf("%.1fm", d.Minutes())
	case d >= time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
	}
}

// shortWindow is the share of a run below which its steady-state window
// is too short for the run's percentiles to describe a steady state.
const shortWindow = 0.25

// printShortWindows notes each level where some policy's steady-state
// window is under a quarter of its run: the throughput is measured in the
// window, but the latency and completion percentiles count every turn and
// program, and are then mostly those of the cold start (every program
// offered at once) and the drain.
func printShortWindows(w io.Writer, results []*simrun.Result, levels []int) {
	for _, c := range levels {
		var worst *simrun.Result
		share := func(r *simrun.Result) float64 {
			return float64(r.Window.End-r.Window.Start) / float64(max(r.Makespan, 1))
		}
		for _, r := range results {
			if r.Concurrency == c && r.Window.Steady && share(r) < shortWindow && (worst == nil || share(r) < share(worst)) {
				worst = r
			}
		}
		if worst != nil {
			fmt.Fprintf(w, "\nnote: at %s programs the steady-state window is %s of %s's %s run (%.0f %%): the latency and completion percentiles are mostly the cold start and the drain; more programs (--sessions, --tile) give a steady state",
				concLabel(c), dur(worst.Window.End-worst.Window.Start), worst.Policy, dur(worst.Makespan), 100*share(worst))
			fmt.Fprintln(w)
		}
	}
}

// printSimComparison prints each policy's metric relative to the first
// policy, and relative to "kv" and "kv+cap" for the policies that build
// on them.
func printSimComparison(w io.Writer, results []*simrun.Result, policies []simrun.Policy, levels []int, what string,
	metric func(*simrun.Result) float64) {
	compare := func(base string, others []simrun.Policy) {
		if len(others) == 0 {
			return
		}
		fmt.Fprintln(w, "\n"+what+" relative to", base+":")
		for _, p := range others {
			fmt.Fprintf(w, "  %-13s", p.Name)
			for _, c := range levels {
				a, b := resultAt(results, base, c), resultAt(results, p.Name, c)
				if a == nil || b == nil || metric(a) == 0 {
					continue
				}
				fmt.Fprintf(w, "  c=%s %+.1f%%", concLabel(c), 100*(metric(b)/metric(a)-1))
			}
			fmt.Fprintln(w)
		}
	}
	compare(policies[0].Name, policies[1:])
	if policies[0].Name != "kv" && slices.ContainsFunc(policies, func(p simrun.Policy) bool { return p.Name == "kv" }) {
		var after []simrun.Policy
		for _, p := range policies {
			if strings.HasPrefix(p.Name, "kv+") {
				after = append(after, p)
			}
		}
		compare("kv", after)
	}
	if policies[0].Name != "kv+cap" && slices.ContainsFunc(policies, func(p simrun.Policy) bool { return p.Name == "kv+cap" }) {
		var after []simrun.Policy
		for _, p := range policies {
			if strings.HasPrefix(p.Name, "kv+") && p.Name != "kv+cap" {
				after = append(after, p)
			}
		}
		compare("kv+cap", after)
	}
}

// resultAt is the result of policy p at concurrency c, nil if none.
func resultAt(results []*simrun.Result, p string, c int) *simrun.Result {
	for _, r := range results {
		if r.Policy == p && r.Concurrency == c {
			return r
		}
	}
	return nil
}

// batchBaselines are the policies issue #31's first target compares
// kv+admission with: in batch mode, a policy's makespan against the
// shortest of theirs at each level.
var batchBaselines = []string{"kv", "kv+cap", "global-lb"}

// printBestBaseline prints, when every batch baseline ran, each other
// policy's makespan relative to the best baseline of each level, naming
// that baseline.
func printBestBaseline(w io.Writer, batch []*simrun.Result, policies []simrun.Policy, levels []int) {
	for _, b := range batchBaselines {
		if !slices.ContainsFunc(policies, func(p simrun.Policy) bool { return p.Name == b }) {
			return
		}
	}
	best := make(map[int]*simrun.Result, len(levels))
	for _, r := range batch {
		if slices.Contains(batchBaselines, r.Policy) && (best[r.Concurrency] == nil || r.Makespan < best[r.Concurrency].Makespan) {
			best[r.Concurrency] = r
		}
	}
	header := false
	for _, p := range policies {
		if slices.Contains(batchBaselines, p.Name) {
			continue
		}
		if !header {
			fmt.Fprintln(w, "\nbatch makespan relative to the best of kv, kv+cap and global-lb:")
			header = true
		}
		fmt.Fprintf(w, "  %-13s", p.Name)
		for _, c := range levels {
			r, b := resultAt(batch, p.Name, c), best[c]
			if r == nil || b == nil || b.Makespan <= 0 {
				continue
			}
			fmt.Fprintf(w, "  c=%s %+.1f%% (%s)", concLabel(c), 100*(r.Makespan.Seconds()/b.Makespan.Seconds()-1), b.Policy)
		}
		fmt.Fprintln(w)
	}
}

type simJSON struct {
	Workload string           `json:"workload"`
	Seed     uint64           `json:"seed"`
	Workers  int              `json:"workers"`
	Block    int              `json:"block_size"`
	Device   int              `json:"device_blocks"`
	Host     int              `json:"host_blocks"`
	Results  []*simrun.Result `json:"results"`
	// Batch holds the --batch runs (rollout steps).
	Batch []*simrun.Result `json:"batch,omitempty"`
}

func writeSimJSON(path string, f *simulateFlags, name string, results, batch []*simrun.Result) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(simJSON{Workload: name, Seed: f.seed, Workers: f.workers, Block: f.blockSize,
		Device: f.deviceBlocks, Host: f.hostBlocks, Results: results, Batch: batch}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// defaultWorkers is 4, or for an open-loop trace one worker per 5,000
// prompt tokens per second of its arrival span (an 8B model on an A100
// prefills ~10 K uncached tokens/s; about half hit the cache), at least 4.
func defaultWorkers(w *trace.Workload) int {
	if !w.OpenLoop {
		return 4
	}
	var first, last time.Duration
	var tokens int64
	n := 0
	for i := range w.Sessions {
		for _, t := range w.Sessions[i].Turns {
			if n == 0 || t.Arrival < first {
				first = t.Arrival
			}
			last = max(last, t.Arrival)
			tokens += int64(t.InputTokens)
			n++
		}
	}
	span := (last - first).Seconds()
	if span <= 0 {
		return 4
	}
	return max(4, int(math.Ceil(float64(tokens)/span/5000)))
}
