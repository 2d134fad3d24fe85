package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/gateway"
)

// chat posts a chat completion to url as session and prints what came
// back: the status, the worker the router chose, and the reply's object.
func chat(url, session string) {
	req, err := http.NewRequest(http.MethodPost, url+gateway.ChatPath, strings.NewReader(
		`{"model":"m","messages":[{"role":"user","content":"list the files"}],"max_tokens":8}`))
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Dynamo-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var reply struct {
		Object string `json:"object"`
	}
	_ = json.Unmarshal(b, &reply)
	fmt.Println(resp.StatusCode, resp.Header.Get(gateway.HeaderWorkerID), reply.Object)
}

// ExampleNewStack assembles the whole router in front of a worker (here
// engine/mock, a vLLM-compatible worker on loopback with KV events) and
// serves it, as "agentkv proxy --worker URL,events=EP" does.
func ExampleNewStack() {
	w, err := mock.Start(mock.Config{Events: "tcp://127.0.0.1:0", Speedup: 1000, Aliases: []string{"*"}})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()

	s, err := gateway.NewStack(context.Background(), gateway.StackConfig{
		Workers: []gateway.WorkerSpec{{URL: w.URL(), Events: w.EventsEndpoint()}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler("/metrics")) // the APIs, /healthz, /readyz and /metrics
	defer srv.Close()

	chat(srv.URL, "agent-1")
	// Output:
	// 200 0/0 chat.completion
}

// ExampleGateway embeds the gateway in an application's own ServeMux, over
// a Router the application assembled and owns.
func ExampleGateway() {
	w, err := mock.Start(mock.Config{Speedup: 1000, Aliases: []string{"*"}})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()

	r, err := agentkv.New(agentkv.Config{BlockSize: w.BlockSize()})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	info := agentkv.WorkerInfo{ID: 7, BlockSize: w.BlockSize(), KVCapacityTokens: 1 << 20}
	if err := r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo { return info })); err != nil {
		log.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Router: r, Workers: []gateway.Worker{{ID: 7, URL: w.URL()}}})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	mux := http.NewServeMux()
	mux.Handle("/v1/", g) // the OpenAI and Anthropic APIs
	mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "my app 1.0") })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	chat(srv.URL, "agent-1")
	// Output:
	// 200 7/0 chat.completion
}
