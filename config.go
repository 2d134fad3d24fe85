package agentkv

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
	"github.com/agentkv/agentkv/radix"
	"github.com/agentkv/agentkv/session"
	"github.com/agentkv/agentkv/sharedpool"
)

// This file holds the router's configuration: the routing policy and
// affinity enums, the defaults, and Config with how New fills it.

// Policy chooses how the router picks a worker.
type Policy uint8

const (
	// KVAware minimises the cost function over the workers' cached prefix
	// (device, host, disk, shared pool) and active load. The default.
	KVAware Policy = iota
	// RoundRobin cycles through the workers, ignoring the cache.
	RoundRobin
	// Random picks a worker uniformly at random.
	Random
	// GlobalLB is VERL's default rollout balancer: sticky per session (an
	// LRU of GlobalLBSessions), else the fewest requests in flight. It
	// ignores the cache; see globallb.go.
	GlobalLB
)

func (p Policy) String() string {
	switch p {
	case KVAware:
		return "kv"
	case RoundRobin:
		return "round-robin"
	case Random:
		return "random"
	case GlobalLB:
		return "global-lb"
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// ParsePolicy parses "kv", "round-robin", "random" or "global-lb".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "kv", "kv-aware":
		return KVAware, nil
	case "round-robin", "rr":
		return RoundRobin, nil
	case "random":
		return Random, nil
	case "global-lb":
		return GlobalLB, nil
	}
	return 0, fmt.Errorf("agentkv: unknown policy %q (want kv, round-robin, random or global-lb)", s)
}

// AffinityMode binds a session to the worker that served it.
type AffinityMode uint8

const (
	// AffinityOff routes every request on its own merits.
	AffinityOff AffinityMode = iota
	// AffinitySoft prefers the session's worker while it is not busy or
	// filtered out; otherwise it routes freely and rebinds.
	AffinitySoft
	// AffinityHard sends every request of a session to its worker while the
	// binding lives and the worker exists.
	AffinityHard
)

// IndexMode says how the router learns what workers cache (Config.Index).
type IndexMode uint8

const (
	// IndexAuto is exact for a worker once one of its KV events reached
	// the router, and until then approximate: each decision routed to it
	// is recorded in the index (Config.ApproxTTL), and with Affinity off a
	// session routed to it is bound to it softly (Config.AffinityTTL). The
	// default.
	IndexAuto IndexMode = iota
	// IndexExact trusts KV events only: nothing is recorded, and affinity
	// is Config.Affinity alone.
	IndexExact
	// IndexApproximate records every decision, whatever events arrive
	// (events still confirm or remove the entries).
	IndexApproximate
)

// Defaults of the router's lifecycle settings (see Config).
const (
	// DefaultTickInterval is Config.TickInterval's default without
	// admission (with it, admission.Config.Interval).
	DefaultTickInterval = 5 * time.Second
	// DefaultHeldTTL is Config.HeldTTL's default.
	DefaultHeldTTL = time.Minute
	// DefaultMaxHeld is Config.MaxHeld's default.
	DefaultMaxHeld = 1 << 16
)

// DefaultHashCacheTokens is the default Config.HashCacheTokens: 64M prompt
// tokens, 32 MiB of hashes at block size 16 (two thousand 32K-token
// sessions).
const DefaultHashCacheTokens = 64 << 20

// Config configures a Router. Zero fields mean the documented defaults.
type Config struct {
	// BlockSize is the KV block size in tokens, shared by every worker.
	// Required.
	BlockSize int
	// Policy picks the worker selection (default KVAware).
	Policy Policy
	// Cost weights the KV-aware cost function.
	Cost CostConfig
	// Affinity binds sessions to workers (default off, but see Index: the
	// default IndexAuto binds softly on workers without KV events) for
	// AffinityTTL (default 10 minutes).
	Affinity    AffinityMode
	AffinityTTL time.Duration
	// BusyThreshold, when positive, skips workers whose tracked decode
	// blocks exceed this fraction of their KV capacity, unless every
	// worker is that busy.
	BusyThreshold float64
	// Admission enables program-aware admission control with this
	// configuration; nil disables it. Its OnDecision must be nil: the
	// router consumes the decisions.
	Admission *admission.Config
	// AdmissionPolicy, when set (and Admission nil), admits requests with
	// any admission.Policy (Dynamo's queue admission shape): a user's own,
	// or admission.Thunder. The router asks its Admit for every request,
	// holds the deferred ones as it holds admission's (TryRoute, Route,
	// MaxHeld, HeldTTL, OnRelease), reports Dispatched, Completed and
	// Aborted for the tracked ones, and Reconcile at every Tick (the
	// reconcile interval is TickInterval). The router calls it under its
	// lock, one call at a time.
	AdmissionPolicy admission.Policy
	// Sessions configures the session table (its OnRemove is the router's).
	Sessions session.TableConfig
	// MaxBlocksPerWorker bounds the index per worker (see flashindex).
	MaxBlocksPerWorker int
	// Index says how the router learns what each worker caches. The zero
	// value, IndexAuto, is exact for workers whose KV events reach the
	// router (ApplyEvent) and, for the others, approximate with soft
	// session affinity: without it a session's turns would scatter over
	// workers whose caches the router cannot see.
	Index IndexMode
	// ApproxTTL is how long an approximate entry lives (default 120 s).
	ApproxTTL time.Duration
	// RequestTTL is how long a routed request may go without a sign of
	// life (route, first token, progress) before the sweep forgets its
	// load. Default 10 minutes.
	RequestTTL time.Duration
	// Now is the clock (default time.Now). Simulators inject virtual time.
	Now func() time.Time
	// TickInterval is how often Run calls Tick (default
	// Admission.Interval with admission, else DefaultTickInterval).
	TickInterval time.Duration
	// Ticker makes Run's ticks: a channel that delivers one every d and a
	// function that stops it (default: a time.Ticker). Tests and simulators
	// inject their own to drive Run step by step.
	Ticker func(d time.Duration) (ticks <-chan time.Time, stop func())
	// OnTick, if set, is called by Run with every Tick's result.
	OnTick func(TickResult)
	// HeldTTL is how long a request held for a TryRoute caller may wait,
	// once admission released it, for that caller's retry: after it the
	// next Tick ends the turn and drops the request (OnRelease is told
	// ErrDropped), so callers that gave up leak nothing. Requests Route
	// holds are retried at once and never expire; a held request not yet
	// released waits at most admission's MaxWait. Default DefaultHeldTTL.
	HeldTTL time.Duration
	// MaxHeld bounds the requests held at once (default DefaultMaxHeld); a
	// request admission would hold beyond it is withdrawn and refused with
	// ErrTooManyHeld. A client sending many request IDs for one paused
	// session would otherwise grow the held set without bound.
	MaxHeld int
	// Seed seeds tie-breaking and sampling; the same seed and inputs give
	// the same decisions.
	Seed uint64
	// OnRelease, if set, is called (outside the router's locks) with the
	// ID of each request TryRoute held, once its fate is decided: err is
	// nil when admission released it (retry TryRoute with the same ID), or
	// ErrDropped when it will never run (its session ended, or the router
	// closed).
	OnRelease func(requestID string, err error)
	// Lineage configures the session-prefix tree (radix) that records each
	// session's context chain; it feeds hint policies.
	Lineage radix.Config
	// InferSessions, if set, infers the session of a request that names
	// none from its prompt's blocks (infer.go, README "How agentkv
	// recognises sessions"): it joins the live session whose context the
	// prompt extends, forks it, or opens a new one, and gets affinity, an
	// admission program, lineage, hints and traces like a named session.
	// nil routes such requests as isolated calls.
	InferSessions *InferConfig
	// Hints are evaluated when a turn is routed or resumed, at every tick
	// for sessions between turns, and when a session ends; the hints go to
	// workers that implement HintReceiver.
	Hints []kvhint.Policy
	// SharedPool, if set, credits each worker with the shared-pool pages
	// beyond everything it holds itself (Cost.SharedWeight per block).
	// Requests must carry Tokens for the pool's page hashes.
	SharedPool *sharedpool.Pool
	// Trace, if set, receives a request_end record per finished request.
	Trace TraceSink
	// HashCacheTokens bounds, in prompt tokens covered, the per-session
	// prompt cache that lets an agent turn hash only the blocks it appended
	// (the resent prefix is verified first, by a keyed fingerprint per
	// 1,024-token chunk). An entry costs 8 bytes per block (0.5 B per token
	// at block size 16). 0 means DefaultHashCacheTokens; negative disables
	// it.
	HashCacheTokens int
	// Logger receives warnings (rejected events, gaps); nil discards.
	Logger *slog.Logger
	// Metrics, if set, receives the router's metrics.
	Metrics *Metrics
	// IndexSnapshot, if set, is a flashindex snapshot New restores the
	// index from (a replica starting warm; see replicas.go).
	IndexSnapshot io.Reader
}

// fill checks c and fills its defaults (New's first step).
func (c *Config) fill() error {
	switch {
	case c.BlockSize < 1 || c.BlockSize > flashindex.MaxBlockSize:
		return fmt.Errorf("agentkv: Config.BlockSize must be in [1, %d], got %d", flashindex.MaxBlockSize, c.BlockSize)
	case c.Policy > GlobalLB:
		return fmt.Errorf("agentkv: unknown Config.Policy %d", c.Policy)
	case c.BusyThreshold < 0:
		return fmt.Errorf("agentkv: Config.BusyThreshold must be ≥ 0, got %v", c.BusyThreshold)
	case c.Index > IndexApproximate:
		return fmt.Errorf("agentkv: unknown Config.Index %d", c.Index)
	case c.Admission != nil && c.AdmissionPolicy != nil:
		return errors.New("agentkv: set Config.Admission or Config.AdmissionPolicy, not both")
	case c.Admission != nil && c.Admission.OnDecision != nil:
		return errors.New("agentkv: Config.Admission.OnDecision must be nil; the router consumes decisions")
	}
	if err := c.Cost.validate(); err != nil {
		return err
	}
	c.Cost = c.Cost.withDefaults()
	if c.AffinityTTL == 0 {
		c.AffinityTTL = 10 * time.Minute
	}
	if c.ApproxTTL == 0 {
		c.ApproxTTL = flashindex.DefaultApproxTTL
	}
	if c.RequestTTL == 0 {
		c.RequestTTL = 10 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.HashCacheTokens == 0 {
		c.HashCacheTokens = DefaultHashCacheTokens
	}
	return c.fillLifecycle()
}

// fillLifecycle fills the lifecycle defaults of c and checks them.
func (c *Config) fillLifecycle() error {
	switch {
	case c.TickInterval < 0:
		return fmt.Errorf("agentkv: Config.TickInterval must be ≥ 0, got %v", c.TickInterval)
	case c.HeldTTL < 0:
		return fmt.Errorf("agentkv: Config.HeldTTL must be ≥ 0, got %v", c.HeldTTL)
	case c.MaxHeld < 0:
		return fmt.Errorf("agentkv: Config.MaxHeld must be ≥ 0, got %d", c.MaxHeld)
	}
	if c.TickInterval == 0 {
		c.TickInterval = DefaultTickInterval
		if c.Admission != nil && c.Admission.Interval > 0 {
			c.TickInterval = c.Admission.Interval
		}
	}
	if c.Ticker == nil {
		c.Ticker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	if c.HeldTTL == 0 {
		c.HeldTTL = DefaultHeldTTL
	}
	if c.MaxHeld == 0 {
		c.MaxHeld = DefaultMaxHeld
	}
	return nil
}
