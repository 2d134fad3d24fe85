package main

import (
	"context"
	"fmt"
	"log/slog"
	"os/signal"
	"strings"

	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/gateway"
)

func init() {
	register(&command{
		name:    "mock-worker",
		summary: "a mock vLLM worker on the wire, driven by the simulated engine (no GPU)",
		usage:   "[--listen ADDR] [--events tcp://ADDR] [--replay tcp://ADDR] [--speedup X] [flags]",
		help: `
Serve what a vLLM server serves — OpenAI /v1/chat/completions, /v1/completions,
/v1/responses, Anthropic /v1/messages and /v1/messages/count_tokens (streaming
and not), /tokenize, /detokenize, /health, /v1/models, /metrics — from a
simulated engine (engine/sim: prefix cache, LRU, host tier, chunked prefill,
preemption) stepped in real time, each step's modelled duration divided by
--speedup. Usage reports the simulated cache truthfully. KV events go out on
ZeroMQ in vLLM's wire format (--events, with a --replay socket), so an
agentkv proxy subscribes to it as to vLLM. Tokens are words (one
whitespace-separated word = one token); see engine/mock's documentation for
the chat template, the tool-call rule and the fault switches
(POST /admin/fault). With no flags it listens on 127.0.0.1:8100 and
publishes no events. SIGINT or SIGTERM stops it.`,
		run: runMockWorker,
	})
	proxyHooks = append(proxyHooks, mockWorkersHook)
}

// mockFlags are the engine flags mock-worker and proxy --mock-workers share.
type mockFlags struct {
	speedup           *float64
	blockSize, blocks *int
	hostBlocks        *int
	minOut, maxOut    *int
	model, apis       *string
	maxModelLen       *int
}

func addMockFlags(fs flagSet, prefix string) mockFlags {
	return mockFlags{
		speedup:     fs.Float64(prefix+"speedup", 1, "divide every modelled duration by this"),
		blockSize:   fs.Int(prefix+"block-size", sim.DefaultBlockSize, "KV block size in tokens"),
		blocks:      fs.Int(prefix+"kv-blocks", 0, "device KV blocks (0: Llama-3-8B on an A100, 440k tokens)"),
		hostBlocks:  fs.Int(prefix+"host-blocks", 0, "host-tier KV blocks (0: none)"),
		minOut:      fs.Int(prefix+"min-output", mock.DefaultMinOutput, "shortest reply (a request's max_tokens cuts it)"),
		maxOut:      fs.Int(prefix+"max-output", mock.DefaultMaxOutput, "longest reply (a request's max_tokens cuts it)"),
		model:       fs.String(prefix+"model", mock.DefaultModel, "served model name"),
		apis:        fs.String(prefix+"apis", "all", "APIs served natively, comma-separated: chat, completions, responses, messages (others: 404)"),
		maxModelLen: fs.Int(prefix+"max-model-len", mock.DefaultMaxModelLen, "longest prompt plus reply in tokens"),
	}
}

func (f mockFlags) config() (mock.Config, error) {
	cfg := mock.Config{Speedup: *f.speedup, Model: *f.model, MinOutput: *f.minOut, MaxOutput: *f.maxOut, MaxModelLen: *f.maxModelLen,
		Engine: sim.Config{BlockSize: *f.blockSize, DeviceBlocks: *f.blocks, HostBlocks: *f.hostBlocks}}
	if *f.speedup <= 0 {
		return cfg, usagef("--speedup must be > 0, got %v", *f.speedup)
	}
	if *f.apis != "all" {
		cfg.APIs = []mock.API{}
		for _, a := range strings.Split(*f.apis, ",") {
			if a = strings.TrimSpace(a); a != "" {
				cfg.APIs = append(cfg.APIs, mock.API(a))
			}
		}
	}
	return cfg, nil
}

func runMockWorker(env *cmdEnv, args []string) error {
	c := commands["mock-worker"]
	fs := newFlags(env, c)
	listen := fs.String("listen", "127.0.0.1:8100", "HTTP address to serve on")
	events := fs.String("events", "", "ZMQ PUB endpoint of the KV events, e.g. tcp://127.0.0.1:5557 (empty: none)")
	replay := fs.String("replay", "", "ZMQ ROUTER replay endpoint, e.g. tcp://127.0.0.1:5558 (needs --events)")
	mf := addMockFlags(fs, "")
	if err := parseFlags(env, c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("mock-worker: unexpected argument %q", fs.Arg(0))
	}
	cfg, err := mf.config()
	if err != nil {
		return err
	}
	cfg.Listen, cfg.Events, cfg.Replay = *listen, *events, *replay
	cfg.Logger = slog.New(slog.NewTextHandler(env.stderr, nil))
	s, err := mock.Start(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(env.stdout, "mock worker %s model=%s block_size=%d", s.URL(), s.Model(), s.BlockSize())
	if e := s.EventsEndpoint(); e != "" {
		fmt.Fprintf(env.stdout, " events=%s", e)
	}
	if r := s.ReplayEndpoint(); r != "" {
		fmt.Fprintf(env.stdout, " replay=%s", r)
	}
	fmt.Fprintln(env.stdout)
	ctx, stop := signal.NotifyContext(context.Background(), proxySignals...)
	defer stop()
	<-ctx.Done()
	return nil
}

// mockWorkersHook adds --mock-workers N to agentkv proxy: N mock workers
// in process on free loopback ports, events and replay subscribed, routed
// to with their in-process tokenizer.
func mockWorkersHook(fs flagSet) func(ctx context.Context, log *slog.Logger) ([]gateway.WorkerSpec, func(), error) {
	n := fs.Int("mock-workers", 0, "start N mock vLLM workers in process (free loopback ports, KV events subscribed); with no --worker this alone is a demo")
	mf := addMockFlags(fs, "mock-")
	return func(ctx context.Context, log *slog.Logger) ([]gateway.WorkerSpec, func(), error) {
		if *n < 0 || *n > 256 {
			return nil, nil, usagef("proxy: --mock-workers must be in [0, 256], got %d", *n)
		}
		if *n == 0 {
			return nil, nil, nil
		}
		cfg, err := mf.config()
		if err != nil {
			return nil, nil, fmt.Errorf("proxy: %w", err)
		}
		cfg.Events, cfg.Replay, cfg.Logger = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", log
		var servers []*mock.Server
		stop := func() {
			for _, s := range servers {
				s.Close()
			}
		}
		var specs []gateway.WorkerSpec
		native, _ := gateway.ParseAPIs(mockAPIs(cfg.APIs))
		for i := 0; i < *n; i++ {
			s, err := mock.Start(cfg)
			if err != nil {
				stop()
				return nil, nil, fmt.Errorf("proxy: mock worker %d: %w", i, err)
			}
			servers = append(servers, s)
			specs = append(specs, gateway.WorkerSpec{URL: s.URL(), Events: s.EventsEndpoint(), Replay: s.ReplayEndpoint(),
				Native: native, Tokenizer: s, Hints: gateway.HintsInline})
			log.Info("mock worker started", "mock", i, "url", s.URL(), "events", s.EventsEndpoint(), "replay", s.ReplayEndpoint(), "model", s.Model())
		}
		return specs, stop, nil
	}
}

// mockAPIs names the mock's native APIs in gateway.ParseAPIs' terms.
func mockAPIs(apis []mock.API) string {
	if apis == nil {
		return "all"
	}
	var names []string
	for _, a := range apis {
		names = append(names, string(a))
		if a == mock.APIMessages {
			names = append(names, "count_tokens")
		}
	}
	return strings.Join(names, ",")
}
