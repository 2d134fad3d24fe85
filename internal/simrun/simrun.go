// Package simrun runs a trace.Workload on a cluster of simulated engines
// (engine/sim) routed by the real agentkv.Router, for the CLI's simulate
// command and for tests that compare routing and admission policies.
//
// The engines feed the router's index through Router.ApplyEvent, the same
// event path a vLLM adapter uses, and every request goes through
// Router.TryRoute; this package only translates between the replay's
// virtual clock and request objects and the router's API. It has no routing
// logic of its own.
//
// The baselines a sweep compares admission against are plain KV-aware
// routing ("kv") and KV-aware routing with the best fixed global
// concurrency cap ("kv+cap", Policy.BestCap: each level is run with the
// caps of CapCandidates and none, and the run with the best steady-state
// throughput is kept; the uncapped candidate is the kv run itself when kv
// is in the same sweep); "global-lb" is VERL's default rollout balancer
// (agentkv.GlobalLB: sticky per session, else the fewest requests in
// flight), the baseline of RL rollouts. "kv+admission" runs AdmissionConfig,
// "kv+admission:upstream" ThunderAgent's defaults.
//
// Options.Batch runs RL rollout steps instead of a closed loop: each step
// offers Concurrency programs at once (Batch picks them), refills nothing
// and ends with its last program; Options.Steps runs several in a row on
// one router, the engines replaced by flushed ones and the router's index
// cleared (an AllBlocksCleared per worker) between steps, as a weight
// update does, while sessions, admission's learned state and the clock go
// on. A BestCap policy then keeps the cap with the shortest makespan.
//
// Policies with KV hints (Policy.Hints) add the router's kvhint policies;
// every simulated worker implements agentkv.HintReceiver and hands the
// envelopes to its engine, which applies them at its next step (see
// engine/sim's manual, "KV hints"). Run the hint study with
// AGENTKV_HINT_STUDY=1 go test ./internal/simrun -run TestHintStudy -v.
package simrun

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
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
	// Priority runs the engines with vLLM's priority scheduling
	// (sim.Config.Priority); every request carries its admission priority
	// (the resume boost, the soft-demote penalty) as a vLLM priority,
	// −round(Decision.Admission.Priority): more urgent is lower.
	Priority bool
}

// Policy is a named router configuration to compare.
type Policy struct {
	Name      string
	Select    agentkv.Policy
	Affinity  agentkv.AffinityMode
	Admission *admission.Config
	// Hints are the router's KV hint policies (agentkv.Config.Hints).
	// They must be safe for concurrent use: Sweep shares them between
	// runs (the kvhint built-ins are).
	Hints []kvhint.Policy
	// BestCap makes Sweep run each concurrency level once per cap of
	// CapCandidates (Options.MaxRunning) and keep the run with the best
	// steady-state throughput: the strongest simple baseline, a fixed
	// global concurrency cap tuned per load.
	BestCap bool
}

// CapCandidates returns the global concurrency caps a BestCap policy tries
// at concurrency level: 6, 8, 12 and 16 programs per worker, those below
// level (none for level 0, no bound).
func CapCandidates(level, workers int) []int {
	var out []int
	for _, k := range []int{6, 8, 12, 16} {
		if c := k * workers; c < level {
			out = append(out, c)
		}
	}
	return out
}

// Policies are the built-in policies, by name, in the order a sweep runs
// them. The "kv+hint:*" policies add one kvhint built-in each to KV-aware
// routing, "kv+hints" all four (see HintPolicies); tail (demote/prefetch)
// and share mean little without a host tier (Cluster.HostBlocks).
var Policies = []Policy{
	{Name: "round-robin", Select: agentkv.RoundRobin},
	{Name: "random", Select: agentkv.Random},
	{Name: "global-lb", Select: agentkv.GlobalLB},
	{Name: "kv", Select: agentkv.KVAware},
	{Name: "kv+cap", Select: agentkv.KVAware, BestCap: true},
	{Name: "kv+affinity", Select: agentkv.KVAware, Affinity: agentkv.AffinitySoft},
	{Name: "kv+admission", Select: agentkv.KVAware, Admission: &AdmissionConfig},
	{Name: "kv+admission:upstream", Select: agentkv.KVAware, Admission: &admission.Config{}},
	{Name: "kv+hint:tail", Select: agentkv.KVAware, Hints: []kvhint.Policy{hintPolicies.Tail}},
	{Name: "kv+hint:pin", Select: agentkv.KVAware, Hints: []kvhint.Policy{hintPolicies.Pin}},
	{Name: "kv+hint:share", Select: agentkv.KVAware, Hints: []kvhint.Policy{hintPolicies.Share}},
	{Name: "kv+hint:release", Select: agentkv.KVAware, Hints: []kvhint.Policy{hintPolicies.Release}},
	{Name: "kv+hints", Select: agentkv.KVAware, Hints: hintPolicies.All()},
}

// AdmissionConfig is the admission the "kv+admission" policy runs,
// admission.Agentic (what the proxy's --admission runs too). (A half acting
// weight, measured against it at 64-512 programs on the synthetic, tiled
// Claude Code and SWE-bench-shaped workloads and two seeds, was 1 % better
// at one level, even at another, and 1.5-9 % worse at the rest.)
// "kv+admission:upstream" is ThunderAgent's configuration as Dynamo ports
// it (admission.Config{}).
var AdmissionConfig = admission.Agentic()

// HintPolicies are the kvhint built-ins the "kv+hint*" policies use.
type HintPolicies struct {
	// Tail demotes a session's unique tail to the host after 30 s of
	// ACTING (between turns: a tool call or a user's reply) and
	// prefetches the colder prefix blocks back to the device when its
	// next turn is routed.
	Tail kvhint.Policy
	// Pin pins, for 5 minutes renewed every turn, the shared prefix that
	// at least 4 live sessions reference (the system prompt).
	Pin kvhint.Policy
	// Share names the two best peers when the chosen worker lacks at
	// least 16 blocks (256 tokens) of the prefix that another worker
	// holds on device or host. Every simulated worker advertises an
	// endpoint ("sim://<id>", WorkerInfo.Endpoint); the engine copies the
	// blocks over the simulated fabric (engine/sim: Share).
	Share kvhint.Policy
	// Release releases the blocks only a finished session referenced.
	Release kvhint.Policy
}

// All returns the four policies in a fixed order.
func (h HintPolicies) All() []kvhint.Policy {
	return []kvhint.Policy{h.Tail, h.Pin, h.Share, h.Release}
}

var hintPolicies = mustHintPolicies()

func mustHintPolicies() HintPolicies {
	tail, err1 := kvhint.NewTailOffload(kvhint.TailOffloadConfig{After: 30 * time.Second})
	pin, err2 := kvhint.NewPrefixPin(kvhint.PrefixPinConfig{MinSessions: 4, TTL: 5 * time.Minute})
	share, err3 := kvhint.NewPeerShare(kvhint.PeerShareConfig{MinGain: 16, MaxSources: 2, SourceHost: true})
	release, err4 := kvhint.NewFinishRelease(kvhint.FinishReleaseConfig{})
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		panic(err) // constant configurations: a programming error
	}
	return HintPolicies{Tail: tail, Pin: pin, Share: share, Release: release}
}

// BuiltinHintPolicies returns the kvhint policies the built-in "kv+hint*"
// policies use.
func BuiltinHintPolicies() HintPolicies { return hintPolicies }

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
	// MaxRunning is a fixed global concurrency cap at the door
	// (sim.ReplayConfig.MaxRunning); 0 means none.
	MaxRunning int
	// TTFTSLO is the goodput objective (sim.ReplayConfig.TTFTSLO).
	TTFTSLO time.Duration
	// Batch runs rollout steps instead of a closed loop: each step offers
	// Concurrency programs (Batch: the next ones of the workload; 0: all)
	// at once with no refills and ends with its last program. The result
	// is the makespan (first offer to last end), throughput over it,
	// program completion and the engines' busy share (1 − idle).
	Batch bool
	// Steps is how many batches run in a row (default 1), the engines'
	// prefix caches flushed and the router's index cleared between them,
	// as a weight update does; the result sums them (see mergeSteps).
	Steps int
	// InferSessions routes every request without its session id: the
	// router infers sessions from the blocks (agentkv.InferConfig with
	// ScopeParent; a request's client is its root session, and an
	// inferred session ends when every true session routed into it has
	// finished its last turn, as clients that close their connections).
	InferSessions bool

	// onDone, if set (by tests), sees the router, the engines and the
	// requests of a run that succeeded.
	onDone func(*agentkv.Router, []*sim.Engine, []*sim.Request)
}

// Result is what one run measured.
type Result struct {
	Policy      string `json:"policy"`
	Concurrency int    `json:"concurrency"`
	WorkerCount int    `json:"worker_count"`
	// Cap is the global concurrency cap the run used (0: none); for a
	// BestCap policy, the best of CapsTried.
	Cap       int   `json:"cap,omitempty"`
	CapsTried []int `json:"caps_tried,omitempty"`
	*sim.Result
	Admission admission.Stats `json:"admission"`
	// Hints sums the engines' hint counters (sim.HintStats.Add).
	Hints sim.HintStats `json:"hints"`
	// Wall is the real time the run took.
	Wall time.Duration `json:"wall_ns"`
	// Batch and RolloutSteps say the run was RolloutSteps rollout steps
	// (Options.Batch, Options.Steps; sim.Result.Steps counts engine steps).
	Batch        bool `json:"batch,omitempty"`
	RolloutSteps int  `json:"rollout_steps,omitempty"`
	// SameAs names the policy of the same sweep whose run this result
	// is, when Sweep did not run it twice (a BestCap policy's uncapped
	// candidate is that run of the policy with its router configuration).
	SameAs string `json:"same_as,omitempty"`
}

// Run replays w once: in closed loop (or open loop, as the workload says),
// or with Options.Batch as Options.Steps rollout steps.
func Run(w *trace.Workload, opt Options) (*Result, error) {
	start := time.Now()
	cl := opt.Cluster
	if cl.Workers <= 0 {
		return nil, errors.New("simrun: Cluster.Workers must be ≥ 1")
	}
	if cl.BlockSize == 0 {
		cl.BlockSize = sim.DefaultBlockSize
	}
	if opt.Steps < 0 {
		return nil, fmt.Errorf("simrun: Options.Steps must be ≥ 0, got %d", opt.Steps)
	}
	steps := []*trace.Workload{w}
	maxActive := opt.Concurrency
	if opt.Batch {
		steps = steps[:0]
		for k := range max(opt.Steps, 1) {
			bw, err := Batch(w, opt.Concurrency, k)
			if err != nil {
				return nil, err
			}
			steps = append(steps, bw)
		}
		maxActive = 0 // every program of the step at once, no refills
	}
	g := &glue{base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), decisions: map[uint64]*agentkv.Decision{},
		evNext: make([]uint64, cl.Workers), evBase: make([]uint64, cl.Workers)}
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
		Hints:      opt.Policy.Hints,
	}
	if opt.Policy.Admission != nil {
		ac := *opt.Policy.Admission
		rcfg.Admission = &ac
	}
	if opt.InferSessions {
		rcfg.InferSessions = &agentkv.InferConfig{ScopeParent: true}
		g.client, g.users, g.in = map[string]string{}, map[string]map[string]bool{}, map[string][]string{}
		for _, s := range w.Sessions {
			root := s.ID
			for p := s.Parent; p != ""; {
				root, p = p, ""
				for _, q := range w.Sessions {
					if q.ID == root {
						p = q.Parent
						break
					}
				}
			}
			g.client[s.ID] = root
		}
	}
	r, err := agentkv.New(rcfg)
	if err != nil {
		return nil, err
	}
	g.r = r
	workers := make([]*worker, cl.Workers)
	var results []*sim.Result
	var reqs [][]*sim.Request
	var engines []*sim.Engine
	for k, sw := range steps {
		if k > 0 {
			// A weight update: the engines' caches are flushed (new
			// engines) and the router's index learns it as an
			// AllBlocksCleared per worker; sessions, admission and the
			// clock go on.
			if err := g.flush(); err != nil {
				return nil, err
			}
			// The next step starts when this one ended (its last
			// completion, or a later tick the router saw).
			g.offset += max(results[k-1].Makespan, g.cur)
			g.cur = 0
			g.idBase += 1 << 40
		}
		g.lastTurn = map[string]int{}
		for _, s := range sw.Sessions {
			g.lastTurn[s.ID] = len(s.Turns) - 1
		}
		engines = make([]*sim.Engine, cl.Workers)
		for i := range engines {
			key := flashindex.Worker{ID: uint64(i)}
			e, err := sim.New(sim.Config{Worker: key, BlockSize: cl.BlockSize, DeviceBlocks: cl.DeviceBlocks,
				HostBlocks: cl.HostBlocks, MaxBatch: cl.MaxBatch, MaxBatchedTokens: cl.MaxBatchedTokens, Timing: cl.Timing,
				Priority: cl.Priority},
				g.sink(i))
			if err != nil {
				return nil, err
			}
			engines[i] = e
			if k > 0 {
				workers[i].e = e
				continue
			}
			info := agentkv.WorkerInfo{ID: key.ID, BlockSize: cl.BlockSize, KVCapacityTokens: e.Config().DeviceBlocks * cl.BlockSize,
				Endpoint: "sim://" + strconv.FormatUint(key.ID, 10)}
			workers[i] = &worker{info: info, e: e}
			if err := r.AddWorker(workers[i]); err != nil {
				return nil, err
			}
		}
		g.engines, g.blockSize = engines, cl.BlockSize
		rp, err := sim.NewReplay(sw, engines, g, sim.ReplayConfig{TickInterval: opt.TickInterval, MaxActiveSessions: maxActive,
			MaxRunning: opt.MaxRunning, TTFTSLO: opt.TTFTSLO})
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
		results = append(results, res)
		reqs = append(reqs, rp.Requests())
		if opt.onDone != nil && k == len(steps)-1 {
			opt.onDone(r, engines, rp.Requests())
		}
	}
	res := results[0]
	if len(results) > 1 {
		res = mergeSteps(results, reqs)
	}
	out := &Result{Policy: opt.Policy.Name, Concurrency: opt.Concurrency, WorkerCount: cl.Workers, Cap: opt.MaxRunning, Result: res,
		Admission: r.AdmissionStats(), Batch: opt.Batch}
	if opt.Batch {
		out.RolloutSteps = len(steps)
	}
	for _, e := range engines {
		st := e.Stats().Hints
		out.Hints.Add(&st)
	}
	out.Wall = time.Since(start)
	return out, nil
}

// worker is a simulated engine as the router sees it: its WorkerInfo, and
// the engine as the sink of its KV hints. The engine's Send queues without
// blocking; the replay calls the router, and so Send, on its goroutine.
type worker struct {
	info agentkv.WorkerInfo
	e    *sim.Engine
}

func (w *worker) Info() agentkv.WorkerInfo { return w.info }

// HintSink implements agentkv.HintReceiver.
func (w *worker) HintSink() kvhint.Sink { return w.e }

// glue adapts agentkv.Router to sim.Router. The replay calls it from one
// goroutine, so it needs no locking.
type glue struct {
	r         *agentkv.Router
	base      time.Time
	cur       time.Duration
	decisions map[uint64]*agentkv.Decision
	released  []uint64
	lastTurn  map[string]int
	client    map[string]string // with InferSessions: each session's root
	// users holds, per inferred session, the true sessions routed into it
	// and whether each has finished: it ends when all have.
	users map[string]map[string]bool
	// in holds, per true session, the inferred sessions it was routed
	// into: its last turn finishing marks it done in every one of them.
	in  map[string][]string
	err error
	// engines report their KV in use to admission before each Tick, as
	// the proxy reads it from each worker's /metrics.
	engines   []*sim.Engine
	blockSize int
	// Batch steps: offset is the virtual time of the step's start (the
	// replay's clock restarts at 0), idBase the step's request-id base;
	// each step's engines number their KV events from 0, so evBase[i]
	// shifts worker i's past what the index saw (evNext[i]).
	offset         time.Duration
	idBase         uint64
	evBase, evNext []uint64
}

// sink is worker i's event sink: its engine's KV events to the router's
// index, numbered on from the previous steps' engines.
func (g *glue) sink(i int) sim.EventSink {
	g.evBase[i] = g.evNext[i]
	return sim.EventSinkFunc(func(ev *flashindex.Event) error {
		ev.EventID += g.evBase[i]
		g.evNext[i] = ev.EventID + 1
		return g.r.ApplyEvent(ev)
	})
}

// flush tells the router's index that every worker's cache is empty.
func (g *glue) flush() error {
	for i := range g.evNext {
		ev := &flashindex.Event{Worker: flashindex.Worker{ID: uint64(i)}, EventID: g.evNext[i], Kind: flashindex.Cleared,
			BlockSize: g.blockSize}
		g.evNext[i]++
		if err := g.r.ApplyEvent(ev); err != nil {
			return err
		}
	}
	return nil
}

func (g *glue) now() time.Time { return g.base.Add(g.offset + g.cur) }

func (g *glue) onRelease(id string, dropped error) {
	if dropped != nil && g.client == nil {
		return // the session ended while its turn was held
	}
	// With InferSessions, the inferred session a held turn was placed in
	// can end under it (another true session merged into it finished):
	// the turn is routed again, into the session inferred for it then.
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		g.err = fmt.Errorf("simrun: released unknown request id %q", id)
		return
	}
	g.released = append(g.released, n-g.idBase)
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
		ID:                   strconv.FormatUint(g.idBase+req.ID, 10),
		SequenceHashes:       req.SeqHashes,
		InputTokens:          req.InputTokens,
		ExpectedOutputTokens: req.OutputTokens,
		Agent:                g.agent(req),
		Client:               g.client[req.Session],
	})
	if errors.Is(err, agentkv.ErrHeld) {
		return sim.Decision{Hold: true}, nil
	}
	if err != nil {
		return sim.Decision{}, err
	}
	g.decisions[req.ID] = d
	if a := d.Agent(); g.users != nil && a.Inferred {
		if g.users[a.SessionID] == nil {
			g.users[a.SessionID] = map[string]bool{}
		}
		if _, ok := g.users[a.SessionID][req.Session]; !ok {
			g.users[a.SessionID][req.Session] = false
			g.in[req.Session] = append(g.in[req.Session], a.SessionID)
		}
	}
	req.Priority = -int(math.Round(d.Admission.Priority))
	return sim.Decision{Worker: int(d.Worker.ID)}, nil
}

// agent is req's identity: none with InferSessions.
func (g *glue) agent(req *sim.Request) session.AgentContext {
	if g.client != nil {
		return session.AgentContext{}
	}
	return session.AgentContext{SessionID: req.Session, ParentSessionID: req.Parent}
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
	id := req.Session
	if d := g.decisions[req.ID]; d != nil {
		delete(g.decisions, req.ID)
		d.Done(agentkv.Usage{PromptTokens: req.InputTokens, CompletionTokens: req.OutputTokens,
			CachedTokens: req.CachedTokens, Failed: req.Rejected})
		if g.client != nil {
			id = d.Agent().SessionID
		}
	}
	if last, ok := g.lastTurn[req.Session]; ok && req.Turn >= last {
		if g.users == nil {
			if id != "" {
				g.r.EndSession(id)
			}
			return g.takeReleased()
		}
		// The true session is over in every inferred session it was routed
		// into (its turns may have been split between some), not only in
		// its last turn's, which may have been inferred into none: one
		// left waiting for it would run forever.
		for _, inf := range g.in[req.Session] {
			g.userDone(inf, req.Session)
		}
		delete(g.in, req.Session)
		if id != "" && id != req.Session {
			g.userDone(id, req.Session)
		}
	}
	return g.takeReleased()
}

// userDone marks true session user finished in inferred session id, and
// ends id once every true session routed into it has finished.
func (g *glue) userDone(id, user string) {
	u := g.users[id]
	if u == nil {
		return
	}
	u[user] = true
	for _, done := range u {
		if !done {
			return // another true session still runs in it
		}
	}
	delete(g.users, id)
	g.r.EndSession(id)
}

// Tick implements sim.Router.
func (g *glue) Tick(now time.Duration) []uint64 {
	g.cur = now
	for i, e := range g.engines {
		g.r.SetEngineUsage(flashindex.Worker{ID: uint64(i)}, int64(e.UsedBlocks()*g.blockSize))
	}
	g.r.Tick()
	return g.takeReleased()
}

// sweepJob is one run of a sweep: cell (policy × level) and cap; same is
// the job whose run it reuses (−1: none). A BestCap policy's uncapped
// candidate is the very run of a policy in the sweep with the same router
// configuration (kv+cap's "none" is kv), and runs are deterministic, so it
// is not run twice.
type sweepJob struct{ cell, capv, same int }

func planSweep(policies []Policy, levels []int, workers int) []sweepJob {
	var jobList []sweepJob
	for i := range len(policies) * len(levels) {
		p, l := policies[i/len(levels)], levels[i%len(levels)]
		jobList = append(jobList, sweepJob{i, 0, -1}) // for BestCap, no cap is a candidate too
		if p.BestCap {
			for _, c := range CapCandidates(l, workers) {
				jobList = append(jobList, sweepJob{i, c, -1})
			}
		}
	}
	for a := range jobList {
		ja := &jobList[a]
		if ja.capv != 0 || !policies[ja.cell/len(levels)].BestCap {
			continue
		}
		for b, jb := range jobList {
			if jb.capv == 0 && jb.same < 0 && jb.cell%len(levels) == ja.cell%len(levels) &&
				!policies[jb.cell/len(levels)].BestCap && sameRouter(policies[ja.cell/len(levels)], policies[jb.cell/len(levels)]) {
				ja.same = b
				break
			}
		}
	}
	return jobList
}

// SweepRuns returns how many runs Sweep makes for policies × levels on
// workers workers (BestCap cells run once per cap candidate; runs another
// cell shares are made once).
func SweepRuns(policies []Policy, levels []int, workers int) int {
	n := 0
	for _, j := range planSweep(policies, levels, workers) {
		if j.same < 0 {
			n++
		}
	}
	return n
}

// Sweep runs every policy at every concurrency level on w, up to parallel
// runs at once (each run is single-threaded and deterministic, so the
// results do not depend on parallel). progress, if set, is called after
// each run from the goroutine that ran it, serialised. Results come back
// ordered by policy, then concurrency.
func Sweep(w *trace.Workload, base Options, policies []Policy, levels []int, parallel int,
	progress func(done, total int, r *Result)) ([]*Result, error) {
	jobList := planSweep(policies, levels, base.Cluster.Workers)
	var run []int // the jobs that run
	for i, j := range jobList {
		if j.same < 0 {
			run = append(run, i)
		}
	}
	n := len(run)
	results := make([]*Result, len(jobList))
	errs := make([]error, len(jobList))
	if parallel < 1 {
		parallel = 1
	}
	jobs := make(chan int)
	doneCh := make(chan int)
	for k := 0; k < parallel; k++ {
		go func() {
			for i := range jobs {
				j := jobList[i]
				opt := base
				opt.Policy = policies[j.cell/len(levels)]
				opt.Concurrency = levels[j.cell%len(levels)]
				opt.MaxRunning = j.capv
				results[i], errs[i] = Run(w, opt)
				doneCh <- i
			}
		}()
	}
	go func() {
		for _, i := range run {
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
			j := jobList[i]
			return nil, fmt.Errorf("simrun: %s at concurrency %d (cap %d): %w", policies[j.cell/len(levels)].Name, levels[j.cell%len(levels)], j.capv, err)
		}
	}
	for i, j := range jobList {
		if j.same >= 0 {
			r := *results[j.same]
			r.Policy, r.SameAs, r.CapsTried = policies[j.cell/len(levels)].Name, r.Policy, nil
			results[i] = &r
		}
	}
	// One result per cell: a BestCap cell keeps its best run.
	out := make([]*Result, len(policies)*len(levels))
	for i, r := range results {
		c := jobList[i].cell
		if b := out[c]; b == nil || r.SteadyThroughput() > b.SteadyThroughput() {
			out[c] = r
		}
	}
	for i, r := range results {
		if policies[jobList[i].cell/len(levels)].BestCap {
			b := out[jobList[i].cell]
			b.CapsTried = append(b.CapsTried, r.Cap)
		}
	}
	return out, nil
}

// sameRouter reports whether a and b configure the router identically
// (names and BestCap aside): then a run of one at a level, without a cap,
// is a run of the other.
func sameRouter(a, b Policy) bool {
	return a.Select == b.Select && a.Affinity == b.Affinity && a.Admission == nil && b.Admission == nil &&
		len(a.Hints) == 0 && len(b.Hints) == 0
}

// SteadyThroughput is what a sweep compares policies by: the throughput in
// the steady-state window (sim.Window), or over the whole run where the
// run had none.
func (r *Result) SteadyThroughput() float64 {
	if r.Window.Steady {
		return r.WindowThroughput
	}
	return r.Throughput
}
