// Command proxy embeds agentkv's gateway in a program of its own: a
// session-aware router in front of local vLLM workers that serves OpenAI
// chat completions and Responses and Anthropic Messages (translated to chat
// completions for engines that lack them), mounted in its own ServeMux next
// to an endpoint of its own.
//
//	go run ./examples/proxy --worker http://127.0.0.1:8001 --worker http://127.0.0.1:8002
//
// The full-featured version (KV events, admission, metrics, traces,
// shutdown) is "agentkv proxy", itself a thin layer over gateway.NewStack.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/gateway"
)

// urls collects a repeated flag (--worker URL --worker URL, as "agentkv
// proxy" takes them).
type urls []string

func (u *urls) String() string { return strings.Join(*u, ",") }

func (u *urls) Set(s string) error {
	*u = append(*u, s)
	return nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8000", "address to serve the APIs on")
	var workers urls
	flag.Var(&workers, "worker", "a vLLM base URL (repeatable; default http://127.0.0.1:8001)")
	flag.Parse()
	if len(workers) == 0 {
		workers = urls{"http://127.0.0.1:8001"}
	}
	h, stop, err := newProxy(context.Background(), workers)
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	log.Printf("proxy on http://%s", *listen)
	log.Fatal(http.ListenAndServe(*listen, h))
}

// newProxy connects to the workers (block size and KV capacity from their
// /metrics), builds a Router and a Gateway over them and returns the
// handler and a stop function.
func newProxy(ctx context.Context, urls []string) (http.Handler, func(), error) {
	var gws []gateway.Worker
	var infos []agentkv.WorkerInfo
	for i, u := range urls {
		w, err := vllm.NewWorker(ctx, vllm.WorkerConfig{ID: uint64(i), URL: u})
		if err != nil {
			return nil, nil, err
		}
		infos = append(infos, agentkv.WorkerInfo{ID: w.ID(), BlockSize: w.BlockSize(), KVCapacityTokens: w.KVCapacityTokens()})
		// Native zero: only chat and text completions are passed through;
		// Responses and Messages are translated. A vLLM that serves them
		// itself would say so: Native: gateway.APISet(gateway.Chat, ...).
		// TokenAPIs zero: it serves both engines' token APIs (/generate
		// and /inference/v1/generate); a vLLM without SGLang's /generate
		// would say TokenAPIs: gateway.TokenAPISet(gateway.TokenInference)
		// and /generate calls would be translated to its own.
		gws = append(gws, gateway.Worker{ID: w.ID(), URL: u})
	}
	// No KV events here: IndexApproximate makes the router remember where
	// it sent each prompt, and soft affinity keeps a session on its worker.
	r, err := agentkv.New(agentkv.Config{BlockSize: infos[0].BlockSize, Index: agentkv.IndexApproximate,
		Affinity: agentkv.AffinitySoft})
	if err != nil {
		return nil, nil, err
	}
	for _, info := range infos {
		if err := r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo { return info })); err != nil {
			return nil, nil, err
		}
	}
	g, err := gateway.New(gateway.Config{Router: r, Workers: gws, StripBillingHeader: true})
	if err != nil {
		return nil, nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() { _ = r.Run(ctx) }() // expiry sweeps (and admission) every 5 s
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sessions", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%d sessions\n", r.Sessions().Len()) // an endpoint of your own
	})
	mux.Handle("/", g) // the OpenAI and Anthropic APIs
	return mux, func() { stop(); r.Close() }, nil
}
