package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/agentkv/agentkv/engine/sglang"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/eventplane"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/sharedpool"
)

func init() {
	register(&command{
		name:    "relay",
		summary: "bridge one worker's KV events from ZMQ into NATS JetStream for router replicas",
		usage:   "--nats URL [--worker-id N --url http://WORKER --events tcp://HOST:5557 [--replay tcp://HOST:5558]] [--store tcp://MOONCAKE:PORT --pool-layout page=N,...] [flags]",
		help: `
Run one relay beside each worker when several "agentkv proxy --nats URL"
replicas share the workers. The relay subscribes to the worker's KV events
(vLLM's --kv-events-config ZMQ endpoint, DP rank r on port+r, with the
replay socket to fill gaps) and publishes them, exactly once and in order,
to the model's JetStream stream, one subject per worker rank. Every replica
consumes that stream into its index. --worker-id must be the ID the
replicas give the worker: its position in their --worker list, from 0.
At start the relay waits for NATS and for the worker to answer (up to
--wait, retrying with backoff and logging each try), so it may start
before them.

The relay also keeps the worker's presence record alive in the model's
workers bucket. When the relay stops, or its worker fails --health-fails
health probes in a row (GET /health every --health-every), the relay exits
and the record goes: every replica removes the worker. A relay restarted
for the same worker continues its event numbering and first publishes a
Cleared event, then the engine's replay buffer.

--store carries a shared KV pool's events too: the object events the
Mooncake master behind SGLang HiCache publishes on ZMQ, batch by batch, to
the model's stream, where every replica indexes the pool and credits each
worker with the pages it could load from it. --pool-layout says how SGLang
writes a page into the store (the same on every worker sharing the pool):
page=N (the page size, equal to the routers' block size), tp=N, pp=N,
tp-lcm=N, split-heads, mla, eagle, tag=T (extra_backend_tag), key-prefix=P.
Run one relay with --store per pool, beside a worker or alone (without
--url and --events); a second one for the same master is harmless (the
stream keeps one copy of each batch).`,
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
	wait := fs.Duration("wait", defaultRelayWait, "how long to wait at start for NATS and the worker to answer, retrying with backoff and a log line per try (0: forever)")
	store := fs.String("store", "", "the Mooncake master's KV event endpoint, tcp://HOST:PORT: carry the shared pool's events too (or only them, without --url and --events)")
	storeTopic := fs.String("store-topic", "", "with --store: the ZMQ subscription prefix (empty: every topic)")
	poolName := fs.String("pool", "mooncake", "with --store: the pool's name (its subject)")
	poolLayout := fs.String("pool-layout", "", "with --store: how SGLang writes a page into the pool: page=N[,tp=N][,pp=N][,tp-lcm=N][,split-heads][,mla][,eagle][,tag=T][,key-prefix=P]. Required with --store")
	if err := parseFlags(env, c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("relay: unexpected argument %q", fs.Arg(0))
	}
	hasWorker := *url != "" || *events != ""
	switch {
	case *natsURL == "":
		return usagef("relay: --nats is required")
	case !hasWorker && *store == "":
		return usagef("relay: give a worker (--url and --events), a shared pool (--store), or both")
	case hasWorker && (*url == "" || *events == ""):
		return usagef("relay: --url and --events go together")
	case *dp < 1 || *blockSize < 0 || *healthEvery < 0 || *healthFails < 1 || *wait < 0:
		return usagef("relay: --dp and --health-fails must be ≥ 1, --block-size, --health-every and --wait ≥ 0")
	case *store == "" && (*poolLayout != "" || *storeTopic != ""):
		return usagef("relay: --pool-layout and --store-topic need --store")
	case *store != "" && *poolLayout == "":
		return usagef("relay: --store needs --pool-layout (how the workers write pages into the pool)")
	}
	var layout sharedpool.Layout
	if *store != "" {
		var err error
		if layout, err = parsePoolLayout(*poolLayout); err != nil {
			return usagef("relay: --pool-layout: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), proxySignals...)
	defer stop()
	log := slog.New(slog.NewTextHandler(env.stderr, nil))
	plane, err := eventplane.Connect(*natsURL, eventplane.Config{Model: *model, Logger: log})
	if err != nil {
		return err
	}
	defer plane.Close()
	// Started beside the worker and the replicas (the replica that embeds
	// NATS may still be starting), the relay waits for both, as the proxy
	// waits for its workers.
	deadline := startDeadline(*wait)
	err = retryStart(ctx, log, "NATS "+*natsURL, deadline, func(ctx context.Context) error { return plane.Ensure(ctx) }, nil)
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}

	if !hasWorker {
		pub, err := eventplane.NewPublisher(plane, eventplane.PublisherConfig{PoolLayout: layout})
		if err != nil {
			return err
		}
		pub.Start(ctx)
		defer pub.Close()
		sub, err := startStoreRelay(ctx, pub, *store, *storeTopic, *poolName, log)
		if err != nil {
			return err
		}
		defer sub.Close()
		fmt.Fprintf(env.stdout, "agentkv relay: pool %s (%s, page size %d) → %s model %s\n", *poolName, *store, layout.PageSize, *natsURL, *model)
		<-ctx.Done()
		return nil
	}

	var pub *eventplane.Publisher
	sink := vllm.SinkFunc(func(ev *flashindex.Event) error { return pub.Apply(ev) })
	var vw *vllm.Worker
	err = retryStart(ctx, log, "worker "+*url, deadline, func(ctx context.Context) error {
		var err error
		vw, err = vllm.NewWorker(ctx, vllm.WorkerConfig{ID: *id, URL: *url, DPRanks: *dp, BlockSize: *blockSize,
			Events: &vllm.Config{Endpoint: *events, ReplayEndpoint: *replay, Sink: sink, CatchUp: true, Logger: log}})
		return err
	}, func(err error) bool { return errors.Is(err, vllm.ErrBlockSizeMismatch) })
	if err != nil {
		return fmt.Errorf("relay: worker %s: %w", *url, err)
	}
	if *store != "" {
		if err := layout.CheckPageSize(vw.BlockSize()); err != nil {
			return usagef("relay: --pool-layout: %v (the worker's block size)", err)
		}
	}
	pub, err = eventplane.NewPublisher(plane, eventplane.PublisherConfig{Worker: eventplane.WorkerInfo{
		ID: *id, DPRanks: *dp, BlockSize: vw.BlockSize(), KVCapacityTokens: vw.KVCapacityTokens(), URL: *url}, PoolLayout: layout})
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
	if *store != "" {
		sub, err := startStoreRelay(ctx, pub, *store, *storeTopic, *poolName, log)
		if err != nil {
			return err
		}
		defer sub.Close()
		fmt.Fprintf(env.stdout, "agentkv relay: pool %s (%s, page size %d) → %s model %s\n", *poolName, *store, layout.PageSize, *natsURL, *model)
	}

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

// defaultRelayWait is how long "agentkv relay" waits at start for NATS
// and its worker (--wait): long enough for a worker that loads a model.
const defaultRelayWait = 10 * time.Minute

// startDeadline is the end of a --wait (zero: none).
func startDeadline(wait time.Duration) time.Time {
	if wait == 0 {
		return time.Time{}
	}
	return time.Now().Add(wait)
}

// retryStart calls try until it succeeds, fatal(err) says its error will
// not pass by waiting, ctx ends, or the deadline (zero: none) passes. Each
// try gets at most 10 s; each failure is logged with the wait before the
// next (100 ms, doubling up to 5 s).
func retryStart(ctx context.Context, log *slog.Logger, what string, deadline time.Time, try func(context.Context) error, fatal func(error) bool) error {
	backoff := 100 * time.Millisecond
	for n := 1; ; n++ {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := try(c)
		cancel()
		switch {
		case err == nil:
			if n > 1 {
				log.Info("relay: "+what+" answered", "tries", n)
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case fatal != nil && fatal(err):
			return err
		case !deadline.IsZero() && time.Now().Add(backoff).After(deadline):
			return fmt.Errorf("%s not answering after %d tries (--wait): %w", what, n, err)
		}
		log.Warn("relay: waiting for "+what, "try", n, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// startStoreRelay subscribes to a Mooncake master's store events and
// publishes each batch to the event plane.
func startStoreRelay(ctx context.Context, pub *eventplane.Publisher, endpoint, topic, pool string, log *slog.Logger) (*sglang.StoreSubscriber, error) {
	sub, err := sglang.NewStoreSubscriber(sglang.StoreConfig{Endpoint: endpoint, Topic: topic, Logger: log,
		OnBatch: func(b *sharedpool.Batch) {
			if err := pub.ApplyPool(pool, b); err != nil {
				log.Warn("relay: pool batch not published", "seq", b.Seq, "err", err)
			}
		}})
	if err != nil {
		return nil, err
	}
	if err := sub.Start(ctx); err != nil {
		return nil, err
	}
	return sub, nil
}

// parsePoolLayout reads --pool-layout: comma-separated page=N, tp=N, pp=N,
// tp-lcm=N, split-heads, mla, eagle, tag=T, key-prefix=P, backend=B.
func parsePoolLayout(spec string) (sharedpool.Layout, error) {
	var l sharedpool.Layout
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		k, v, hasValue := strings.Cut(f, "=")
		num := func() (int, error) {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || !hasValue {
				return 0, fmt.Errorf("%s wants a number ≥ 0, got %q", k, v)
			}
			return n, nil
		}
		flag := func(b *bool) error {
			if hasValue {
				return fmt.Errorf("%s takes no value", k)
			}
			*b = true
			return nil
		}
		var err error
		switch k {
		case "page", "page-size":
			l.PageSize, err = num()
		case "tp":
			l.TPSize, err = num()
		case "pp":
			l.PPSize, err = num()
		case "tp-lcm":
			l.TPLCMSize, err = num()
		case "split-heads":
			err = flag(&l.SplitHeads)
		case "mla":
			err = flag(&l.MLA)
		case "eagle":
			err = flag(&l.Eagle)
		case "tag":
			l.ExtraBackendTag = v
		case "key-prefix":
			l.KeyPrefix = v
		case "backend":
			l.Backend = v
		default:
			return l, fmt.Errorf("unknown field %q (want page, tp, pp, tp-lcm, split-heads, mla, eagle, tag, key-prefix, backend)", k)
		}
		if err != nil {
			return l, err
		}
	}
	if l.PageSize == 0 {
		return l, fmt.Errorf("page=N is required")
	}
	return l, l.Validate()
}
