package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/gateway"
)

// The proxy tests drive a gateway.Stack through these shorthands.

type workerSpec = gateway.WorkerSpec

var parseWorkerSpec = gateway.ParseWorkerSpec

// Debug headers.
const (
	headerWorker       = gateway.HeaderWorker
	headerWorkerID     = gateway.HeaderWorkerID
	headerCachedTokens = gateway.HeaderCachedTokens
	headerDPRank       = gateway.HeaderDPRank
)

// proxyConfig is the tests' shorthand for a StackConfig.
type proxyConfig struct {
	Workers      []workerSpec
	BlockSize    int
	Policy       agentkv.Policy
	Affinity     agentkv.AffinityMode
	Admission    bool
	Tick         time.Duration
	Refresh      time.Duration
	MetricsPath  string
	MaxBodyBytes int64
	Registry     *prometheus.Registry
}

type proxy struct {
	*gateway.Stack
	router  *agentkv.Router
	metrics string
}

func newProxy(ctx context.Context, cfg proxyConfig) (*proxy, error) {
	if cfg.MetricsPath != "" && !strings.HasPrefix(cfg.MetricsPath, "/") {
		return nil, fmt.Errorf("metrics path %q must start with /", cfg.MetricsPath)
	}
	s, err := gateway.NewStack(ctx, gateway.StackConfig{Workers: cfg.Workers, BlockSize: cfg.BlockSize, Policy: cfg.Policy,
		Affinity: cfg.Affinity, Admission: cfg.Admission, Tick: cfg.Tick, Refresh: cfg.Refresh, Registry: cfg.Registry,
		Gateway: gateway.Config{MaxBodyBytes: cfg.MaxBodyBytes}})
	if err != nil {
		return nil, err
	}
	return &proxy{Stack: s, router: s.Router(), metrics: cfg.MetricsPath}, nil
}

func (p *proxy) Handler() http.Handler { return p.Stack.Handler(p.metrics) }

func (p *proxy) serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	return serveStack(ctx, p.Stack, p.Handler(), ln, grace, gateway.ServerConfig{}, slog.New(slog.DiscardHandler))
}
