package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentkv/agentkv/gateway"
	"github.com/agentkv/agentkv/hftok"
	"github.com/agentkv/agentkv/internal/apiwire"
)

// The proxy tokenizes in process by default (issue #36): for each --worker
// with no --tokenizer, it asks the worker which model it serves
// (GET /v1/models: vLLM's root, the path or hub id it loaded, then the
// served name) and looks that model up in the Hugging Face hub cache
// (hftok.CachedModelDir). Until the tokenizer has loaded, or where there is
// none, the gateway uses the worker's /tokenize; the log says which path
// each worker uses and why.

// errTokenizerNotReady makes the gateway fall back to /tokenize.
var errTokenizerNotReady = errors.New("the worker's tokenizer is not loaded (yet)")

// hubTokenizer is a worker's tokenizer found in the hub cache, usable once
// loaded. It is a gateway.SessionTokenizer.
type hubTokenizer struct {
	chat atomic.Pointer[hftok.Chat]
}

func (h *hubTokenizer) TokenizeChat(body []byte) ([]uint32, error) {
	if c := h.chat.Load(); c != nil {
		return c.TokenizeChat(body)
	}
	return nil, errTokenizerNotReady
}

func (h *hubTokenizer) TokenizeChatSession(session string, body []byte) ([]uint32, error) {
	if c := h.chat.Load(); c != nil {
		return c.TokenizeChatSession(session, body)
	}
	return nil, errTokenizerNotReady
}

// hubTokenizers finds and loads the workers' tokenizers in the background;
// workers serving the same model share one.
type hubTokenizers struct {
	hub    string // the hub cache ("" = hftok.HubCacheDir())
	log    *slog.Logger
	client *http.Client
	retry  time.Duration // between /v1/models tries while a worker is down

	mu    sync.Mutex
	loads map[string]*chatLoad // by directory
	wg    sync.WaitGroup
}

type chatLoad struct {
	done chan struct{}
	chat *hftok.Chat
	err  error
}

// attach gives every worker that has no tokenizer a hubTokenizer and
// starts finding it; the work ends with ctx.
func (hs *hubTokenizers) attach(ctx context.Context, workers []gateway.WorkerSpec) {
	for i := range workers {
		if workers[i].Tokenizer != nil { // mock workers bring their own
			continue
		}
		h := new(hubTokenizer)
		workers[i].Tokenizer = h
		hs.wg.Add(1)
		go func(url string) {
			defer hs.wg.Done()
			hs.find(ctx, url, h)
		}(workers[i].URL)
	}
}

// wait waits until every search has ended (found, not found, or ctx done).
func (hs *hubTokenizers) wait() { hs.wg.Wait() }

func (hs *hubTokenizers) find(ctx context.Context, url string, h *hubTokenizer) {
	var models []apiwire.Model
	for tries := 0; ; tries++ {
		var err error
		if models, err = hs.models(ctx, url); err == nil {
			break
		}
		if tries == 0 {
			hs.log.Info("proxy: worker uses /tokenize until it answers /v1/models (to find its tokenizer)", "worker", url, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(hs.retry):
		}
	}
	var why []string
	for _, m := range models {
		for i, name := range []string{m.Root, m.ID} {
			if name == "" || (i == 1 && name == m.Root) {
				continue
			}
			dir, err := hftok.CachedModelDir(hs.hub, name)
			if err != nil {
				why = append(why, err.Error())
				continue
			}
			chat, err := hs.load(dir)
			if err != nil {
				hs.log.Warn("proxy: worker uses /tokenize per request: its tokenizer did not load", "worker", url, "model", name, "dir", dir, "err", err)
				return
			}
			h.chat.Store(chat)
			hs.log.Info("proxy: worker tokenizes in process", "worker", url, "model", name, "dir", dir)
			return
		}
	}
	if len(models) == 0 {
		why = append(why, "it lists no model")
	}
	hs.log.Info("proxy: worker uses /tokenize per request: no tokenizer for its model (set --tokenizer DIR, or put the model in the Hugging Face cache)",
		"worker", url, "why", strings.Join(why, "; "))
}

// models reads the worker's GET /v1/models.
func (hs *hubTokenizers) models(ctx context.Context, url string) ([]apiwire.Model, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, strings.TrimRight(url, "/")+gateway.ModelsPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hs.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/models: %s", resp.Status)
	}
	var list apiwire.ModelList
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("GET /v1/models: %w", err)
	}
	return list.Data, nil
}

// load loads the tokenizer in dir once, however many workers serve it.
func (hs *hubTokenizers) load(dir string) (*hftok.Chat, error) {
	hs.mu.Lock()
	l, ok := hs.loads[dir]
	if !ok {
		l = &chatLoad{done: make(chan struct{})}
		if hs.loads == nil {
			hs.loads = map[string]*chatLoad{}
		}
		hs.loads[dir] = l
	}
	hs.mu.Unlock()
	if ok {
		<-l.done
		return l.chat, l.err
	}
	l.chat, l.err = hftok.LoadChat(dir, hftok.ChatConfig{})
	close(l.done)
	return l.chat, l.err
}
