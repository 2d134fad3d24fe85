package mock

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/tokenapi"
)

// Errors of the RL control endpoints.
var (
	// ErrAborted ends a request aborted by /abort_request, a pause in
	// abort mode, Server.AbortAll, or its client going away (token APIs).
	ErrAborted = errors.New("mock: request aborted")
	// ErrBusy refuses a cache flush (or a weight update, which flushes)
	// while requests are queued or running, as SGLang's /flush_cache
	// does.
	ErrBusy = errors.New("mock: requests in flight; pause generation (abort mode) or abort them first")
)

// rlState is the server's state for the token APIs and the RL control
// endpoints.
type rlState struct {
	mu       sync.Mutex // guards rids, sleeping, version
	rids     map[string]*ridEntry
	sleeping bool
	version  string
}

// ridEntry is one request in flight by its rid (SGLang) or request_id
// (vLLM). job is nil until the request is submitted; an abort that comes
// before sets abort, and the handler aborts the job once it has it.
type ridEntry struct {
	job   *job
	abort bool
}

func newRLState() *rlState { return &rlState{rids: map[string]*ridEntry{}, version: "default"} }

// reserve registers rid; false when a request with that rid is in flight.
func (rs *rlState) reserve(rid string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if _, ok := rs.rids[rid]; ok {
		return false
	}
	rs.rids[rid] = &ridEntry{}
	return true
}

// attach records rid's job; true when an abort came first (the caller
// aborts the job).
func (rs *rlState) attach(rid string, j *job) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	e := rs.rids[rid]
	e.job = j
	return e.abort
}

func (rs *rlState) release(rid string) {
	rs.mu.Lock()
	delete(rs.rids, rid)
	rs.mu.Unlock()
}

// lookup returns rid's job (nil before it is submitted, marking the entry
// for an abort then) and whether rid is in flight.
func (rs *rlState) lookupForAbort(rid string) (*job, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	e, ok := rs.rids[rid]
	if !ok {
		return nil, false
	}
	if e.job == nil {
		e.abort = true
	}
	return e.job, true
}

// markAll marks every reserved, not yet submitted request for an abort.
func (rs *rlState) markAll() {
	rs.mu.Lock()
	for _, e := range rs.rids {
		if e.job == nil {
			e.abort = true
		}
	}
	rs.mu.Unlock()
}

func (rs *rlState) weightVersion() string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.version
}

// abort ends j with ErrAborted: removed from the queue or the engine (its
// completed blocks stay cached), its tokens so far kept. False when j has
// finished (also when its last token was sampled in the step now running:
// it completes normally).
func (d *driver) abort(j *job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.abortLocked(j)
}

func (d *driver) abortLocked(j *job) bool {
	if j.done {
		return false
	}
	if i := slices.Index(d.pending, j); i >= 0 {
		d.pending = slices.Delete(d.pending, i, i+1)
	} else {
		if j.req.Finished > 0 {
			return false
		}
		d.eng.Abort(&j.req)
		if i := slices.Index(d.active, j); i >= 0 {
			d.active = slices.Delete(d.active, i, i+1)
		}
	}
	d.finish(j, ErrAborted)
	d.sweep()
	return true
}

// abortAll aborts every queued and running request; it returns how many.
func (d *driver) abortAll() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	jobs := append(slices.Clone(d.pending), d.active...)
	n := 0
	for _, j := range jobs {
		if d.abortLocked(j) {
			n++
		}
	}
	return n
}

// setPaused stops or restarts the engine loop: while paused no step runs
// and no request is admitted (requests in flight keep their place).
func (d *driver) setPaused(on bool) {
	d.mu.Lock()
	d.paused = on
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *driver) isPaused() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.paused
}

// flush empties the prefix cache (device and host tiers) and publishes
// AllBlocksCleared; ErrBusy while any request is queued or running. The
// event sequence continues (a restart starts it over).
func (d *driver) flush() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.active)+len(d.pending) > 0 || d.eng.HasWork() {
		return ErrBusy
	}
	if err := d.reset(d.simCfg); err != nil {
		return err
	}
	clear(d.blocks)
	d.dropped, d.batch = d.dropped[:0], nil
	if d.pub != nil {
		// Under mu: no step can publish between the reset and this batch.
		d.pub.publish([]vllm.WireEvent{{Kind: flashindex.Cleared}})
	}
	return nil
}

// AbortAll aborts every request queued or running on the worker (their
// replies end with finish reason abort); it returns how many.
func (s *Server) AbortAll() int {
	s.rl.markAll()
	return s.drv.abortAll()
}

// FlushCache empties the worker's prefix cache and publishes
// AllBlocksCleared, as SGLang's /flush_cache and vLLM's
// /reset_prefix_cache; ErrBusy while requests are in flight.
func (s *Server) FlushCache() error { return s.drv.flush() }

// CachedBlocks is how many blocks the worker's device tier holds, as its
// KV events have described them: a router whose index shows as many for
// this worker has caught up with its events.
func (s *Server) CachedBlocks() int { return len(s.drv.cached(flashindex.Device)) }

// SetPaused pauses or resumes generation (requests in flight keep their
// place; new ones wait).
func (s *Server) SetPaused(on bool) { s.drv.setPaused(on) }

// WeightVersion returns the version the last weight update set
// ("default" before any).
func (s *Server) WeightVersion() string { return s.rl.weightVersion() }

// abortRequest serves SGLang's POST /abort_request: {"rid"} aborts that
// request, {"abort_all": true} every one. An unknown rid is a 400.
func (s *Server) abortRequest(w http.ResponseWriter, r *http.Request) {
	b, ok := s.readSGLang(w, r)
	if !ok {
		return
	}
	var req tokenapi.AbortRequest
	if err := json.Unmarshal(b, &req); err != nil {
		tokenapi.WriteSGLangError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return
	}
	switch {
	case req.AbortAll:
		s.AbortAll()
	case req.RID == "":
		tokenapi.WriteSGLangError(w, http.StatusBadRequest, "abort_request: give rid or abort_all")
		return
	default:
		j, ok := s.rl.lookupForAbort(req.RID)
		if !ok {
			tokenapi.WriteSGLangError(w, http.StatusBadRequest, "abort_request: unknown rid "+strconv.Quote(req.RID))
			return
		}
		if j != nil {
			s.drv.abort(j)
		}
	}
	w.WriteHeader(http.StatusOK)
}

// abortRequests serves vLLM's POST /abort_requests {"request_ids": [...]}.
func (s *Server) abortRequests(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RequestIDs []string `json:"request_ids"`
	}
	if !s.decode(w, r, false, &req) {
		return
	}
	for _, id := range req.RequestIDs {
		if _, ok := s.rl.lookupForAbort(id); !ok {
			apiwire.WriteOpenAIError(w, http.StatusBadRequest, "abort_requests: unknown request_id "+strconv.Quote(id))
			return
		}
	}
	for _, id := range req.RequestIDs {
		if j, _ := s.rl.lookupForAbort(id); j != nil {
			s.drv.abort(j)
		}
	}
	w.WriteHeader(http.StatusOK)
}

// readSGLang reads a bounded body, answering errors in SGLang's shape.
func (s *Server) readSGLang(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := readAll(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			tokenapi.WriteSGLangError(w, http.StatusRequestEntityTooLarge, "request body over "+strconv.FormatInt(mbe.Limit, 10)+" bytes")
		} else {
			tokenapi.WriteSGLangError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		}
		return nil, false
	}
	return b, true
}

// pauseGeneration serves SGLang's POST /pause_generation ({"mode":
// "abort"} by default: requests in flight end with finish reason abort;
// "in_place" or "retract" keep them, frozen). New requests wait until
// /continue_generation.
func (s *Server) pauseGeneration(w http.ResponseWriter, r *http.Request) {
	b, ok := s.readSGLang(w, r)
	if !ok {
		return
	}
	var req struct {
		Mode string `json:"mode"`
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &req); err != nil {
			tokenapi.WriteSGLangError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
			return
		}
	}
	switch req.Mode {
	case "", "abort":
		s.drv.setPaused(true)
		s.AbortAll()
	case "in_place", "retract":
		s.drv.setPaused(true)
	default:
		tokenapi.WriteSGLangError(w, http.StatusBadRequest, "pause_generation: unknown mode "+strconv.Quote(req.Mode))
		return
	}
	apiwire.WriteJSON(w, http.StatusOK, map[string]string{"message": "Generation paused successfully.", "status": "ok"})
}

func (s *Server) continueGeneration(w http.ResponseWriter, r *http.Request) {
	s.drv.setPaused(false)
	apiwire.WriteJSON(w, http.StatusOK, map[string]string{"message": "Generation continued successfully.", "status": "ok"})
}

// flushCache serves SGLang's /flush_cache: 200 when flushed, 400 while
// requests are in flight (SGLang's text in both cases).
func (s *Server) flushCache(w http.ResponseWriter, r *http.Request) {
	status := http.StatusOK
	msg := "Cache flushed.\n"
	if err := s.FlushCache(); err != nil {
		status, msg = http.StatusBadRequest, "Cache not flushed: "+err.Error()+"\n"
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(msg))
}

// updateWeights serves SGLang's /update_weights_from_disk, _tensor and
// _distributed: the body is accepted as is (abort_all_requests aborts the
// requests in flight first, weight_version names the new version), the
// prefix cache is flushed (SGLang's flush_cache defaults to true) and the
// version set. While requests are in flight it fails (400, success
// false): pause generation first, as rollout frameworks do.
func (s *Server) updateWeights(w http.ResponseWriter, r *http.Request) {
	b, ok := s.readSGLang(w, r)
	if !ok {
		return
	}
	var req struct {
		AbortAll      bool    `json:"abort_all_requests"`
		WeightVersion *string `json:"weight_version"`
		FlushCache    *bool   `json:"flush_cache"`
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &req); err != nil {
			tokenapi.WriteSGLangError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
			return
		}
	}
	if req.AbortAll {
		s.AbortAll()
	}
	var err error
	if req.FlushCache == nil || *req.FlushCache {
		err = s.FlushCache()
	} else if s.drv.snapshot().running+s.drv.snapshot().waiting > 0 {
		err = ErrBusy
	}
	if err != nil {
		apiwire.WriteJSON(w, http.StatusBadRequest, map[string]any{"success": false, "message": err.Error(), "num_paused_requests": 0})
		return
	}
	msg := "Succeeded to update model weights."
	if req.WeightVersion != nil {
		s.rl.mu.Lock()
		s.rl.version = *req.WeightVersion
		s.rl.mu.Unlock()
		msg += " Weight version updated to " + *req.WeightVersion + "."
	}
	apiwire.WriteJSON(w, http.StatusOK, map[string]any{"success": true, "message": msg, "num_paused_requests": 0})
}

func (s *Server) getWeightVersion(w http.ResponseWriter, r *http.Request) {
	apiwire.WriteJSON(w, http.StatusOK, map[string]string{"weight_version": s.WeightVersion()})
}

// getModelInfo serves SGLang's GET /get_model_info, with the vocabulary
// size SMG reports.
func (s *Server) getModelInfo(w http.ResponseWriter, r *http.Request) {
	apiwire.WriteJSON(w, http.StatusOK, map[string]any{"model_path": s.cfg.Model, "tokenizer_path": s.cfg.Model, "is_generation": true,
		"weight_version": s.WeightVersion(), "vocab_size": tokenapi.DefaultVocab, "max_model_len": s.cfg.MaxModelLen})
}

// vllmPause serves vLLM's POST /pause?mode=abort|keep&clear_cache=true:
// abort (the default) ends the requests in flight with finish reason
// abort, keep freezes them; clear_cache (default true) then resets the
// prefix cache when nothing is in flight. "wait" is not modelled (400).
func (s *Server) vllmPause(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch q.Get("mode") {
	case "", "abort":
		s.drv.setPaused(true)
		s.AbortAll()
	case "keep":
		s.drv.setPaused(true)
	default:
		apiwire.WriteOpenAIError(w, http.StatusBadRequest, "pause: mode must be abort or keep (the mock does not model wait)")
		return
	}
	if q.Get("clear_cache") != "false" {
		_ = s.FlushCache() // with requests kept in flight the cache stays, as a busy reset does
	}
	apiwire.WriteJSON(w, http.StatusOK, map[string]string{"status": "paused"})
}

func (s *Server) vllmResume(w http.ResponseWriter, r *http.Request) {
	s.rl.mu.Lock()
	s.rl.sleeping = false
	s.rl.mu.Unlock()
	s.drv.setPaused(false)
	apiwire.WriteJSON(w, http.StatusOK, map[string]string{"status": "resumed"})
}

func (s *Server) vllmIsPaused(w http.ResponseWriter, r *http.Request) {
	apiwire.WriteJSON(w, http.StatusOK, map[string]bool{"is_paused": s.drv.isPaused()})
}

// resetPrefixCache serves vLLM's POST /reset_prefix_cache (400 while
// requests are in flight).
func (s *Server) resetPrefixCache(w http.ResponseWriter, r *http.Request) {
	if err := s.FlushCache(); err != nil {
		apiwire.WriteOpenAIError(w, http.StatusBadRequest, "reset_prefix_cache: "+err.Error())
		return
	}
	w.WriteHeader(http.StatusOK)
}

// vllmSleep serves vLLM's POST /sleep: the KV cache is discarded (a flush)
// and generation pauses until /wake_up; 400 while requests are in flight.
func (s *Server) vllmSleep(w http.ResponseWriter, r *http.Request) {
	if err := s.FlushCache(); err != nil {
		apiwire.WriteOpenAIError(w, http.StatusBadRequest, "sleep: "+err.Error())
		return
	}
	s.drv.setPaused(true)
	s.rl.mu.Lock()
	s.rl.sleeping = true
	s.rl.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *Server) vllmWakeUp(w http.ResponseWriter, r *http.Request) {
	s.rl.mu.Lock()
	s.rl.sleeping = false
	s.rl.mu.Unlock()
	s.drv.setPaused(false)
	w.WriteHeader(http.StatusOK)
}

func (s *Server) vllmIsSleeping(w http.ResponseWriter, r *http.Request) {
	s.rl.mu.Lock()
	on := s.rl.sleeping
	s.rl.mu.Unlock()
	apiwire.WriteJSON(w, http.StatusOK, map[string]bool{"is_sleeping": on})
}
