package vllm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// ErrBlockSizeMismatch reports that the configured block size disagrees
// with the engine's. A router hashing with the wrong block size would see
// zero overlap silently, so this is an error, never a warning.
var ErrBlockSizeMismatch = errors.New("vllm: block size differs from the engine's")

// WorkerConfig configures a Worker. Zero fields mean the documented
// defaults.
type WorkerConfig struct {
	// ID identifies the engine to the router and in KV events.
	ID uint64
	// URL is the engine's OpenAI-compatible HTTP server. Required.
	URL string
	// HTTPClient carries every request; nil means http.DefaultClient.
	HTTPClient *http.Client
	// DPRanks is the number of data-parallel ranks; 0 means 1.
	DPRanks int
	// BlockSize and KVCapacityTokens, when 0, are read from the engine's
	// /metrics (vllm:cache_config_info: block_size, and num_gpu_blocks ×
	// block_size summed over its engine series). A non-zero BlockSize that
	// disagrees with the engine is ErrBlockSizeMismatch.
	BlockSize        int
	KVCapacityTokens int
	// Events subscribes to the engine's KV events when non-nil; its
	// WorkerID and DPRanks are set from this config. Events.Sink is
	// required then.
	Events *Config
}

// Worker is one vLLM engine as a router sees it: identity and DP ranks,
// block size and KV capacity, the HTTP client that forwards requests and
// tokenizes prompts, and the KV event subscriber. A Worker is safe for
// concurrent use.
type Worker struct {
	id       uint64
	ranks    int
	bs       int
	capacity int
	client   *Client
	sub      *Subscriber

	mu      sync.Mutex // guards started
	started bool
}

// NewWorker validates cfg, reads block size and capacity from /metrics when
// they are not configured, and builds the subscriber (not yet started).
func NewWorker(ctx context.Context, cfg WorkerConfig) (*Worker, error) {
	c, err := NewClient(cfg.URL, cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	if cfg.DPRanks < 0 {
		return nil, fmt.Errorf("vllm: DPRanks %d < 0", cfg.DPRanks)
	}
	if cfg.DPRanks == 0 {
		cfg.DPRanks = 1
	}
	w := &Worker{id: cfg.ID, ranks: cfg.DPRanks, bs: cfg.BlockSize, capacity: cfg.KVCapacityTokens, client: c}
	if cfg.BlockSize == 0 || cfg.KVCapacityTokens == 0 {
		cs, err := c.CacheConfigs(ctx)
		if err != nil {
			return nil, fmt.Errorf("vllm: worker %d: KV capacity: %w", cfg.ID, err)
		}
		total := 0
		for _, cc := range cs {
			if cc.BlockSize != cs[0].BlockSize {
				return nil, fmt.Errorf("%w: engines report %d and %d", ErrBlockSizeMismatch, cs[0].BlockSize, cc.BlockSize)
			}
			total += cc.CapacityTokens()
		}
		if cfg.BlockSize != 0 && cfg.BlockSize != cs[0].BlockSize {
			return nil, fmt.Errorf("%w: configured %d, engine %d", ErrBlockSizeMismatch, cfg.BlockSize, cs[0].BlockSize)
		}
		w.bs = cs[0].BlockSize
		if w.capacity == 0 {
			w.capacity = total
		}
	}
	if cfg.Events != nil {
		ev := *cfg.Events
		ev.WorkerID, ev.DPRanks = cfg.ID, cfg.DPRanks
		if w.sub, err = NewSubscriber(ev); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// ID returns the worker's identity.
func (w *Worker) ID() uint64 { return w.id }

// DPRanks returns the number of data-parallel ranks (each its own KV cache).
func (w *Worker) DPRanks() int { return w.ranks }

// BlockSize returns the engine's tokens per KV block.
func (w *Worker) BlockSize() int { return w.bs }

// KVCapacityTokens returns the engine's KV cache capacity in tokens, all
// DP ranks together.
func (w *Worker) KVCapacityTokens() int { return w.capacity }

// Client returns the HTTP client.
func (w *Worker) Client() *Client { return w.client }

// Subscriber returns the KV event subscriber, or nil without WorkerConfig.Events.
func (w *Worker) Subscriber() *Subscriber { return w.sub }

// Start starts the event subscriber, if any.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return ErrStarted
	}
	w.started = true
	if w.sub == nil {
		return nil
	}
	return w.sub.Start(ctx)
}

// Close stops the event subscriber and waits for its goroutines, and
// closes the client's idle connections of its own.
func (w *Worker) Close() error {
	w.client.CloseIdleConnections()
	if w.sub != nil {
		return w.sub.Close()
	}
	return nil
}

// Forward proxies an OpenAI request to the engine; see Client.Forward.
func (w *Worker) Forward(ctx context.Context, rw http.ResponseWriter, path string, hdr http.Header, body []byte) (Usage, error) {
	return w.client.Forward(ctx, rw, path, hdr, body)
}

// Tokens returns the prompt's token ids; see Client.Tokens.
func (w *Worker) Tokens(ctx context.Context, path string, body []byte) ([]uint32, bool, error) {
	return w.client.Tokens(ctx, path, body)
}
