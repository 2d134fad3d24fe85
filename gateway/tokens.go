package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentkv/agentkv/engine/vllm"
)

// tokens returns the prompt's token ids for routing, from the first
// source that answers: a worker's in-process Tokenizer (chat shapes; one
// that a check found wrong is skipped, see checkTokens), a routable
// worker's /tokenize (the one that answered last is tried first), or the
// documented approximation (vllm.ApproxTokens of vllm.PromptText) when no
// worker can tokenize. Every API is tokenized through its chat translation,
// as the engine's chat template will see it. err is non-nil only for a
// body no worker could take.
func (g *Gateway) tokens(ctx context.Context, c *call) ([]uint32, error) {
	path := vllm.ChatPath
	if c.api == Completions {
		path = vllm.CompletionPath
	}
	api := c.api.String()
	if path == vllm.ChatPath {
		for _, wk := range g.order {
			if wk.Tokenizer == nil || wk.tok.off.Load() {
				continue
			}
			if t, err := wk.Tokenizer.TokenizeChat(c.chatB); err == nil {
				g.m.tokenize.WithLabelValues(api, "inprocess").Inc()
				g.checkTokens(wk, c.chatB, t)
				return t, nil
			}
		}
	}
	n := uint64(len(g.order))
	first := g.tokIdx.Load()
	// Routable workers only (a dead or black-holed one would cost a
	// TokenizeTimeout each). With none routable yet (at start, before the
	// first probes answer) wait for one, then, if still none, try them all.
	g.awaitRoutable(ctx, c)
	anyRoutable := g.tracker.Ready()
	for i := uint64(0); i < n; i++ {
		k := (first + i) % n
		if anyRoutable && !g.tracker.Routable(g.order[k].ID) {
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, g.cfg.TokenizeTimeout)
		toks, err := g.order[k].client.Tokenize(tctx, path, c.chatB)
		cancel()
		if err == nil {
			if k != first {
				g.tokIdx.Store(k)
			}
			g.m.tokenize.WithLabelValues(api, "tokenize").Inc()
			return toks, nil
		}
		var se *vllm.StatusError
		if errors.Is(err, vllm.ErrUnsupportedPrompt) || ctx.Err() != nil ||
			(errors.As(err, &se) && se.Code/100 == 4 && se.Code != http.StatusNotFound) {
			break // another worker would refuse it too
		}
	}
	text, err := vllm.PromptText(path, c.chatB)
	if err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, badRequest("cannot read the prompt: field %q holds a JSON %s", te.Field, te.Value)
		}
		return nil, fmt.Errorf("%w: cannot read the prompt: %v", ErrBadRequest, err)
	}
	g.m.tokenize.WithLabelValues(api, "approximate").Inc()
	return vllm.ApproxTokens(nil, text), nil
}
