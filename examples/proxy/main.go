// Command proxy is a minimal OpenAI-compatible proxy in front of local vLLM
// workers. It shows how to embed agentkv.Router in your own server: read
// the agent session from the request, tokenize the prompt the way the
// engine will, route, forward, and report the usage back.
//
//	go run ./examples/proxy --workers http://127.0.0.1:8001,http://127.0.0.1:8002
//
// The full-featured version (KV events, admission, metrics, shutdown) is
// "agentkv proxy".
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/session"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8000", "address to serve the OpenAI API on")
	workers := flag.String("workers", "http://127.0.0.1:8001", "comma-separated vLLM base URLs")
	flag.Parse()
	h, stop, err := newProxy(context.Background(), strings.Split(*workers, ","))
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	log.Printf("proxy on http://%s", *listen)
	log.Fatal(http.ListenAndServe(*listen, h))
}

// newProxy connects to the workers (reading block size and KV capacity
// from their /metrics) and returns the handler and a stop function.
func newProxy(ctx context.Context, urls []string) (http.Handler, func(), error) {
	var ws []*vllm.Worker
	for i, u := range urls {
		w, err := vllm.NewWorker(ctx, vllm.WorkerConfig{ID: uint64(i), URL: u})
		if err != nil {
			return nil, nil, err
		}
		ws = append(ws, w)
	}
	// No KV events here: Approximate makes the router remember where it
	// sent each prompt, which is enough to keep an agent's turns together.
	r, err := agentkv.New(agentkv.Config{BlockSize: ws[0].BlockSize(), Approximate: true})
	if err != nil {
		return nil, nil, err
	}
	for _, w := range ws {
		info := agentkv.WorkerInfo{ID: w.ID(), BlockSize: w.BlockSize(), KVCapacityTokens: w.KVCapacityTokens()}
		if err := r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo { return info })); err != nil {
			return nil, nil, err
		}
	}
	tick, quit := time.NewTicker(5*time.Second), make(chan struct{}) // expiry sweeps (and admission)
	go func() {
		for {
			select {
			case <-tick.C:
				r.Tick()
			case <-quit:
				return
			}
		}
	}()

	complete := func(rw http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		body, err := io.ReadAll(http.MaxBytesReader(rw, req.Body, 16<<20))
		if err != nil {
			http.Error(rw, `{"error":{"message":"body too large or unreadable"}}`, http.StatusRequestEntityTooLarge)
			return
		}
		if body, err = vllm.EnsureStreamUsage(body); err != nil { // streams end with usage
			http.Error(rw, `{"error":{"message":"malformed JSON"}}`, http.StatusBadRequest)
			return
		}
		// /tokenize applies the chat template, so hashes match the engine's.
		tokens, _, err := ws[0].Tokens(ctx, req.URL.Path, body)
		if err != nil {
			http.Error(rw, `{"error":{"message":"no prompt"}}`, http.StatusBadRequest)
			return
		}
		ac, _ := session.FromContext(ctx) // Claude Code, Codex, OpenCode, Dynamo headers
		d, err := r.Route(ctx, &agentkv.Request{Tokens: tokens, Agent: ac})
		if err != nil {
			http.Error(rw, `{"error":{"message":"no worker available"}}`, http.StatusServiceUnavailable)
			return
		}
		rw.Header().Set("X-Agentkv-Worker", urls[d.Worker.ID])
		rw.Header().Set("X-Agentkv-Cached-Tokens", strconv.Itoa(d.Cached.Device))
		u, err := ws[d.Worker.ID].Forward(ctx, &firstByte{ResponseWriter: rw, d: d}, req.URL.Path, req.Header, body)
		d.Done(agentkv.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
			CachedTokens: u.CachedTokens, FinishReason: u.FinishReason, ToolCalls: u.ToolCalls, Failed: err != nil})
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", session.Middleware(http.HandlerFunc(complete)))
	mux.Handle("POST /v1/completions", session.Middleware(http.HandlerFunc(complete)))
	return mux, func() { tick.Stop(); close(quit); r.Close() }, nil
}

// firstByte tells the router when the reply starts (prefill is over).
type firstByte struct {
	http.ResponseWriter
	d    *agentkv.Decision
	seen bool
}

func (f *firstByte) Write(b []byte) (int, error) {
	if !f.seen {
		f.seen = true
		f.d.FirstToken()
	}
	return f.ResponseWriter.Write(b)
}

func (f *firstByte) Flush() {
	if fl, ok := f.ResponseWriter.(http.Flusher); ok {
		fl.Flush() // Forward flushes after every read: streams stay streams
	}
}
