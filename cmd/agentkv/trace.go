package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/trace"
)

func init() {
	register(&command{
		name:    "trace",
		summary: "inspect and convert request traces (Mooncake, Claude Code, Dynamo)",
		usage:   "inspect|convert [flags] FILE...",
		help: `
Work with request traces: the content-free request_end records agentkv and
NVIDIA Dynamo write (dynamo.request.trace.v1 JSONL, optionally .gz or .zst),
Mooncake / AIPerf JSONL, and Claude Code session traces (kv-cache-tester
format). The format is detected from the content unless --format says.

  agentkv trace inspect [--format F] [--block-tokens N] [--json]
          [--infer-sessions] FILE...
      Print, per file (and in total for several), sessions and subagents,
      requests, tokens, the infinite-cache prefix hit ceiling, the tool-gap
      and user-gap distributions and subagent fan-out. Several Dynamo shards
      are read as one capture. --infer-sessions instead infers every
      request's session from its blocks alone (files merged, each its own
      client) and prints pairwise precision and recall against the true
      sessions and the share of parent links right.

  agentkv trace convert --to mooncake|perfetto [-o OUT] [--copies N
          --stagger D] FILE...
      Write the trace(s) as Mooncake JSONL (session_id, timestamp, delay;
      for AIPerf and Dynamo replay) or as a Chrome Trace Event timeline for
      Perfetto (ui.perfetto.dev): one track per session and subagent with
      prefill, decode, tool and paused spans. Dynamo traces are drawn from
      their recorded timings; other formats from a nominal uncontended
      engine (--prefill-rate, --decode-rate). --copies tiles the workload
      into N copies with distinct hash namespaces, starting --stagger apart.

FILE "-" reads standard input.`,
		run: runTrace,
	})
}

func runTrace(env *cmdEnv, args []string) error {
	c := commands["trace"]
	if len(args) == 0 {
		return usagef("trace: want a subcommand: inspect or convert")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printCommandHelp(env.stdout, c, nil)
		return errHelpShown
	case "inspect":
		return runTraceInspect(env, c, args[1:])
	case "convert":
		return runTraceConvert(env, c, args[1:])
	}
	return usagef("trace: unknown subcommand %q (want inspect or convert)", args[0])
}

// traceInput is one input file, read.
type traceInput struct {
	name   string
	format trace.Format
	w      trace.Workload
}

// readInputs reads files; several Dynamo files are one capture.
func readInputs(env *cmdEnv, files []string, format trace.Format, blockTokens int) ([]traceInput, error) {
	var out []traceInput
	var dynFiles []string
	for _, f := range files {
		fm := format
		if fm == trace.FormatAuto && f != "-" {
			var err error
			if fm, err = detectFile(f); err != nil {
				return nil, err
			}
		}
		if fm == trace.FormatDynamo && f != "-" {
			dynFiles = append(dynFiles, f)
			continue
		}
		var w trace.Workload
		var err error
		if f == "-" {
			// Streamed like a file, with the same bounds (MaxLineBytes,
			// the decompression caps), never read whole into memory.
			w, fm, err = trace.ReadDetect(env.stdin, "stdin", trace.ReadOptions{Format: fm, MooncakeBlockTokens: blockTokens})
			if errors.Is(err, trace.ErrFormat) && format == trace.FormatAuto {
				err = fmt.Errorf("%w (use --format)", err)
			}
		} else {
			w, err = trace.ReadFile(f, trace.ReadOptions{Format: fm, MooncakeBlockTokens: blockTokens})
		}
		if err != nil {
			return nil, err
		}
		out = append(out, traceInput{name: w.Name, format: fm, w: w})
	}
	if len(dynFiles) > 0 {
		w, err := trace.ReadDynamoFiles(dynFiles...)
		if err != nil {
			return nil, err
		}
		out = append(out, traceInput{name: w.Name, format: trace.FormatDynamo, w: w})
	}
	return out, nil
}

func detectFile(path string) (trace.Format, error) {
	f, err := os.Open(path)
	if err != nil {
		return trace.FormatAuto, err
	}
	defer f.Close()
	br, closeFn, err := trace.Decompress(f)
	if err != nil {
		return trace.FormatAuto, fmt.Errorf("%s: %v", path, err)
	}
	defer closeFn()
	head, _ := br.Peek(4096)
	fm, err := trace.DetectFormat(head)
	if err != nil {
		return trace.FormatAuto, fmt.Errorf("%s: %v (use --format)", path, err)
	}
	return fm, nil
}

func traceFlags(env *cmdEnv, c *command) (*flag.FlagSet, *string, *int) {
	fs := newFlags(env, c)
	format := fs.String("format", "auto", "input format: auto, mooncake, claude or dynamo")
	block := fs.Int("block-tokens", 0, "tokens per Mooncake hash id (default 512)")
	return fs, format, block
}

func runTraceInspect(env *cmdEnv, c *command, args []string) error {
	fs, formatName, block := traceFlags(env, c)
	asJSON := fs.Bool("json", false, "print the summaries as JSON")
	infer := fs.Bool("infer-sessions", false, "also infer sessions from the blocks with every session id removed, and score them against the true ones")
	if err := parseFlags(env, c, fs, args); err != nil {
		return err
	}
	format, err := trace.ParseFormat(*formatName)
	if err != nil {
		return usagef("trace inspect: %v", err)
	}
	if fs.NArg() == 0 {
		return usagef("trace inspect: want at least one FILE")
	}
	if *block < 0 {
		return usagef("trace inspect: --block-tokens must not be negative")
	}
	ins, err := readInputs(env, fs.Args(), format, *block)
	if err != nil {
		return err
	}
	var sums []trace.Summary
	var labels []string
	for _, in := range ins {
		s, err := trace.Summarize(&in.w)
		if err != nil {
			return fmt.Errorf("%s: %v", in.name, err)
		}
		sums = append(sums, s)
		labels = append(labels, in.format.String())
	}
	if len(ins) > 1 {
		ws := make([]trace.Workload, len(ins))
		for i := range ins {
			ws[i] = ins[i].w
		}
		if m, err := trace.Merge("TOTAL", ws...); err == nil {
			if s, err := trace.Summarize(&m); err == nil {
				sums = append(sums, s)
				labels = append(labels, "merged, each file in its own hash namespace")
			}
		} else {
			fmt.Fprintf(env.stderr, "agentkv trace inspect: no total: %v\n", err)
		}
	}
	if *infer {
		return printInference(env, ins, *asJSON)
	}
	if *asJSON {
		out := make([]jsonSummary, len(sums))
		for i, s := range sums {
			out[i] = toJSONSummary(s, labels[i])
		}
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for i, s := range sums {
		if i > 0 {
			fmt.Fprintln(env.stdout)
		}
		printSummary(env.stdout, s, labels[i])
	}
	return nil
}

// printInference infers the sessions of the inputs (merged, each file in
// its own hash namespace and client scope) and prints the scores, with
// and without scope parents.
func printInference(env *cmdEnv, ins []traceInput, asJSON bool) error {
	ws := make([]trace.Workload, len(ins))
	for i := range ins {
		ws[i] = ins[i].w
	}
	w := ws[0]
	if len(ws) > 1 {
		var err error
		if w, err = trace.Merge("TOTAL", ws...); err != nil {
			return err
		}
	}
	type row struct {
		Config string
		agentkv.InferEval
	}
	var rows []row
	for _, sp := range []bool{true, false} {
		ev, err := agentkv.EvalInference(&w, agentkv.InferConfig{ScopeParent: sp})
		if err != nil {
			return err
		}
		name := "scope parents"
		if !sp {
			name = "fork parents only"
		}
		rows = append(rows, row{name, ev})
	}
	if asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	fmt.Fprintf(env.stdout, "inferred sessions, %s (%d-token blocks), every session id removed:\n", w.Name, w.BlockTokens)
	for _, r := range rows {
		fmt.Fprintf(env.stdout, "  %-17s %v\n", r.Config+":", r.InferEval)
	}
	return nil
}

type jsonDist struct {
	N                             int
	MeanS, P50S, P90S, P99S, MaxS float64
}

type jsonSummary struct {
	Name                string
	Format              string
	OpenLoop            bool
	BlockTokens         int
	Sessions, Subagents int
	Requests            int
	InputTokens         int64
	OutputTokens        int64
	AvgInput, AvgOutput float64
	CeilingBlocks       float64
	CeilingTokens       float64
	ToolGaps, UserGaps  jsonDist
	OtherGaps           jsonDist
	SubagentsMax        int
	FanOutMax           int
	RootsWithSubagents  int
	SpanS               float64
}

func toJSONDist(d trace.Dist) jsonDist {
	return jsonDist{N: d.N, MeanS: d.Mean.Seconds(), P50S: d.P50.Seconds(), P90S: d.P90.Seconds(),
		P99S: d.P99.Seconds(), MaxS: d.Max.Seconds()}
}

func toJSONSummary(s trace.Summary, format string) jsonSummary {
	return jsonSummary{
		Name: s.Name, Format: format, OpenLoop: s.OpenLoop, BlockTokens: s.BlockTokens,
		Sessions: s.Sessions, Subagents: s.Subagents, Requests: s.Requests,
		InputTokens: s.InputTokens, OutputTokens: s.OutputTokens,
		AvgInput: s.AvgInput(), AvgOutput: s.AvgOutput(),
		CeilingBlocks: s.Ceiling.BlockRatio(), CeilingTokens: s.Ceiling.TokenRatio(),
		ToolGaps: toJSONDist(s.ToolGaps), UserGaps: toJSONDist(s.UserGaps), OtherGaps: toJSONDist(s.OtherGaps),
		SubagentsMax: s.SubagentsMax, FanOutMax: s.FanOutMax, RootsWithSubagents: s.RootsWithSubagents,
		SpanS: s.Span.Seconds(),
	}
}

func printSummary(w io.Writer, s trace.Summary, format string) {
	loop := "closed-loop"
	if s.OpenLoop {
		loop = "open-loop"
	}
	fmt.Fprintf(w, "%s (%s, %s, %d-token blocks)\n", s.Name, format, loop, s.BlockTokens)
	fmt.Fprintf(w, "  sessions       %s root, %s subagents", group(int64(s.Sessions)), group(int64(s.Subagents)))
	if s.Subagents > 0 {
		fmt.Fprintf(w, " (%d roots with subagents, at most %d under one root, fan-out up to %d)",
			s.RootsWithSubagents, s.SubagentsMax, s.FanOutMax)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  requests       %s\n", group(int64(s.Requests)))
	fmt.Fprintf(w, "  input tokens   %s (avg %s)\n", group(s.InputTokens), group(int64(s.AvgInput()+0.5)))
	fmt.Fprintf(w, "  output tokens  %s (avg %s)\n", group(s.OutputTokens), group(int64(s.AvgOutput()+0.5)))
	fmt.Fprintf(w, "  cache ceiling  %.1f%% of blocks, %.1f%% of tokens (infinite prefix cache)\n",
		100*s.Ceiling.BlockRatio(), 100*s.Ceiling.TokenRatio())
	printDist(w, "tool gaps", s.ToolGaps)
	printDist(w, "user gaps", s.UserGaps)
	printDist(w, "other gaps", s.OtherGaps)
	fmt.Fprintf(w, "  span           %s\n", s.Span.Round(time.Millisecond))
}

func printDist(w io.Writer, name string, d trace.Dist) {
	if d.N == 0 {
		return
	}
	r := func(x time.Duration) time.Duration { return x.Round(10 * time.Millisecond) }
	fmt.Fprintf(w, "  %-14s n=%d  p50 %s  p90 %s  p99 %s  max %s  mean %s\n", name, d.N,
		r(d.P50), r(d.P90), r(d.P99), r(d.Max), r(d.Mean))
}

// group formats n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func runTraceConvert(env *cmdEnv, c *command, args []string) error {
	fs, formatName, block := traceFlags(env, c)
	to := fs.String("to", "", "output format: mooncake or perfetto (required)")
	outPath := fs.String("o", "-", "output file (- for standard output)")
	copies := fs.Int("copies", 1, "tile the workload into this many copies with distinct hash namespaces")
	stagger := fs.Duration("stagger", 0, "start offset between tiled copies")
	prefill := fs.Float64("prefill-rate", 0, "nominal prefill tokens/s for timelines of untimed traces (default 20000)")
	decode := fs.Float64("decode-rate", 0, "nominal decode tokens/s for timelines of untimed traces (default 50)")
	if err := parseFlags(env, c, fs, args); err != nil {
		return err
	}
	format, err := trace.ParseFormat(*formatName)
	if err != nil {
		return usagef("trace convert: %v", err)
	}
	if *to != "mooncake" && *to != "perfetto" {
		return usagef("trace convert: --to must be mooncake or perfetto, got %q", *to)
	}
	if fs.NArg() == 0 {
		return usagef("trace convert: want at least one FILE")
	}
	if *copies < 1 || *stagger < 0 || *block < 0 || *prefill < 0 || *decode < 0 {
		return usagef("trace convert: --copies must be >= 1 and the other numbers not negative")
	}
	ins, err := readInputs(env, fs.Args(), format, *block)
	if err != nil {
		return err
	}
	var w trace.Workload
	if len(ins) == 1 {
		w = ins[0].w
	} else {
		ws := make([]trace.Workload, len(ins))
		for i := range ins {
			ws[i] = ins[i].w
		}
		if w, err = trace.Merge("merged", ws...); err != nil {
			return err
		}
	}
	if *copies > 1 {
		if w, err = trace.Tile(&w, trace.TileConfig{Copies: *copies, Stagger: *stagger}); err != nil {
			return err
		}
	}
	out := env.stdout
	if *outPath != "-" {
		f, err := os.Create(*outPath)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	switch *to {
	case "mooncake":
		err = trace.WriteMooncake(out, &w)
	case "perfetto":
		var spans []trace.Span
		if len(ins) == 1 && ins[0].format == trace.FormatDynamo && *copies == 1 && fs.Arg(0) != "-" {
			recs, rerr := trace.ReadRecordFiles(fs.Args()...)
			if rerr != nil {
				return rerr
			}
			spans = trace.RecordSpans(recs)
		} else {
			p, serr := trace.Schedule(&w, trace.TimingModel{PrefillTokensPerSec: *prefill, DecodeTokensPerSec: *decode})
			if serr != nil {
				return serr
			}
			spans = trace.PlanSpans(&w, p)
		}
		err = trace.WriteChromeTrace(out, spans)
	}
	if err != nil {
		return err
	}
	if f, ok := out.(*os.File); ok && f != os.Stdout {
		return f.Close()
	}
	return nil
}
