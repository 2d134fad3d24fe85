package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentkv/agentkv/trace"
)

// workloadFlags are the workload flags simulate and replay share.
type workloadFlags struct {
	workload string
	format   string
	sessions int
	seed     uint64
	tile     int
	// tileShared is the prompt prefix, in tokens, that tiled copies of a
	// session share (the system prompt and tool definitions a fleet of
	// the same agent sends); 0 shares nothing.
	tileShared int
	// synthetic names the built-in workload's shape: "" or "claude-code"
	// (the default, fitted to Claude Code sessions) or "swe-bench".
	synthetic string
}

// load reads --workload (any format the trace package reads) or builds the
// synthetic workload, then tiles it. cmd names the command in usage errors.
func (f *workloadFlags) load(cmd string) (trace.Workload, error) {
	var w trace.Workload
	if f.workload == "" {
		var sc trace.SyntheticConfig
		switch f.synthetic {
		case "", "claude-code":
			sc = trace.DefaultSyntheticConfig()
		case "swe-bench":
			sc = trace.SWEBenchSyntheticConfig()
		default:
			return w, usagef("%s: unknown --synthetic %q (want claude-code or swe-bench)", cmd, f.synthetic)
		}
		sc.Sessions, sc.Seed = f.sessions, f.seed
		w = trace.Synthetic(sc)
		if f.synthetic == "swe-bench" {
			w.Name = "synthetic-swe-bench"
		}
	} else {
		format, err := trace.ParseFormat(f.format)
		if err != nil {
			return w, usagef("%s: %v", cmd, err)
		}
		if w, err = readWorkload(f.workload, format); err != nil {
			return w, err
		}
	}
	if f.tile > 1 {
		shared := 0
		if f.tileShared > 0 {
			bt := w.BlockTokens
			if bt <= 0 {
				bt = 1
			}
			shared = f.tileShared / bt
		}
		tiled, err := trace.Tile(&w, trace.TileConfig{Copies: f.tile, Stagger: time.Second, Seed: f.seed, SharedPrefixBlocks: shared})
		if err != nil {
			return w, err
		}
		w = tiled
	}
	if len(w.Sessions) == 0 {
		return w, fmt.Errorf("%s holds no requests", w.Name)
	}
	return w, nil
}

// readWorkload reads a trace file, or every regular file of a directory
// with a trace name (.json, .jsonl, .gz, .zst: a folder of Claude Code
// sessions, say) merged into one workload, each
// file's hash ids in a namespace of its own (trace.Merge).
func readWorkload(path string, format trace.Format) (trace.Workload, error) {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return trace.ReadFile(path, trace.ReadOptions{Format: format})
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return trace.Workload{}, err
	}
	var ws []trace.Workload
	for _, e := range ents {
		switch filepath.Ext(e.Name()) {
		case ".json", ".jsonl", ".gz", ".zst":
		default:
			continue // README, LICENSE, ...
		}
		if !e.Type().IsRegular() {
			continue
		}
		w, err := trace.ReadFile(filepath.Join(path, e.Name()), trace.ReadOptions{Format: format})
		if err != nil {
			return trace.Workload{}, err
		}
		ws = append(ws, w)
	}
	if len(ws) == 0 {
		return trace.Workload{}, fmt.Errorf("%s: no trace files", path)
	}
	// os.ReadDir sorts by name: the merge is deterministic.
	return trace.Merge(filepath.Base(path), ws...)
}
