package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os/signal"
	"strings"
	"time"

	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/eventplane"
	"github.com/agentkv/agentkv/flashindex"
)

func init() {
	register(&command{
		name:    "relay",
		summary: "bridge one worker's KV events from ZMQ into NATS JetStream for router replicas",
		usage:   "--nats URL --worker-id N --url http://WORKER --events tcp://HOST:5557 [--replay tcp://HOST:5558] [flags]",
		help: `
Run one relay beside each worker when several "agentkv proxy --nats URL"
replicas share the workers. The relay subscribes to the worker's KV events
(vLLM's --kv-events-config ZMQ endpoint, DP rank r on port+r, with the
replay socket to fill gaps) and publishes them, exactly once and in order,
to the model's JetStream stream, one subject per worker rank. Every replica
consumes that stream into its index. --worker-id must be the ID the
replicas give the worker: its position in their --worker list, from 0.

The relay also keeps the worker's presence record alive in the model's
workers bucket. When the relay stops, or its worker fails --health-fails
health probes in a row (GET /health every --health-every), the relay exits
and the record goes: every replica removes the worker. A relay restarted
for the same worker continues its event numbering and first publishes a
Cleared event, then the engine's replay buffer.`,
		run: runRelay,
	})
}

func runRelay(env *cmdEnv, args []string) error {
	c := commands["relay"]
	fs := newFlags(env, c)
	natsURL := fs.String("nats", "", "NATS JetStream server URL (nats://HOST:4222). Required")
	model := fs.String("model", "default", "the model name; the same as the replicas' --model")
	id := fs.Uint64("worker-id", 0, "the worker's ID on the replicas (its position in their --worker list)")
	url := fs.String("url", "", "the worker's base URL (block size and capacity from /metrics, health from /health). Required")
	events := fs.String("events", "", "the worker's KV event endpoint, tcp://HOST:PORT. Required")
	replay := fs.String("replay", "", "the worker's replay endpoint (empty: gaps end in Cleared)")
	dp := fs.Int("dp", 1, "data-parallel ranks")
	blockSize := fs.Int("block-size", 0, "KV block size (0: read from /metrics)")
	healthEvery := fs.Duration("health-every", time.Second, "health probe period (0: no probes)")
	healthFails := fs.Int("health-fails", 3, "consecutive failed probes after which the relay exits")
	if err := parseFlags(env, c, fs, args); err != nil {
		return err
	}
	switch {
	case *natsURL == "" || *url == "" || *events == "":
		return usagef("relay: --nats, --url and --events are required")
	case *dp < 1 || *blockSize < 0 || *healthEvery < 0 || *healthFails < 1:
		return usagef("relay: --dp and --health-fails must be ≥ 1, --block-size and --health-every ≥ 0")
	}
	ctx, stop := signal.NotifyContext(context.Background(), proxySignals...)
	defer stop()
	log := slog.New(slog.NewTextHandler(env.stderr, nil))
	plane, err := eventplane.Connect(*natsURL, eventplane.Config{Model: *model, Logger: log})
	if err != nil {
		return err
	}
	defer plane.Close()

	var pub *eventplane.Publisher
	sink := vllm.SinkFunc(func(ev *flashindex.Event) error { return pub.Apply(ev) })
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	vw, err := vllm.NewWorker(startCtx, vllm.WorkerConfig{ID: *id, URL: *url, DPRanks: *dp, BlockSize: *blockSize,
		Events: &vllm.Config{Endpoint: *events, ReplayEndpoint: *replay, Sink: sink, CatchUp: true, Logger: log}})
	cancel()
	if err != nil {
		return fmt.Errorf("relay: worker %s: %w", *url, err)
	}
	pub, err = eventplane.NewPublisher(plane, eventplane.PublisherConfig{Worker: eventplane.WorkerInfo{
		ID: *id, DPRanks: *dp, BlockSize: vw.BlockSize(), KVCapacityTokens: vw.KVCapacityTokens(), URL: *url}})
	if err != nil {
		return err
	}
	pub.Start(ctx)
	defer pub.Close()
	if err := vw.Start(ctx); err != nil {
		return err
	}
	defer vw.Close()
	fmt.Fprintf(env.stdout, "agentkv relay: worker %d (%s, block size %d) → %s model %s\n", *id, *url, vw.BlockSize(), *natsURL, *model)

	if *healthEvery == 0 {
		<-ctx.Done()
		return nil
	}
	health := strings.TrimRight(*url, "/") + "/health"
	hc := &http.Client{Timeout: *healthEvery}
	fails := 0
	t := time.NewTicker(*healthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		resp, err := hc.Get(health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		if err == nil {
			fails = 0
			continue
		}
		fails++
		log.Warn("relay: worker health probe failed", "worker", *id, "err", err, "in_a_row", fails)
		if fails >= *healthFails {
			return fmt.Errorf("relay: worker %d failed %d health probes; leaving so the replicas remove it", *id, fails)
		}
	}
}
