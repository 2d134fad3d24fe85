package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/gateway/failover"
	"github.com/agentkv/agentkv/gateway/translate"
	"github.com/agentkv/agentkv/internal/apiwire"
)

// This file is the worker registry in SMG's shape: POST /workers adds a
// worker at run time, GET /workers/{id} reports it, DELETE /workers/{id}
// drains it (no new requests; those in flight finish) and removes it; the
// SGLang router's older POST /add_worker?url= and /remove_worker?url= are
// aliases. The Stack does the work (AddWorker, RemoveWorker,
// WorkerStatus); the gateway's worker set is copy-on-write, so the
// request path never locks for it.

// workerSet is the gateway's workers: by router ID, and in the order they
// were added (for /tokenize, /v1/models and the control fan-outs). It is
// never modified once stored.
type workerSet struct {
	byID  map[uint64]*worker
	order []*worker
}

// set returns the current worker set.
func (g *Gateway) set() *workerSet { return g.ws.Load() }

// newWorker validates w and returns the gateway's worker for it.
func newWorker(w Worker, client *http.Client) (*worker, error) {
	if w.DPRanks < 0 {
		return nil, fmt.Errorf("%w: worker %d: negative DPRanks", ErrConfig, w.ID)
	}
	c, err := vllm.NewClient(w.URL, client)
	if err != nil {
		return nil, fmt.Errorf("%w: worker %d: %v", ErrConfig, w.ID, err)
	}
	if w.Native == 0 {
		w.Native = Baseline
	}
	return &worker{Worker: w, client: c, idStr: strconv.FormatUint(w.ID, 10)}, nil
}

// addWorker adds w to the worker set (not to the failover tracker: a
// Stack tracks a worker once it joined the router).
func (g *Gateway) addWorker(w Worker) error {
	wk, err := newWorker(w, g.cfg.HTTPClient)
	if err != nil {
		return err
	}
	g.setMu.Lock()
	defer g.setMu.Unlock()
	old := g.set()
	if _, dup := old.byID[w.ID]; dup {
		return fmt.Errorf("%w: worker ID %d twice", ErrConfig, w.ID)
	}
	n := &workerSet{byID: maps.Clone(old.byID), order: append(slices.Clip(old.order), wk)}
	n.byID[w.ID] = wk
	g.ws.Store(n)
	return nil
}

// keepDropped is how many removed workers stay in workerSet.byID: a
// request routed in a drained worker's last moments (it read the
// routable set before the drain began) still finds its address.
const keepDropped = 64

// dropWorker removes worker id from the worker set's order and the
// tracker; byID keeps it among the last keepDropped removed.
func (g *Gateway) dropWorker(id uint64) {
	g.tracker.Remove(id)
	g.setMu.Lock()
	defer g.setMu.Unlock()
	old := g.set()
	if !slices.ContainsFunc(old.order, func(wk *worker) bool { return wk.ID == id }) {
		return
	}
	n := &workerSet{byID: maps.Clone(old.byID)}
	for _, wk := range old.order {
		if wk.ID != id {
			n.order = append(n.order, wk)
		}
	}
	g.dropped = append(g.dropped, id)
	if len(g.dropped) > keepDropped {
		delete(n.byID, g.dropped[0])
		g.dropped = slices.Delete(g.dropped, 0, 1)
	}
	g.ws.Store(n)
}

// WorkerState is a registered worker's state.
type WorkerState string

// The worker states.
const (
	// WorkerJoining: added, not routable yet (its /metrics not read, or
	// its first health probe not answered).
	WorkerJoining WorkerState = "joining"
	// WorkerReady: routable.
	WorkerReady WorkerState = "ready"
	// WorkerFailed: it cannot be routed to (a block size or KV capacity
	// the router cannot use, or its health probes fail).
	WorkerFailed WorkerState = "failed"
	// WorkerDraining: leaving: no new requests, those in flight finish.
	WorkerDraining WorkerState = "draining"
	// WorkerRemoved: gone from the router, the index and admission.
	WorkerRemoved WorkerState = "removed"
)

// The stackWorker.state values.
const (
	stateJoining int32 = iota
	stateJoined
	stateFailed
	stateDraining
	stateRemoved
)

// setState moves the worker from one state to another (false when it was
// not in from), recording err for stateFailed.
func (w *stackWorker) setState(from, to int32, err error) bool {
	if err != nil {
		msg := err.Error()
		w.failMsg.Store(&msg)
	}
	return w.state.CompareAndSwap(from, to)
}

// leaving reports whether the worker's drain began.
func (w *stackWorker) leaving() bool { return w.state.Load() >= stateDraining }

// Registry errors; the HTTP API answers them 404, 409 and 400.
var (
	ErrNoSuchWorker    = errors.New("gateway: no such worker")
	ErrWorkerExists    = errors.New("gateway: a worker with this URL is registered")
	ErrBadWorkerConfig = errors.New("gateway: bad worker config")
	errDraining        = errors.New("gateway: the worker is draining")
)

// DrainTimeout bounds how long RemoveWorker waits for a worker's requests
// in flight to finish; past it the worker is removed all the same (its
// requests still finish on it, uncounted).
const DrainTimeout = 10 * time.Minute

// drainPoll is how often a drain reads the worker's requests in flight.
const drainPoll = 20 * time.Millisecond

// maxRemovedKept bounds the removed workers GET /workers/{id} remembers.
const maxRemovedKept = 1024

// WorkerStatus is what the registry reports of a worker.
type WorkerStatus struct {
	ID        uint64      `json:"id"`
	URL       string      `json:"url"`
	Status    WorkerState `json:"status"`
	Healthy   bool        `json:"healthy"`
	DPSize    int         `json:"dp_size"`
	Events    string      `json:"events,omitempty"`
	Replay    string      `json:"replay,omitempty"`
	APIs      []string    `json:"apis"`
	TokenAPIs []string    `json:"token_apis"`
	Hints     string      `json:"hints,omitempty"`
	// Engine is "sglang" for an SGLang worker (absent: vLLM).
	Engine string `json:"engine,omitempty"`
	// InFlight is the router's count of its requests in flight.
	InFlight int    `json:"in_flight"`
	Error    string `json:"error,omitempty"`
}

// list returns the workers (none removed).
func (s *Stack) list() []*stackWorker {
	all := *s.set.Load()
	out := make([]*stackWorker, 0, len(all))
	for _, w := range all {
		if w != nil {
			out = append(out, w)
		}
	}
	return out
}

// worker returns worker id, nil when unknown or removed.
func (s *Stack) worker(id uint64) *stackWorker {
	all := *s.set.Load()
	if id >= uint64(len(all)) {
		return nil
	}
	return all[id]
}

// inFlight is the router's count of requests in flight on w (all ranks).
func (s *Stack) inFlight(w *stackWorker) int {
	n := 0
	for rank := range w.ranks() {
		n += s.router.OwnLoad(flashindex.Worker{ID: w.id, DPRank: uint32(rank)}).Requests
	}
	return n
}

// AddWorker registers a worker at run time and returns its ID (IDs are
// not reused). It returns at once: the worker is joining; it joins the
// router once it answers (its KV capacity from /metrics, as at start) and
// takes requests from its first good health probe (WorkerStatus says
// ready). A URL already registered is ErrWorkerExists.
func (s *Stack) AddWorker(ctx context.Context, spec WorkerSpec) (uint64, error) {
	if _, err := vllm.NewClient(spec.URL, nil); err != nil {
		return 0, fmt.Errorf("%w: url %q: want an http:// or https:// base URL", ErrBadWorkerConfig, spec.URL)
	}
	if spec.Replay != "" && spec.Events == "" {
		return 0, fmt.Errorf("%w: replay needs events", ErrBadWorkerConfig)
	}
	if s.bg.Err() != nil {
		return 0, ErrClosed
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	url := strings.TrimRight(spec.URL, "/")
	for _, w := range s.list() {
		if strings.TrimRight(w.spec.URL, "/") == url {
			return 0, fmt.Errorf("%w: %s is worker %d", ErrWorkerExists, spec.URL, w.id)
		}
	}
	all := *s.set.Load()
	w := &stackWorker{spec: spec, id: uint64(len(all))}
	w.hints = s.workerHints(w)
	jctx, stop := context.WithCancel(s.bg)
	w.stop = stop
	if err := s.gw.addWorker(w.gatewayWorker()); err != nil {
		stop()
		return 0, fmt.Errorf("%w: %v", ErrBadWorkerConfig, err)
	}
	next := append(slices.Clip(all), w)
	s.set.Store(&next)
	s.wg.Add(1)
	go s.await(jctx, w, false)
	s.log.Info("gateway: worker added", "worker", spec.URL, "id", w.id)
	return w.id, nil
}

// ErrClosed is returned by a closed Stack's registry.
var ErrClosed = errors.New("gateway: stack closed")

// RemoveWorker drains worker id and removes it: it leaves the failover
// tracker at once (no new request goes to it), then, once the router
// counts none of its requests in flight (read every 20 ms, at most
// DrainTimeout or until ctx ends), it leaves the router, the index and
// admission, and its KV events stop. It returns when the worker is
// removed; a worker already draining is waited for the same way.
func (s *Stack) RemoveWorker(ctx context.Context, id uint64) error {
	w, err := s.beginDrain(id)
	if err != nil {
		return err
	}
	return s.finishDrain(ctx, w)
}

// beginDrain marks worker id draining and takes it out of the tracker.
func (s *Stack) beginDrain(id uint64) (*stackWorker, error) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	w := s.worker(id)
	if w == nil {
		if _, ok := s.removedStatus(id); ok {
			return nil, nil // removed already
		}
		return nil, fmt.Errorf("%w: %d", ErrNoSuchWorker, id)
	}
	w.member.Lock()
	for st := w.state.Load(); st < stateDraining && !w.state.CompareAndSwap(st, stateDraining); st = w.state.Load() {
	}
	w.member.Unlock()
	w.stop()
	s.gw.tracker.Remove(id)
	return w, nil
}

// finishDrain waits for w's requests in flight, then removes it.
func (s *Stack) finishDrain(ctx context.Context, w *stackWorker) error {
	if w == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, DrainTimeout)
	defer cancel()
	t := time.NewTicker(drainPoll)
	defer t.Stop()
wait:
	for s.inFlight(w) > 0 {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) && s.bg.Err() == nil {
				return ctx.Err() // the caller left; the worker stays draining
			}
			s.log.Warn("gateway: drain ended with requests in flight; removing the worker", "worker", w.spec.URL, "in_flight", s.inFlight(w))
			break wait
		case <-t.C:
		}
	}
	s.removeDrained(w)
	return nil
}

// removeDrained takes a drained worker out of the router, the gateway and
// the stack, and records it as removed.
func (s *Stack) removeDrained(w *stackWorker) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if s.worker(w.id) != w {
		return // another drain removed it
	}
	w.member.Lock()
	w.state.Store(stateRemoved)
	s.router.RemoveWorker(w.id)
	if vw := w.adapter(); vw != nil {
		if err := vw.Close(); err != nil {
			s.log.Warn("gateway: closing worker events", "worker", w.spec.URL, "err", err)
		}
	}
	w.member.Unlock()
	hctx, cancel := context.WithTimeout(context.Background(), hintCloseWait)
	_ = w.hints.Close(hctx)
	cancel()
	s.gw.dropWorker(w.id)
	all := slices.Clone(*s.set.Load())
	all[w.id] = nil
	s.set.Store(&all)
	s.capacity.DeleteLabelValues(strconv.FormatUint(w.id, 10))
	st := s.statusOf(w)
	if s.removed == nil {
		s.removed = map[uint64]WorkerStatus{}
	}
	s.removed[w.id] = st
	if len(s.removed) > maxRemovedKept {
		delete(s.removed, slices.Min(slices.Collect(maps.Keys(s.removed))))
	}
	s.log.Info("gateway: worker removed", "worker", w.spec.URL, "id", w.id)
}

// removedStatus returns a removed worker's last status. regMu is held.
func (s *Stack) removedStatus(id uint64) (WorkerStatus, bool) {
	st, ok := s.removed[id]
	return st, ok
}

// joinMember joins a worker that answered to the router and the tracker,
// unless its drain began (errDraining: its events adapter is closed).
func (s *Stack) joinMember(ctx context.Context, w *stackWorker) error {
	w.member.Lock()
	defer w.member.Unlock()
	if w.leaving() {
		if vw := w.adapter(); vw != nil {
			_ = vw.Close()
		}
		return errDraining
	}
	if err := s.join(ctx, w); err != nil {
		return err
	}
	w.state.Store(stateJoined)
	// Tracked from now on: routable from its first good probe.
	return s.gw.tracker.Add(w.id, w.spec.URL)
}

// rejoin adds w back to the router (a capacity change, a worker up again
// or an ejection ended) unless its drain began.
func (s *Stack) rejoin(w *stackWorker) error {
	w.member.Lock()
	defer w.member.Unlock()
	if w.leaving() {
		return nil
	}
	return s.router.AddWorker(w)
}

// WorkerStatus reports worker id (a removed one too, for a while).
func (s *Stack) WorkerStatus(id uint64) (WorkerStatus, bool) {
	if w := s.worker(id); w != nil {
		return s.statusOf(w), true
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	return s.removedStatus(id)
}

// statusOf reports w.
func (s *Stack) statusOf(w *stackWorker) WorkerStatus {
	sp := w.spec
	st := WorkerStatus{ID: w.id, URL: sp.URL, DPSize: w.ranks(), Events: sp.Events, Replay: sp.Replay,
		APIs: strings.Split(cmpOr(sp.Native, Baseline).String(), ","), TokenAPIs: sp.TokenAPIs.Names(), InFlight: s.inFlight(w)}
	if sp.Hints != HintsOff {
		st.Hints = [...]string{"off", "inline", "control"}[sp.Hints]
	}
	if sp.Engine != EngineVLLM {
		st.Engine = sp.Engine.String()
	}
	if m := w.failMsg.Load(); m != nil {
		st.Error = *m
	}
	var ts *failover.WorkerStatus
	for _, t := range s.gw.tracker.Status() {
		if t.ID == w.id {
			ts = &t
			break
		}
	}
	if ts != nil {
		st.Healthy = ts.Routable
		if st.Error == "" {
			st.Error = ts.LastError
		}
	}
	switch state := w.state.Load(); {
	case state == stateRemoved:
		st.Status = WorkerRemoved
	case state == stateDraining:
		st.Status = WorkerDraining
	case state == stateFailed:
		st.Status = WorkerFailed
	case state == stateJoined && ts != nil && ts.Routable:
		st.Status = WorkerReady
	case state == stateJoined && ts != nil && (ts.Health == failover.Down || ts.Ejected):
		st.Status = WorkerFailed
	default:
		st.Status = WorkerJoining
	}
	return st
}

func cmpOr(a, b APIs) APIs {
	if a == 0 {
		return b
	}
	return a
}

// WorkerRequest is the body of POST /workers: SMG's worker config, of
// which agentkv reads the fields below (others, such as model_id,
// priority, cost or labels, are accepted and ignored).
type WorkerRequest struct {
	URL string `json:"url"`
	// WorkerType must be "regular" (or absent): agentkv routes no
	// prefill/decode disaggregation.
	WorkerType string `json:"worker_type,omitempty"`
	// APIKey is refused: agentkv holds no worker secrets (the engines sit
	// on a private network behind the gateway).
	APIKey *string `json:"api_key,omitempty"`
	// Events and Replay are the KV event endpoints (WorkerSpec's).
	Events string `json:"events,omitempty"`
	Replay string `json:"replay,omitempty"`
	// DPSize is the data-parallel size (dp_size, as SMG names it).
	DPSize int `json:"dp_size,omitempty"`
	// APIs are the front-door APIs it serves natively (names, or one
	// string joined by '+'); TokenAPIs the token APIs (generate,
	// inference, completions).
	APIs      json.RawMessage `json:"apis,omitempty"`
	TokenAPIs json.RawMessage `json:"token_apis,omitempty"`
	// Hints is "inline", "control" or "off".
	Hints string `json:"hints,omitempty"`
	// Engine is "vllm" (the default) or "sglang" (WorkerSpec.Engine).
	Engine string `json:"engine,omitempty"`
}

// DecodeWorkerRequest reads a POST /workers body into a WorkerSpec; every
// error wraps ErrBadWorkerConfig and says what is wrong.
func DecodeWorkerRequest(body []byte) (WorkerSpec, error) {
	var req WorkerRequest
	bad := func(format string, a ...any) (WorkerSpec, error) {
		return WorkerSpec{}, fmt.Errorf("%w: "+format, append([]any{ErrBadWorkerConfig}, a...)...)
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return bad("malformed JSON body: %v", err)
	}
	switch {
	case req.URL == "":
		return bad("url is required")
	case req.WorkerType != "" && req.WorkerType != "regular":
		return bad("worker_type %q: agentkv routes regular workers only (no prefill/decode disaggregation)", req.WorkerType)
	case req.APIKey != nil:
		return bad("api_key is not accepted: agentkv does not hold worker secrets (keep the engines on a private network behind the gateway)")
	case req.DPSize < 0 || req.DPSize > 1024:
		return bad("dp_size must be in [1, 1024], got %d", req.DPSize)
	case req.Replay != "" && req.Events == "":
		return bad("replay needs events")
	}
	if _, err := vllm.NewClient(req.URL, nil); err != nil {
		return bad("url %q: want an http:// or https:// base URL", req.URL)
	}
	spec := WorkerSpec{URL: req.URL, Events: req.Events, Replay: req.Replay, DPRanks: req.DPSize}
	var err error
	if spec.Hints, err = ParseHintMode(req.Hints); err != nil {
		return bad("hints %q: want inline, control or off", req.Hints)
	}
	if spec.Engine, err = ParseEngine(req.Engine); err != nil {
		return bad("engine %q: want vllm or sglang", req.Engine)
	}
	names, err := nameList(req.APIs)
	if err != nil {
		return bad("apis: %v", err)
	}
	if names != "" {
		set, ok := ParseAPIs(names)
		if !ok || set == 0 {
			return bad("apis: want chat, completions, responses, messages, count_tokens or all, got %q", names)
		}
		spec.Native = set
	}
	if names, err = nameList(req.TokenAPIs); err != nil {
		return bad("token_apis: %v", err)
	}
	if names != "" {
		set, ok := translate.ParseTokenAPIs(names)
		if !ok {
			return bad("token_apis: want generate, inference, completions or all, got %q", names)
		}
		spec.TokenAPIs = set
	}
	return spec, nil
}

// nameList reads a JSON list of names, or one string joined by '+', as a
// comma-separated list.
func nameList(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return strings.ReplaceAll(one, "+", ","), nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return "", errors.New("want a list of names or one string")
	}
	for _, n := range many {
		if strings.ContainsAny(n, ",+") {
			return "", fmt.Errorf("bad name %q", n)
		}
	}
	return strings.Join(many, ","), nil
}

// registryError answers {"error": msg, "code": status}.
func registryError(w http.ResponseWriter, status int, msg string) {
	apiwire.WriteJSON(w, status, map[string]any{"error": msg, "code": status})
}

// registryStatus maps a registry error to its HTTP status.
func registryStatus(err error) int {
	switch {
	case errors.Is(err, ErrNoSuchWorker):
		return http.StatusNotFound
	case errors.Is(err, ErrWorkerExists):
		return http.StatusConflict
	case errors.Is(err, ErrBadWorkerConfig):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

// registryRoutes adds the registry's endpoints to mux.
func (g *Gateway) registryRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+WorkersPath, g.postWorker)
	mux.HandleFunc("GET "+WorkersPath+"/{id}", g.getWorker)
	mux.HandleFunc("DELETE "+WorkersPath+"/{id}", g.deleteWorker)
	mux.HandleFunc("POST /add_worker", g.addWorkerAlias)
	mux.HandleFunc("POST /remove_worker", g.removeWorkerAlias)
}

// registryOK checks the admin key and that a Stack runs the registry.
func (g *Gateway) registryOK(w http.ResponseWriter, r *http.Request) bool {
	if !g.adminOK(w, r) {
		return false
	}
	if g.registry == nil {
		registryError(w, http.StatusNotImplemented, "agentkv gateway: the worker registry needs a Stack (agentkv proxy)")
		return false
	}
	return true
}

// postWorker serves POST /workers: 202 with Location /workers/{id}.
func (g *Gateway) postWorker(w http.ResponseWriter, r *http.Request) {
	if !g.registryOK(w, r) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		registryError(w, http.StatusRequestEntityTooLarge, "reading the request body: "+err.Error())
		return
	}
	spec, err := DecodeWorkerRequest(body)
	if err != nil {
		registryError(w, http.StatusBadRequest, err.Error())
		return
	}
	g.addAndAnswer(w, r, spec, http.StatusAccepted)
}

func (g *Gateway) addAndAnswer(w http.ResponseWriter, r *http.Request, spec WorkerSpec, code int) {
	id, err := g.registry.AddWorker(r.Context(), spec)
	if err != nil {
		registryError(w, registryStatus(err), err.Error())
		return
	}
	loc := WorkersPath + "/" + strconv.FormatUint(id, 10)
	w.Header().Set("Location", loc)
	st, _ := g.registry.WorkerStatus(id)
	apiwire.WriteJSON(w, code, map[string]any{"id": id, "worker_id": strconv.FormatUint(id, 10), "url": spec.URL,
		"status": st.Status, "location": loc})
}

// workerID reads the {id} path value; false when it has answered 404.
func workerID(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		registryError(w, http.StatusNotFound, "no worker "+strconv.Quote(r.PathValue("id"))+": worker ids are integers (GET /workers lists them)")
		return 0, false
	}
	return id, true
}

// getWorker serves GET /workers/{id}.
func (g *Gateway) getWorker(w http.ResponseWriter, r *http.Request) {
	if !g.registryOK(w, r) {
		return
	}
	id, ok := workerID(w, r)
	if !ok {
		return
	}
	st, ok := g.registry.WorkerStatus(id)
	if !ok {
		registryError(w, http.StatusNotFound, fmt.Sprintf("no worker %d", id))
		return
	}
	apiwire.WriteJSON(w, http.StatusOK, st)
}

// deleteWorker serves DELETE /workers/{id}: 202 with status draining (the
// drain goes on in the background), or with ?wait=true when it is over,
// status removed.
func (g *Gateway) deleteWorker(w http.ResponseWriter, r *http.Request) {
	if !g.registryOK(w, r) {
		return
	}
	id, ok := workerID(w, r)
	if !ok {
		return
	}
	g.drainAndAnswer(w, r, id, http.StatusAccepted)
}

func (g *Gateway) drainAndAnswer(w http.ResponseWriter, r *http.Request, id uint64, code int) {
	s := g.registry
	wk, err := s.beginDrain(id)
	if err != nil {
		registryError(w, registryStatus(err), err.Error())
		return
	}
	if wait, _ := strconv.ParseBool(r.URL.Query().Get("wait")); wait {
		if err := s.finishDrain(r.Context(), wk); err != nil {
			return // the client left; the drain stays begun
		}
	} else if wk != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = s.finishDrain(s.bg, wk)
		}()
	}
	st, _ := s.WorkerStatus(id)
	w.Header().Set("Location", WorkersPath+"/"+strconv.FormatUint(id, 10))
	apiwire.WriteJSON(w, code, st)
}

// addWorkerAlias serves the SGLang router's POST /add_worker?url=URL.
func (g *Gateway) addWorkerAlias(w http.ResponseWriter, r *http.Request) {
	if !g.registryOK(w, r) {
		return
	}
	spec, err := ParseWorkerSpec(r.URL.Query().Get("url"))
	if err != nil {
		registryError(w, http.StatusBadRequest, err.Error())
		return
	}
	g.addAndAnswer(w, r, spec, http.StatusOK)
}

// removeWorkerAlias serves the SGLang router's POST /remove_worker?url=URL.
func (g *Gateway) removeWorkerAlias(w http.ResponseWriter, r *http.Request) {
	if !g.registryOK(w, r) {
		return
	}
	url := strings.TrimRight(r.URL.Query().Get("url"), "/")
	for _, sw := range g.registry.list() {
		if strings.TrimRight(sw.spec.URL, "/") == url && !sw.leaving() {
			g.drainAndAnswer(w, r, sw.id, http.StatusOK)
			return
		}
	}
	registryError(w, http.StatusNotFound, "no worker with url "+strconv.Quote(url))
}
