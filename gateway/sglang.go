package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/agentkv/agentkv/engine/sglang"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
)

// This file wires SGLang workers ("engine=sglang" in a worker spec): their
// KV events in SGLang's wire shape (engine/sglang), their KV capacity from
// sglang:max_total_num_tokens, and the block names their hints carry.
//
// SGLang names a block by the first 16 hex digits of its SHA-256 digest as
// a signed int64; the router indexes it by its own XXH3 sequence hash of
// the event's token ids. A hint naming the router's hashes would cover
// nothing on SGLang, so every envelope for an SGLang worker passes through
// sglangHints, which rewrites explicit block targets into the names the
// engine published (a per-worker sglang.Names, fed by the worker's events
// before the index), and marks the envelope SignedHashes. A vLLM worker's
// hints keep the router's hashes, which are vLLM's own (Dynamo-compatible
// hashing).

// Engine is the kind of engine a worker runs ("engine=" in a worker spec).
type Engine uint8

const (
	// EngineVLLM is vLLM or a vLLM-compatible server (the zero value):
	// vLLM's KV event shape, vllm:cache_config_info, the router's block
	// hashes in hints.
	EngineVLLM Engine = iota
	// EngineSGLang is SGLang: its KV event shape and topic epoch, its
	// sglang:max_total_num_tokens capacity (vLLM's metric as a fallback),
	// and its SHA-256 block names in hints.
	EngineSGLang
)

func (e Engine) String() string {
	switch e {
	case EngineVLLM:
		return "vllm"
	case EngineSGLang:
		return "sglang"
	}
	return fmt.Sprintf("engine(%d)", uint8(e))
}

// ParseEngine parses "vllm" (or "") and "sglang".
func ParseEngine(s string) (Engine, error) {
	switch strings.TrimSpace(s) {
	case "vllm", "":
		return EngineVLLM, nil
	case "sglang":
		return EngineSGLang, nil
	}
	return EngineVLLM, fmt.Errorf("%w: engine=%q (want vllm or sglang)", ErrConfig, s)
}

// eventsConfig is the KV event subscription of worker w: the engine's
// wire shape, and for SGLang a sink that records the block names before
// the router indexes the event.
func (s *Stack) eventsConfig(w *stackWorker) *vllm.Config {
	spec := w.spec
	// With tenants, blocks carry their cache salt as an extra key (vLLM's
	// cache_salt), and the index must mix it in as the router does
	// (Request.CacheSalt).
	// With a replay socket, the first batch seen replays the engine's
	// buffer from its start (CatchUp): what the engine stored before the
	// subscription reached its PUB socket (a gateway joining a running
	// engine, or the engine's first batches racing the subscription) is
	// indexed too, instead of every later block of those chains being
	// dropped for an unknown parent.
	c := &vllm.Config{Endpoint: spec.Events, ReplayEndpoint: spec.Replay, Sink: s.sink, Logger: s.log,
		CatchUp: spec.Replay != "", Decode: vllm.DecodeOptions{ExtraKeys: s.cfg.Gateway.Keys != nil}}
	if spec.Engine != EngineSGLang {
		return c
	}
	c.Decode = sglang.DecodeOptions(c.Decode)
	c.Epoch = sglang.Epoch
	c.Sink = vllm.SinkFunc(func(ev *flashindex.Event) error {
		if n := w.names.Load(); n != nil {
			if err := n.Apply(ev); err != nil {
				s.log.Debug("gateway: sglang block names", "worker", spec.URL, "err", err)
			}
		}
		return s.router.ApplyEvent(ev)
	})
	return c
}

// sglangCapacity reads an SGLang worker's KV capacity and page size into
// wc from /metrics (sglang:max_total_num_tokens, sglang:page_size). A
// server that exports neither is left to vllm.NewWorker (a vLLM-compatible
// server, such as the mock worker); a page size that disagrees with the
// router's block size is vllm.ErrBlockSizeMismatch.
func (s *Stack) sglangCapacity(ctx context.Context, wc *vllm.WorkerConfig) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(wc.URL, "/")+"/metrics", nil)
	if err != nil {
		return err
	}
	c := wc.HTTPClient
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sglang: /metrics answered %s", resp.Status)
	}
	cp, err := sglang.ParseCapacity(resp.Body)
	if err != nil {
		return nil // not SGLang's metrics: vLLM's are read instead
	}
	bs := cp.PageSize
	switch {
	case bs == 0 && wc.BlockSize == 0:
		return nil // no page size: vLLM's metric may say; else NewWorker fails
	case bs == 0:
		bs = wc.BlockSize
	case wc.BlockSize != 0 && wc.BlockSize != bs:
		return fmt.Errorf("%w: configured %d, engine page size %d", vllm.ErrBlockSizeMismatch, wc.BlockSize, bs)
	}
	wc.BlockSize, wc.KVCapacityTokens = bs, cp.Tokens
	return nil
}

// setNames gives an SGLang worker connected with block size bs a fresh
// name map (its events start after this, on join).
func (w *stackWorker) setNames(bs int) error {
	if w.spec.Engine != EngineSGLang {
		return nil
	}
	n, err := sglang.NewNames(bs)
	if err != nil {
		return err
	}
	w.names.Store(n)
	return nil
}

// sglangHints is an SGLang worker's hint sink: it rewrites each action's
// explicit blocks into SGLang's names and passes the envelope on, marked
// SignedHashes. A share action's blocks are named by the receiver's map or
// by a source's (SGLang names are content-derived: the same on every
// SGLang worker). An action none of them can name is dropped (counted),
// as are the blocks past the first one unnamed.
type sglangHints struct {
	self  *atomic.Pointer[sglang.Names]
	peer  func(kvhint.WorkerID) *sglang.Names // nil for a vLLM or unknown worker
	inner kvhint.Sink

	dropped atomic.Uint64 // actions no map could name
}

// Send implements kvhint.Sink.
func (h *sglangHints) Send(ctx context.Context, env *kvhint.Envelope) error {
	out := *env
	out.SignedHashes = true
	out.Actions = make([]kvhint.Action, 0, len(env.Actions))
	for _, a := range env.Actions {
		if len(a.Target.Blocks) > 0 {
			eng := h.name(&a)
			if len(eng) == 0 {
				h.dropped.Add(1)
				continue
			}
			a.Target.Blocks = eng
			if a.Kind == kvhint.KindShare {
				a.Sources = clipSources(a.Sources, len(eng))
			}
		}
		out.Actions = append(out.Actions, a)
	}
	if len(out.Actions) == 0 {
		return nil
	}
	return h.inner.Send(ctx, &out)
}

// name returns SGLang's names of a's leading blocks, from the map that
// names the most of them.
func (h *sglangHints) name(a *kvhint.Action) []uint64 {
	var best []uint64
	try := func(n *sglang.Names) {
		if n == nil {
			return
		}
		if eng, k := n.EngineHashes(nil, a.Target.Blocks); k > len(best) {
			best = eng
		}
	}
	try(h.self.Load())
	if a.Kind == kvhint.KindShare && len(best) < len(a.Target.Blocks) && h.peer != nil {
		for _, src := range a.Sources {
			try(h.peer(src.Worker))
		}
	}
	return best
}

// clipSources returns srcs with each source's leading-block count cut to n
// blocks (a copy: the policy's slice may be shared); 0 (all) stays.
func clipSources(srcs []kvhint.Source, n int) []kvhint.Source {
	out := append([]kvhint.Source(nil), srcs...)
	for i := range out {
		if int(out[i].Blocks) > n {
			out[i].Blocks = uint32(n)
		}
	}
	return out
}

// sglangNames is worker id's block-name map, or nil for a vLLM or unknown
// worker (sglangHints' peer lookup).
func (s *Stack) sglangNames(id kvhint.WorkerID) *sglang.Names {
	if w := s.worker(id.ID); w != nil {
		return w.names.Load()
	}
	return nil
}
