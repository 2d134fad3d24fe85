package gateway

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/agentkv/agentkv/engine/vllm"
)

// DefaultTokenizerCheckEvery is how often, by default, an in-process
// tokenization is checked against the worker's own /tokenize.
const DefaultTokenizerCheckEvery = 100

// tokCheck is a worker's in-process tokenizer audit: the first in-process
// tokenization and every Config.TokenizerCheckEvery-th after it are sent
// to the worker's /tokenize in the background (one at a time per worker,
// off the request path); the first mismatch turns the in-process
// tokenizer off for that worker, since its template, tokenizer version or
// vLLM's message conversion differ from the engine's, and routing falls
// back to /tokenize.
type tokCheck struct {
	n        atomic.Uint64 // in-process tokenizations so far
	checking atomic.Bool   // a check is in flight
	off      atomic.Bool   // a check found a mismatch
}

// checkTokens starts a background check of an in-process tokenization of
// body when one is due.
func (g *Gateway) checkTokens(wk *worker, body []byte, got []uint32) {
	every := uint64(g.cfg.TokenizerCheckEvery)
	if g.cfg.TokenizerCheckEvery < 0 || (wk.tok.n.Add(1)-1)%every != 0 || !wk.tok.checking.CompareAndSwap(false, true) {
		return
	}
	// body is not copied: request bodies are never modified in place
	// (BufferedBody's, and every splice makes a new slice).
	got = slices.Clone(got)
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		defer wk.tok.checking.Store(false)
		ctx, cancel := context.WithTimeout(g.bgCtx, g.cfg.TokenizeTimeout)
		defer cancel()
		want, err := wk.client.Tokenize(ctx, vllm.ChatPath, body)
		switch {
		case err != nil:
			g.m.tokenizerChecks.WithLabelValues("error").Inc()
			g.log.Debug("gateway: tokenizer check: the worker's /tokenize failed", "worker", wk.ID, "err", err)
		case slices.Equal(want, got):
			g.m.tokenizerChecks.WithLabelValues("match").Inc()
		default:
			g.m.tokenizerChecks.WithLabelValues("mismatch").Inc()
			wk.tok.off.Store(true)
			k := 0
			for k < len(want) && k < len(got) && want[k] == got[k] {
				k++
			}
			g.log.Warn("gateway: the in-process tokenizer disagrees with the worker's /tokenize; routing asks /tokenize from now on",
				"worker", wk.ID, "url", wk.URL, "inprocess_tokens", len(got), "worker_tokens", len(want), "first_difference", k)
		}
	}()
}

// background holds the gateway's background work: tokenizer checks.
type background struct {
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc
}
