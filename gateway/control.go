package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/internal/apiwire"
)

// This file serves what an RL trainer calls on its router between rollout
// steps: the engines' pause, flush and weight-update endpoints, fanned out
// to every worker (a flush or weight update also clears those workers'
// entries in the router's index at once, as an AllBlocksCleared, so no
// turn is routed on a prefix the flush removed), a router-level pause that
// holds new turns without touching the engines, and SMG's GET /workers.

// engineControls are the engine endpoints passed to every worker;
// flushes those whose success empties the engine's prefix cache.
var engineControls = map[string]bool{
	"/pause_generation":                false, // SGLang
	"/continue_generation":             false,
	"/flush_cache":                     true,
	"/update_weights_from_disk":        true, // SGLang flushes after an update by default
	"/update_weights_from_tensor":      true,
	"/update_weights_from_distributed": true,
	"/reset_prefix_cache":              true, // vLLM
	"/sleep":                           true,
	"/wake_up":                         false,
}

// Router-level pause paths: they hold new token-API turns at the gateway.
const (
	PausePath   = "/pause"
	ResumePath  = "/resume"
	WorkersPath = "/workers"
)

// pauseGate holds new turns while the router is paused.
type pauseGate struct {
	mu     sync.Mutex    // guards resume
	resume chan struct{} // nil when not paused; closed on resume
}

func (p *pauseGate) set(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.resume == nil:
		p.resume = make(chan struct{})
	case !on && p.resume != nil:
		close(p.resume)
		p.resume = nil
	}
}

// wait returns when the router is not paused, or ctx's error.
func (p *pauseGate) wait(ctx context.Context) error {
	p.mu.Lock()
	ch := p.resume
	p.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pauseGate) paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resume != nil
}

// adminOK guards the control endpoints (engine controls, router pause,
// the worker registry): with Config.Keys only an admin key passes (401
// without a valid key, 403 with a tenant's); false means it has answered.
func (g *Gateway) adminOK(w http.ResponseWriter, r *http.Request) bool {
	ok := false
	g.RequireAdmin(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ok = true })).ServeHTTP(w, r)
	return ok
}

// controlReply is one worker's answer to a fanned-out control call.
type controlReply struct {
	URL     string `json:"url"`
	Status  int    `json:"status"`
	Message string `json:"message,omitempty"`
}

// engineControl passes the call to every worker; a flushing call that a
// worker took clears the worker's index entries at once. It answers 200
// with {"success": true, "workers": [...]} when every worker took it, else
// the first failing status with success false.
func (g *Gateway) engineControl(w http.ResponseWriter, r *http.Request) {
	if !g.adminOK(w, r) {
		return
	}
	path := r.URL.Path
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		writeError(w, false, http.StatusBadRequest, "reading the request body: "+err.Error())
		return
	}
	order := g.set().order
	replies := make([]controlReply, len(order))
	var wg sync.WaitGroup
	for i, wk := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = g.controlOne(r.Context(), wk, path+"?"+r.URL.RawQuery, body)
			if replies[i].Status == http.StatusOK && engineControls[path] {
				g.clearWorker(wk)
			}
		}()
	}
	wg.Wait()
	status := http.StatusOK
	for _, c := range replies {
		if c.Status != http.StatusOK {
			status = c.Status
			if status == 0 {
				status = http.StatusBadGateway
			}
			break
		}
	}
	apiwire.WriteJSON(w, status, map[string]any{"success": status == http.StatusOK, "workers": replies})
}

func (g *Gateway) controlOne(ctx context.Context, wk *worker, pathQuery string, body []byte) controlReply {
	c := controlReply{URL: wk.URL}
	if len(pathQuery) > 0 && pathQuery[len(pathQuery)-1] == '?' {
		pathQuery = pathQuery[:len(pathQuery)-1]
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wk.URL+pathQuery, bytes.NewReader(body))
	if err != nil {
		c.Message = err.Error()
		return c
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.cfg.HTTPClient.Do(req)
	if err != nil {
		c.Message = err.Error()
		return c
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	c.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		c.Message = string(bytes.TrimSpace(b))
	}
	return c
}

// clearWorker drops every index entry of wk (each DP rank), as its
// engine's AllBlocksCleared will when it arrives: the router gives no
// credit for a prefix the flush removed, even before the event.
func (g *Gateway) clearWorker(wk *worker) {
	for rank := range max(wk.DPRanks, 1) {
		_ = g.router.ApplyEvent(&flashindex.Event{Kind: flashindex.Cleared, Worker: flashindex.Worker{ID: wk.ID, DPRank: uint32(rank)}})
	}
}

// routerPause serves the router-level POST /pause and POST /resume: new
// token-API turns wait at the gateway while paused (sessions and
// admission state kept, engines untouched).
func (g *Gateway) routerPause(on bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !g.adminOK(w, r) {
			return
		}
		g.pause.set(on)
		apiwire.WriteJSON(w, http.StatusOK, map[string]any{"paused": on})
	}
}

// listWorkers serves SMG's GET /workers: {"workers": [{"id", "url",
// "healthy", ...}], "total", "healthy"} (slime reads the URLs to abort
// every engine).
func (g *Gateway) listWorkers(w http.ResponseWriter, r *http.Request) {
	if !g.adminOK(w, r) {
		return
	}
	type item struct {
		ID      uint64 `json:"id"`
		URL     string `json:"url"`
		Healthy bool   `json:"healthy"`
		DPSize  int    `json:"dp_size"`
		Status  string `json:"status,omitempty"` // with a Stack: WorkerState
	}
	st := map[uint64]bool{}
	for _, s := range g.tracker.Status() {
		st[s.ID] = s.Routable
	}
	out := struct {
		Workers []item `json:"workers"`
		Total   int    `json:"total"`
		Healthy int    `json:"healthy"`
		Paused  bool   `json:"router_paused"`
	}{Workers: []item{}, Paused: g.pause.paused()}
	for _, wk := range g.set().order {
		it := item{ID: wk.ID, URL: wk.URL, Healthy: st[wk.ID], DPSize: max(wk.DPRanks, 1)}
		if g.registry != nil {
			if ws, ok := g.registry.WorkerStatus(wk.ID); ok {
				it.Status = string(ws.Status)
			}
		}
		if it.Healthy {
			out.Healthy++
		}
		out.Workers = append(out.Workers, it)
	}
	out.Total = len(out.Workers)
	apiwire.WriteJSON(w, http.StatusOK, out)
}
