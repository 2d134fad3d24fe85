package main

import (
	"container/list"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/agentkv/agentkv/flashindex"
)

// fakeEngine is an in-process stand-in for a vLLM server, enough for a
// rollout driver: /metrics reports its KV cache (vllm:cache_config_info)
// and /v1/completions takes token-id prompts, generates max_tokens token
// ids (return_token_ids), and reports usage with the prompt tokens its
// prefix cache held. The cache is a least-recently-used set of block hashes
// bounded by the KV capacity, so when too many programs run at once their
// prefixes evict each other, as they would in a real engine. It has no
// batching model: a request takes PerToken per token it computes.
type fakeEngine struct {
	blockSize, blocks int
	perToken          time.Duration
	hasher            *flashindex.Hasher

	mu  sync.Mutex // guards lru and pos
	lru *list.List // of uint64 sequence hashes, most recent first
	pos map[uint64]*list.Element
}

func newFakeEngine(blockSize, blocks int, perToken time.Duration) (*fakeEngine, error) {
	h, err := flashindex.NewHasher(blockSize, "")
	if err != nil {
		return nil, err
	}
	return &fakeEngine{blockSize: blockSize, blocks: blocks, perToken: perToken, hasher: h,
		lru: list.New(), pos: map[uint64]*list.Element{}}, nil
}

// completionRequest is the part of vLLM's CompletionRequest the fake reads.
type completionRequest struct {
	Prompt    []uint32 `json:"prompt"`
	MaxTokens int      `json:"max_tokens"`
}

func (e *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		return
	case "/metrics":
		fmt.Fprintf(w, "vllm:cache_config_info{block_size=\"%d\",engine=\"0\",num_gpu_blocks=\"%d\"} 1.0\n", e.blockSize, e.blocks)
	case "/v1/completions":
		var req completionRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Prompt) == 0 || req.MaxTokens < 1 {
			http.Error(w, `{"error":{"message":"want a token-id prompt and max_tokens"}}`, http.StatusBadRequest)
			return
		}
		out := make([]uint32, req.MaxTokens)
		for i := range out {
			out[i] = uint32(len(req.Prompt)*31+i*7) % 50000
		}
		cached := e.serve(req.Prompt, out)
		if d := e.perToken * time.Duration(len(req.Prompt)-cached+len(out)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"object":  "text_completion",
			"choices": []map[string]any{{"index": 0, "text": "", "token_ids": out, "finish_reason": "length"}},
			"usage": map[string]any{"prompt_tokens": len(req.Prompt), "completion_tokens": len(out),
				"prompt_tokens_details": map[string]int{"cached_tokens": cached}},
		})
	default:
		http.NotFound(w, r)
	}
}

// serve looks the prompt up in the prefix cache, then caches the full blocks
// of prompt and output, evicting the least recently used beyond capacity.
// It returns the prompt tokens found cached (at least one token is always
// computed, as in vLLM).
func (e *fakeEngine) serve(prompt, out []uint32) int {
	all := append(append(make([]uint32, 0, len(prompt)+len(out)), prompt...), out...)
	_, seq := e.hasher.AppendHashes(nil, nil, all, 0, false)
	promptBlocks := len(prompt) / e.blockSize
	e.mu.Lock()
	defer e.mu.Unlock()
	hit := 0
	for hit < promptBlocks && e.pos[seq[hit]] != nil {
		hit++
	}
	for _, h := range seq {
		if el := e.pos[h]; el != nil {
			e.lru.MoveToFront(el)
			continue
		}
		e.pos[h] = e.lru.PushFront(h)
		if e.lru.Len() > e.blocks {
			old := e.lru.Remove(e.lru.Back()).(uint64)
			delete(e.pos, old)
		}
	}
	return min(hit*e.blockSize, len(prompt)-1)
}
