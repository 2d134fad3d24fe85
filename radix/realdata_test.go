package radix

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/internal/shareddata"
)

type ccRequest struct {
	Type     string      `json:"type"`
	HashIDs  []uint64    `json:"hash_ids"`
	AgentID  string      `json:"agent_id"`
	Requests []ccRequest `json:"requests"`
}

// TestClaudeCodeTraces replays the real Claude Code sessions (root agents
// and their subagents) into the tree and the naive reference: every update
// must agree, every lineage must equal the request's chain, and the
// shared/unique split must match.
func TestClaudeCodeTraces(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(shareddata.Dir(t), "claude_code_traces", "trace_*.json"))
	if len(files) == 0 {
		t.Skip("no claude_code_traces in shared/data")
	}
	tr := mustRaw(t, Config{})
	ref := newRef(DefaultMaxSessions, DefaultMaxFrontiers)
	requests, subagents := 0, 0
	for fi, path := range files {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Requests []ccRequest `json:"requests"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		root := filepath.Base(path)
		send := func(session string, r ccRequest) {
			if len(r.HashIDs) == 0 {
				return
			}
			local := make([]uint64, len(r.HashIDs))
			for i, id := range r.HashIDs {
				local[i] = uint64(fi)<<40 | id // ids are local to one file
			}
			chain := flashindex.AppendSequenceHashes(nil, local)
			errT, errR := tr.UpdateFromMatch(session, chain), ref.update(session, chain)
			if errT != nil || errR != nil {
				t.Fatalf("%s: update: %v / ref %v", session, errT, errR)
			}
			got, _ := tr.Lineage(session, nil)
			if !slices.Equal(got, chain) {
				t.Fatalf("%s: lineage has %d blocks, request %d", session, len(got), len(chain))
			}
			if sh, _ := tr.Split(session); sh != ref.split(session) {
				t.Fatalf("%s: Split %+v, ref %+v", session, sh, ref.split(session))
			}
			requests++
		}
		for _, r := range doc.Requests {
			if r.Type == "subagent" {
				subagents++
				for _, sr := range r.Requests {
					send(root+"/"+r.AgentID, sr)
				}
				continue
			}
			send(root, r)
		}
		if err := tr.check(); err != nil {
			t.Fatalf("%s: %v", root, err)
		}
	}
	st := tr.Stats()
	if st.Blocks != len(ref.blocks()) || st.Nodes != ref.nodes() {
		t.Fatalf("stats %+v, ref blocks %d nodes %d", st, len(ref.blocks()), ref.nodes())
	}
	t.Logf("%d files, %d requests, %d subagents: %d sessions, %d frontiers, %d nodes, %d blocks, %d KiB",
		len(files), requests, subagents, st.Sessions, st.Frontiers, st.Nodes, st.Blocks, st.Bytes>>10)
	// trace_0277's subagents share their system prompt with each other.
	if slices.ContainsFunc(files, func(p string) bool { return filepath.Base(p) == "trace_0277.json" }) {
		sh, err := tr.Split("trace_0277.json/agent_002")
		if err != nil || sh.Shared == 0 {
			t.Fatalf("agent_002 shares nothing: %+v %v", sh, err)
		}
		t.Logf("trace_0277 agent_002: %+v", sh)
	}
}
