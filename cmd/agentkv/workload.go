package main

import (
	"fmt"
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
}

// load reads --workload (any format the trace package reads) or builds the
// synthetic workload, then tiles it. cmd names the command in usage errors.
func (f *workloadFlags) load(cmd string) (trace.Workload, error) {
	var w trace.Workload
	if f.workload == "" {
		sc := trace.DefaultSyntheticConfig()
		sc.Sessions, sc.Seed = f.sessions, f.seed
		w = trace.Synthetic(sc)
	} else {
		format, err := trace.ParseFormat(f.format)
		if err != nil {
			return w, usagef("%s: %v", cmd, err)
		}
		if w, err = trace.ReadFile(f.workload, trace.ReadOptions{Format: format}); err != nil {
			return w, err
		}
	}
	if f.tile > 1 {
		tiled, err := trace.Tile(&w, trace.TileConfig{Copies: f.tile, Stagger: time.Second, Seed: f.seed})
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
