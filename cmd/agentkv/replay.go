package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentkv/agentkv/internal/loadgen"
	"github.com/agentkv/agentkv/internal/simrun"
	"github.com/agentkv/agentkv/trace"
)

func init() {
	register(&command{
		name:    "replay",
		summary: "replay an agentic workload live against an OpenAI-compatible endpoint",
		usage:   "--endpoint URL [--workload FILE] [flags]",
		help: `
Replay a workload LIVE against an OpenAI-compatible server (an agentkv proxy,
vLLM, SGLang, Dynamo) and measure it: the live half of "traces are the
benchmark", next to "agentkv simulate", which replays the same workload
offline against simulated engines.

Closed-loop sessions send turn k+1 when turn k's reply has ended plus its
think/tool delay (divided by --speed); subagents run as concurrent child
sessions started after their parent's turn, and a turn waiting for subagents
waits for them; open-loop traces (Mooncake with timestamps) send each request
at its arrival time divided by --speed. At most --concurrency agent programs
run at once (open loop: requests in flight).

Prompts are synthesized from the trace's block hash ids: each id expands to
BlockTokens words derived from a seeded hash of the id, so equal ids at equal
positions give identical text and tokens, and the server's prefix cache sees
exactly the sharing the trace recorded. The words are one token each in the
OpenAI and Llama 3 tokenizers; with other tokenizers and chat templates the
count is approximate, and the server's own prompt_tokens is what is reported.
Requests stream (stream_options.include_usage), ask for max_tokens = the
turn's output length, and carry the session headers of --harness. --api
responses speaks OpenAI's Responses API as Codex does (with Codex's session
headers unless --harness says otherwise), --api messages Anthropic's
Messages API as Claude Code does (with its headers and anthropic-version);
usage and cached tokens are read from each API's own stream events.

At the end it prints requests, errors by kind (HTTP status, timeout,
malformed SSE, ...), throughput, TTFT and end-to-end p50/p99, and the prefix
cache hit rate as the server reported it (usage.prompt_tokens_details.
cached_tokens); a live progress line goes to a terminal. --trace-out writes
one request_end record per request (Dynamo's trace format, .gz or .zst
compressed by name), so the run is itself a capture that simulate and replay
read. Ctrl-C stops the run and prints the partial summary.

--workload reads any trace format the trace package reads (agentkv/Dynamo
request traces, Mooncake JSONL, Claude Code session files); without it the
built-in synthetic agentic workload is used.`,
		run: runReplay,
	})
}

// replaySignalContext is the run's context: cancelled by Ctrl-C / SIGTERM.
// Tests replace it.
var replaySignalContext = func() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// headerFlags collects repeated --header "Name: value" flags.
type headerFlags []string

func (h *headerFlags) String() string { return strings.Join(*h, ", ") }
func (h *headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want \"Name: value\", got %q", v)
	}
	*h = append(*h, strings.TrimSpace(name)+":"+strings.TrimSpace(value))
	return nil
}

type replayFlags struct {
	workloadFlags
	endpoint, model, api, harness, traceOut, prefix string
	concurrency, maxRequests                        int
	promptSeed                                      uint64
	speed                                           float64
	timeout                                         time.Duration
	ignoreEOS, progress, batch                      bool
	headers                                         headerFlags
}

func runReplay(env *cmdEnv, args []string) error {
	c := commands["replay"]
	fs := newFlags(env, c)
	var f replayFlags
	fs.StringVar(&f.endpoint, "endpoint", "", "server base URL, e.g. http://localhost:8000 (required)")
	fs.StringVar(&f.workload, "workload", "", "trace file to replay (default: the built-in synthetic agentic workload)")
	fs.StringVar(&f.format, "format", "auto", "trace format of --workload: auto, agentkv, dynamo, mooncake, claude-code")
	fs.IntVar(&f.sessions, "sessions", 16, "root sessions of the synthetic workload")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the synthetic workload and of --tile's jitter")
	fs.IntVar(&f.tile, "tile", 1, "replay this many copies of the workload's sessions, each with its own hash namespace")
	fs.StringVar(&f.model, "model", "", "model name (default: the first one GET /v1/models lists)")
	fs.StringVar(&f.api, "api", "chat", "chat (/v1/chat/completions), completions (/v1/completions), responses (/v1/responses, as Codex) or messages (/v1/messages, as Claude Code)")
	fs.StringVar(&f.harness, "harness", "", "session headers to send: claude-code, codex, opencode or dynamo (default: the API's harness: codex for responses, claude-code for messages, dynamo otherwise)")
	fs.IntVar(&f.concurrency, "concurrency", 16, "agent programs at once (open loop: requests in flight); 0 = no bound")
	fs.Float64Var(&f.speed, "speed", 1, "time compression: delays and arrivals are divided by this")
	fs.IntVar(&f.maxRequests, "max-requests", 0, "stop after sending this many requests (0 = the whole workload)")
	fs.StringVar(&f.traceOut, "trace-out", "", "write request_end records here (.jsonl, .jsonl.gz or .jsonl.zst)")
	fs.DurationVar(&f.timeout, "timeout", loadgen.DefaultTimeout, "per-request limit, from send to the end of the stream")
	fs.BoolVar(&f.ignoreEOS, "ignore-eos", true, `send "ignore_eos": true so outputs have the trace's length (vLLM, SGLang)`)
	fs.StringVar(&f.prefix, "session-prefix", "", "prefix of every session id sent, to keep runs against one server apart")
	fs.Uint64Var(&f.promptSeed, "prompt-seed", 0, "salt of the prompt text: another value shares no cache with earlier runs")
	fs.Var(&f.headers, "header", `extra request header "Name: value" (repeatable)`)
	fs.BoolVar(&f.progress, "progress", true, "show a live progress line when stderr is a terminal")
	fs.BoolVar(&f.batch, "batch", false, "an RL rollout step, as simulate --batch: the first --concurrency programs (0: all) offered at once, no refills; reports the makespan and program completion in trace time (wall × --speed)")
	if err := parseFlags(env, c, fs, args); err != nil {
		return err
	}
	cfg, err := replayConfig(fs, &f)
	if err != nil {
		return err
	}
	w, err := f.workloadFlags.load("replay")
	if err != nil {
		return err
	}
	var bt *batchTimeline
	if f.batch {
		bw, err := simrun.Batch(&w, f.concurrency, 0)
		if err != nil {
			return usagef("replay: --batch: %v", err)
		}
		w, cfg.Concurrency = *bw, 0 // every program of the step at once
		bt = newBatchTimeline(bw, f.prefix)
	}

	var tw *trace.Writer
	var traceFile *os.File
	var dropped int
	var dropMu sync.Mutex // guards dropped
	if f.traceOut != "" {
		if traceFile, tw, err = openTraceOut(f.traceOut); err != nil {
			return err
		}
		cfg.OnResult = func(r *loadgen.Result) {
			rec := r.Record()
			if err := tw.Write(&rec); err != nil {
				dropMu.Lock()
				dropped++
				dropMu.Unlock()
			}
		}
	}
	if bt != nil {
		cfg.OnResult = bt.wrap(cfg.OnResult)
	}
	runner, err := loadgen.New(cfg)
	if err != nil {
		return usagef("replay: %v", err)
	}
	sum, err := trace.Summarize(&w)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "replay %s: %d sessions (%d subagents), %d requests, %.0f input / %.0f output tokens per request, %s\n",
		w.Name, sum.Sessions+sum.Subagents, sum.Subagents, sum.Requests,
		sum.AvgInput(), sum.AvgOutput(), loopName(w.OpenLoop))
	fmt.Fprintf(env.stdout, "endpoint %s, harness %s, concurrency %s, speed ×%g\n",
		runner.URL(), cfg.Harness, concLabel(cfg.Concurrency), cfg.Speed)

	ctx, cancel := replaySignalContext()
	defer cancel()
	stopProgress := func() {}
	if f.progress && isTerminal(env.stderr) {
		stopProgress = startProgress(env.stderr, runner)
	}
	rep, runErr := runner.Run(ctx, &w)
	stopProgress()

	if tw != nil {
		cerr := tw.Close()
		if ferr := traceFile.Close(); cerr == nil {
			cerr = ferr
		}
		if cerr != nil && runErr == nil {
			runErr = fmt.Errorf("writing %s: %w", f.traceOut, cerr)
		}
	}
	if rep == nil {
		return runErr
	}
	fmt.Fprintf(env.stdout, "model %s\n\n", rep.Model)
	if err := rep.Summary.WriteText(env.stdout); err != nil {
		return err
	}
	if bt != nil {
		bt.writeText(env.stdout, cfg.Speed)
	}
	if tw != nil {
		st := tw.Stats()
		fmt.Fprintf(env.stdout, "trace       %s: %d records", f.traceOut, st.Written)
		if dropped > 0 || st.Lost > 0 {
			fmt.Fprintf(env.stdout, " (%d dropped, %d lost)", dropped, st.Lost)
		}
		fmt.Fprintln(env.stdout)
	}
	if errors.Is(runErr, context.Canceled) {
		return errors.New("interrupted: the summary above is partial")
	}
	if runErr != nil {
		return runErr
	}
	if s := rep.Summary; s.Requests > 0 && s.OK == 0 {
		return fmt.Errorf("every request failed (%s)", s.ErrorList())
	}
	return nil
}

func loopName(open bool) string {
	if open {
		return "open loop"
	}
	return "closed loop"
}

func replayConfig(fs *flag.FlagSet, f *replayFlags) (loadgen.Config, error) {
	var cfg loadgen.Config
	if fs.NArg() > 0 {
		return cfg, usagef("replay: unexpected argument %q", fs.Arg(0))
	}
	if f.endpoint == "" {
		return cfg, usagef("replay: --endpoint is required (e.g. --endpoint http://localhost:8000)")
	}
	api, err := loadgen.ParseAPI(f.api)
	if err != nil {
		return cfg, usagef("replay: --api: %v", err)
	}
	h := api.DefaultHarness()
	if f.harness != "" {
		if h, err = loadgen.ParseHarness(f.harness); err != nil {
			return cfg, usagef("replay: --harness: %v", err)
		}
	}
	switch {
	case !(f.speed > 0) || f.speed > 1e9:
		return cfg, usagef("replay: --speed must be positive, got %g", f.speed)
	case f.concurrency < 0:
		return cfg, usagef("replay: --concurrency must be ≥ 0, got %d", f.concurrency)
	case f.maxRequests < 0:
		return cfg, usagef("replay: --max-requests must be ≥ 0, got %d", f.maxRequests)
	case f.timeout <= 0:
		return cfg, usagef("replay: --timeout must be positive, got %v", f.timeout)
	case f.sessions < 1 || f.tile < 1:
		return cfg, usagef("replay: --sessions and --tile must be ≥ 1")
	}
	cfg = loadgen.Config{
		Endpoint: f.endpoint, API: api, Model: f.model, Harness: h, Concurrency: f.concurrency,
		Speed: f.speed, MaxRequests: f.maxRequests, Timeout: f.timeout, IgnoreEOS: f.ignoreEOS,
		Seed: f.promptSeed, SessionPrefix: f.prefix,
	}
	if len(f.headers) > 0 {
		cfg.Header = make(map[string][]string)
		for _, kv := range f.headers {
			k, v, _ := strings.Cut(kv, ":")
			cfg.Header.Add(k, v)
		}
	}
	if _, err := loadgen.New(cfg); err != nil {
		return cfg, usagef("replay: %v", err)
	}
	return cfg, nil
}

// openTraceOut creates path and a Writer compressing by its extension.
func openTraceOut(path string) (*os.File, *trace.Writer, error) {
	comp := trace.None
	switch {
	case strings.HasSuffix(path, ".gz"):
		comp = trace.Gzip
	case strings.HasSuffix(path, ".zst"):
		comp = trace.Zstd
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, err
		}
	}
	fh, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	tw, err := trace.NewWriter(trace.WriterConfig{Sink: fh, Compression: comp, QueueBytes: 64 << 20})
	if err != nil {
		fh.Close()
		return nil, nil, err
	}
	return fh, tw, nil
}

// startProgress redraws one status line on w every half second until the
// returned function is called.
func startProgress(w io.Writer, r *loadgen.Runner) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-t.C:
				fmt.Fprintf(w, "\r\033[K%s", progressLine(r.Progress()))
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func progressLine(p loadgen.Progress) string {
	secs := p.Elapsed.Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(p.OutputTokens) / secs
	}
	return fmt.Sprintf("[%s] %d/%d sent, %d done, %d errors, %d in flight, %d programs, %.0f output tok/s",
		p.Elapsed.Truncate(time.Second), p.Sent, p.Planned, p.Finished, p.Errors, p.InFlight, p.Programs, rate)
}
