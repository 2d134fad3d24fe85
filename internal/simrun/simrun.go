// Package simrun runs a trace.Workload on a cluster of simulated engines
// (engine/sim) routed by the real agentkv.Router, for the CLI's simulate
// command and for tests that compare routing and admission policies.
//
// The engines feed the router's index through Router.ApplyEvent, the same
// event path a vLLM adapter uses, and every request goes through
// Router.TryRoute; this package only translates between the replay's
// virtual clock and request objects and the router's API. It has no routing
// logic of its own.
package simrun

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
	"github.com/agentkv/agentkv/trace"
)

// Cluster describes the simulated workers. Zero fields mean the engine/sim
// defaults.
type Cluster struct {
	Workers          int
	BlockSize        int
	DeviceBlocks     int
	HostBlocks       int
	MaxBatch         int
	MaxBatchedTokens int
	Timing           sim.Timing
}

// Policy is a named router configuration to compare.
type Policy struct {
	Name      string
	Select    agentkv.Policy
	Affinity  agentkv.AffinityMode
	Admission *admission.Config
}

// Policies are the built-in policies, by name, in the order a sweep runs
// them.
var Policies = []Policy{
	{Name: "round-robin", Select: agentkv.RoundRobin},
	{Name: "random", Select: agentkv.Random},
	{Name: "kv", Select: agentkv.KVAware},
	{Name: "kv+affinity", Select: agentkv.KVAware, Affinity: agentkv.AffinitySoft},
	{Name: "kv+admission", Select: agentkv.KVAware, Admission: &admission.Config{}},
}

// PolicyByName returns a built-in policy.
func PolicyByName(name string) (Policy, error) {
	for _, p := range Policies {
		if p.Name == name {
			return p, nil
		}
	}
	names := make([]string, len(Policies))
	for i, p := range Policies {
		names[i] = p.Name
	}
	return Policy{}, fmt.Errorf("simrun: unknown policy %q (have %v)", name, names)
}

// Options is one run.
type Options struct {
	Cluster Cluster
	Policy  Policy
	// Concurrency bounds the agent programs running at once in
	// closed-loop replay (0: all sessions start at their Start).
	Concurrency int
	Seed        uint64
	// TickInterval is the control-loop period (default 5 s).
	TickInterval time.Duration
}

// Result is what one run measured.
type Result struct {
	Policy      string `json:"policy"`
	Concurrency int    `json:"concurrency"`
	WorkerCount int    `json:"worker_count"`
	*sim.Result
	Admission admission.Stats `json:"admission"`
	// Wall is the real time the run took.
	Wall time.Duration `json:"wall_ns"`
}

// Run replays w once.
func Run(w *trace.Workload, opt Options) (*Result, error) {
	start := time.Now()
	cl := opt.Cluster
	if cl.Workers <= 0 {
		return nil, errors.New("simrun: Cluster.Workers must be ≥ 1")
	}
	if cl.BlockSize == 0 {
		cl.BlockSize = sim.DefaultBlockSize
	}
	g := &glue{base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), decisions: map[uint64]*agentkv.Decision{},
		lastTurn: map[string]int{}}
	for _, s := range w.Sessions {
		g.lastTurn[s.ID] = len(s.Turns) - 1
	}
	rcfg := agentkv.Config{
		BlockSize: cl.BlockSize,
		Policy:    opt.Policy.Select,
		Affinity:  opt.Policy.Affinity,
		Now:       g.now,
		Seed:      opt.Seed,
		OnRelease: g.onRelease,
		// Virtual time runs fast; a request is never silent for an hour.
		RequestTTL: time.Hour,
		Sessions:   session.TableConfig{MaxSessions: 1 << 20, IdleTimeout: 24 * time.Hour},
	}
	if opt.Policy.Admission != nil {
		ac := *opt.Policy.Admission
		rcfg.Admission = &ac
	}
	r, err := agentkv.New(rcfg)
	if err != nil {
		return nil, err
	}
	g.r = r
	engines := make([]*sim.Engine, cl.Workers)
	for i := range engines {
		key := flashindex.Worker{ID: uint64(i)}
		e, err := sim.New(sim.Config{Worker: key, BlockSize: cl.BlockSize, DeviceBlocks: cl.DeviceBlocks,
			HostBlocks: cl.HostBlocks, MaxBatch: cl.MaxBatch, MaxBatchedTokens: cl.MaxBatchedTokens, Timing: cl.Timing},
			sim.EventSinkFunc(r.ApplyEvent))
		if err != nil {
			return nil, err
		}
		engines[i] = e
		capTokens := e.Config().DeviceBlocks * cl.BlockSize
		if err := r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo {
			return agentkv.WorkerInfo{ID: key.ID, BlockSize: cl.BlockSize, KVCapacityTokens: capTokens}
		})); err != nil {
			return nil, err
		}
	}
	rp, err := sim.NewReplay(w, engines, g, sim.ReplayConfig{TickInterval: opt.TickInterval, MaxActiveSessions: opt.Concurrency})
	if err != nil {
		return nil, err
	}
	res, err := rp.Run()
	if err != nil {
		return nil, err
	}
	if g.err != nil {
		return nil, g.err
	}
	return &Result{Policy: opt.Policy.Name, Concurrency: opt.Concurrency, WorkerCount: cl.Workers, Result: res,
		Admission: r.AdmissionStats(), Wall: time.Since(start)}, nil
}

// glue adapts agentkv.Router to sim.Router. The replay calls it from one
// goroutine, so it needs no locking.
type glue struct {
	r         *agentkv.Router
	base      time.Time
	cur       time.Duration
	decisions map[uint64]*agentkv.Decision
	released  []uint64
	lastTurn  map[string]int
	err       error
}

func (g *glue) now() time.Time { return g.base.Add(g.cur) }

func (g *glue) onRelease(id string) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		g.err = fmt.Errorf("simrun: released unknown request id %q", id)
		return
	}
	g.released = append(g.released, n)
}

func (g *glue) takeReleased() []uint64 {
	out := g.released
	g.released = nil
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Route implements sim.Router.
func (g *glue) Route(now time.Duration, req *sim.Request) (sim.Decision, error) {
	g.cur = now
	d, err := g.r.TryRoute(&agentkv.Request{
		ID:                   strconv.FormatUint(req.ID, 10),
		SequenceHashes:       req.SeqHashes,
		InputTokens:          req.InputTokens,
		ExpectedOutputTokens: req.OutputTokens,
		Agent:                session.AgentContext{SessionID: req.Session, ParentSessionID: req.Parent},
	})
	if errors.Is(err, agentkv.ErrHeld) {
		return sim.Decision{Hold: true}, nil
	}
	if err != nil {
		return sim.Decision{}, err
	}
	g.decisions[req.ID] = d
	return sim.Decision{Worker: int(d.Worker.ID)}, nil
}

// FirstToken implements sim.FirstTokenObserver.
func (g *glue) FirstToken(now time.Duration, req *sim.Request) {
	g.cur = now
	if d := g.decisions[req.ID]; d != nil {
		d.FirstToken()
	}
}

// Finished implements sim.Router.
func (g *glue) Finished(now time.Duration, req *sim.Request) []uint64 {
	g.cur = now
	if d := g.decisions[req.ID]; d != nil {
		delete(g.decisions, req.ID)
		d.Done(agentkv.Usage{PromptTokens: req.InputTokens, CompletionTokens: req.OutputTokens,
			CachedTokens: req.CachedTokens, Failed: req.Rejected})
	}
	if last, ok := g.lastTurn[req.Session]; ok && req.Turn >= last {
		g.r.EndSession(req.Session)
	}
	return g.takeReleased()
}

// Tick implements sim.Router.
func (g *glue) Tick(now time.Duration) []uint64 {
	g.cur = now
	g.r.Tick()
	return g.takeReleased()
}

// Sweep runs every policy at every concurrency level on w, up to parallel
// runs at once (each run is single-threaded and deterministic, so the
// results do not depend on parallel). progress, if set, is called after
// each run from the goroutine that ran it, serialised. Results come back
// ordered by policy, then concurrency.
func Sweep(w *trace.Workload, base Options, policies []Policy, levels []int, parallel int,
	progress func(done, total int, r *Result)) ([]*Result, error) {
	n := len(policies) * len(levels)
	results := make([]*Result, n)
	errs := make([]error, n)
	if parallel < 1 {
		parallel = 1
	}
	jobs := make(chan int)
	doneCh := make(chan int)
	for k := 0; k < parallel; k++ {
		go func() {
			for i := range jobs {
				opt := base
				opt.Policy = policies[i/len(levels)]
				opt.Concurrency = levels[i%len(levels)]
				results[i], errs[i] = Run(w, opt)
				doneCh <- i
			}
		}()
	}
	go func() {
		for i := 0; i < n; i++ {
			jobs <- i
		}
		close(jobs)
	}()
	for done := 1; done <= n; done++ {
		i := <-doneCh
		if progress != nil && errs[i] == nil {
			progress(done, n, results[i])
		}
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("simrun: %s at concurrency %d: %w", policies[i/len(levels)].Name, levels[i%len(levels)], err)
		}
	}
	return results, nil
}
