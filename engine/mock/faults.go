package mock

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// Faults are the mock's fault switches, for testing a gateway's failure
// handling against a real process. The zero value injects nothing. Each
// switch applies to the generation endpoints (chat, completions,
// responses, messages), never to /health, /metrics, /tokenize or the
// admin endpoint.
//
// A count of 0 means "until cleared"; a positive count arms the switch for
// that many requests, after which it clears itself.
type Faults struct {
	// FailStatus > 0 answers requests with this HTTP status, in the API's
	// error shape, before any byte of a reply (FailCount requests).
	FailStatus int `json:"fail_status,omitempty"`
	FailCount  int `json:"fail_count,omitempty"`
	// CutAfter > 0 cuts streams after that many generated tokens: the
	// connection is closed abruptly, with no terminator (CutCount
	// requests). A non-streamed request is cut before its body.
	CutAfter int `json:"cut_after,omitempty"`
	CutCount int `json:"cut_count,omitempty"`
	// StallFirst delays a request's first byte; StallMid pauses a stream
	// after StallAfter tokens (StallCount requests for both).
	StallFirst time.Duration `json:"-"`
	StallMid   time.Duration `json:"-"`
	StallAfter int           `json:"stall_after,omitempty"`
	StallCount int           `json:"stall_count,omitempty"`
	// Refuse closes the HTTP listener: connections are refused until the
	// switch is cleared (SetFaults without it, ClearFaults) or, with
	// RefuseFor > 0, for that long.
	Refuse    bool          `json:"refuse,omitempty"`
	RefuseFor time.Duration `json:"-"`
	// DropEvents > 0 sends the next DropEvents KV event batches to no
	// subscriber (they stay in the replay buffer), so subscribers see a
	// sequence gap.
	DropEvents int `json:"drop_events,omitempty"`
	// Wedge is the fault production engines show most: a scheduler that
	// stopped (a deadlocked collective, a stuck engine loop) while the
	// process still answers. Generation requests are accepted and read,
	// then never answered: no status, no byte. /health, /metrics,
	// /tokenize and the admin endpoint answer as usual, so a health
	// probe sees a healthy worker. WedgeAfter > 0 wedges streams after
	// that many generated tokens instead: the stream stops, the
	// connection stays open (non-streamed requests are served; Wedge
	// holds those). A wedged request is held until its client goes
	// away, the server closes, or the switch is cleared (it then goes on
	// as if nothing happened, as an engine that recovered would).
	Wedge      bool `json:"wedge,omitempty"`
	WedgeAfter int  `json:"wedge_after,omitempty"`
}

// faultsJSON is the admin endpoint's body: Faults with durations in
// milliseconds, plus the one-shot actions.
type faultsJSON struct {
	Faults
	StallFirstMS int64 `json:"stall_first_ms,omitempty"`
	StallMidMS   int64 `json:"stall_mid_ms,omitempty"`
	RefuseForMS  int64 `json:"refuse_for_ms,omitempty"`
	// Restart empties the worker (Server.Restart); Clear clears every
	// switch first.
	Restart bool `json:"restart,omitempty"`
	Clear   bool `json:"clear,omitempty"`
}

func (f Faults) validate() error {
	switch {
	case f.FailStatus != 0 && (f.FailStatus < 400 || f.FailStatus > 599):
		return fmt.Errorf("%w: fail status %d (want 400-599)", ErrConfig, f.FailStatus)
	case f.FailCount < 0 || f.CutAfter < 0 || f.CutCount < 0 || f.StallAfter < 0 || f.StallCount < 0 || f.DropEvents < 0 ||
		f.WedgeAfter < 0:
		return fmt.Errorf("%w: negative fault count", ErrConfig)
	case f.StallFirst < 0 || f.StallMid < 0 || f.RefuseFor < 0:
		return fmt.Errorf("%w: negative fault duration", ErrConfig)
	}
	return nil
}

// faultState holds the armed switches.
type faultState struct {
	mu    sync.Mutex // guards f, timer, unwedge, closed
	f     Faults
	timer *time.Timer // reopens the listener after RefuseFor
	// unwedge is closed (and replaced) when the wedge switch clears:
	// wedged requests wait on it. nil until a request first wedges.
	unwedge chan struct{}
	held    int // requests wedged now
	wedgedN int // requests ever wedged
	closed  bool
}

func (fs *faultState) stopTimers() {
	fs.mu.Lock()
	fs.closed = true
	if fs.timer != nil {
		fs.timer.Stop()
	}
	fs.releaseLocked()
	fs.mu.Unlock()
}

// releaseLocked lets every wedged request go on.
func (fs *faultState) releaseLocked() {
	if fs.unwedge != nil {
		close(fs.unwedge)
		fs.unwedge = nil
	}
}

// wedged counts a request in and returns the channel it waits on.
func (fs *faultState) wedged() <-chan struct{} {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return closedChan
	}
	if fs.unwedge == nil {
		fs.unwedge = make(chan struct{})
	}
	fs.held++
	fs.wedgedN++
	return fs.unwedge
}

// WedgedTotal returns how many requests the wedge switches have held.
func (s *Server) WedgedTotal() int {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	return s.faults.wedgedN
}

// Wedged returns how many requests the wedge switches hold now.
func (s *Server) Wedged() int {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	return s.faults.held
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// hold blocks a wedged request until the switch clears (true), or its
// client goes away or the server closes (false, the request ends
// unanswered).
func (s *Server) hold(ctx context.Context) bool {
	ch := s.faults.wedged()
	ok := false
	select {
	case <-ch:
		ok = true
	case <-ctx.Done():
	}
	s.faults.mu.Lock()
	if ch != closedChan {
		s.faults.held--
	}
	ok = ok && !s.faults.closed
	s.faults.mu.Unlock()
	return ok
}

// Faults returns the switches in force.
func (s *Server) Faults() Faults {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	return s.faults.f
}

// ClearFaults clears every switch (and reopens a refusing listener).
func (s *Server) ClearFaults() error { return s.SetFaults(Faults{}) }

// SetFaults replaces the switches. It returns an error wrapping ErrConfig
// for invalid switches, or the listen error when a refusing listener
// cannot be reopened on its address.
func (s *Server) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	s.faults.mu.Lock()
	s.faults.f = f
	if !f.Wedge && f.WedgeAfter == 0 {
		s.faults.releaseLocked()
	}
	if s.faults.timer != nil {
		s.faults.timer.Stop()
		s.faults.timer = nil
	}
	if f.Refuse && f.RefuseFor > 0 && !s.faults.closed {
		s.faults.timer = time.AfterFunc(f.RefuseFor, func() {
			s.faults.mu.Lock()
			s.faults.f.Refuse, s.faults.f.RefuseFor = false, 0
			s.faults.mu.Unlock()
			s.setRefusing(false)
		})
	}
	s.faults.mu.Unlock()
	if s.pub != nil {
		s.pub.dropNext(f.DropEvents)
	}
	return s.setRefusing(f.Refuse)
}

// setRefusing closes or reopens the HTTP listener.
func (s *Server) setRefusing(on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || on == s.refusing {
		return nil
	}
	if on {
		s.refusing = true
		return s.ln.Close()
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("mock: reopen %s: %w", s.addr, err)
	}
	s.ln, s.refusing = ln, false
	s.serve(ln)
	return nil
}

// requestFaults is what the switches hold for one request, taken when it
// starts (counted switches are consumed then).
type requestFaults struct {
	failStatus int
	cutAfter   int
	stallFirst time.Duration
	stallMid   time.Duration
	stallAfter int
	wedge      bool // wedge before the first byte
	wedgeAfter int  // wedge a stream after this many tokens (0: not)
	s          *Server
}

func (s *Server) takeFaults() requestFaults {
	fs := &s.faults
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := &fs.f
	rf := requestFaults{s: s, wedge: f.Wedge, wedgeAfter: f.WedgeAfter}
	if f.FailStatus > 0 {
		rf.failStatus = f.FailStatus
		if f.FailCount > 0 {
			if f.FailCount--; f.FailCount == 0 {
				f.FailStatus = 0
			}
		}
		return rf // a failed request is not also cut or stalled
	}
	if f.CutAfter > 0 {
		rf.cutAfter = f.CutAfter
		if f.CutCount > 0 {
			if f.CutCount--; f.CutCount == 0 {
				f.CutAfter = 0
			}
		}
	}
	if f.StallFirst > 0 || f.StallMid > 0 {
		rf.stallFirst, rf.stallMid, rf.stallAfter = f.StallFirst, f.StallMid, f.StallAfter
		if f.StallCount > 0 {
			if f.StallCount--; f.StallCount == 0 {
				f.StallFirst, f.StallMid, f.StallAfter = 0, 0, 0
			}
		}
	}
	return rf
}

// begin applies the before-the-first-byte switches: false when it has
// answered (failed) or the client went away during a stall.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, anthropic bool) (requestFaults, bool) {
	rf := s.takeFaults()
	if rf.wedge && !s.hold(r.Context()) {
		return rf, false
	}
	if rf.failStatus > 0 {
		s.fail(w, anthropic, rf.failStatus, fmt.Sprintf("injected fault: status %d", rf.failStatus))
		return rf, false
	}
	if rf.stallFirst > 0 && !pause(r.Context(), rf.stallFirst) {
		return rf, false
	}
	return rf, true
}

// during applies the mid-stream switches after sent tokens: it stalls, or
// cuts the connection (it does not return then). False when the client
// went away.
func (rf *requestFaults) during(ctx context.Context, sent int) bool {
	if rf.cutAfter > 0 && sent >= rf.cutAfter {
		panic(http.ErrAbortHandler) // net/http closes the connection, no terminator
	}
	if rf.stallMid > 0 && sent >= rf.stallAfter {
		d := rf.stallMid
		rf.stallMid = 0
		if !pause(ctx, d) {
			return false
		}
	}
	if rf.wedgeAfter > 0 && sent >= rf.wedgeAfter {
		rf.wedgeAfter = 0
		return rf.s.hold(ctx)
	}
	return true
}

// capAt returns gen cut to the next mid-stream switch's token, so a stall
// or wedge after K tokens comes after exactly K.
func (rf *requestFaults) capAt(sent, gen int) int {
	if rf.stallMid > 0 && sent < rf.stallAfter && gen > rf.stallAfter {
		gen = rf.stallAfter
	}
	if rf.wedgeAfter > 0 && sent < rf.wedgeAfter && gen > rf.wedgeAfter {
		gen = rf.wedgeAfter
	}
	return gen
}

func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Server) adminGet(w http.ResponseWriter, r *http.Request) { s.adminWrite(w, s.Faults()) }

// adminPost sets the switches from a JSON body (see faultsJSON); "clear"
// clears them first, "restart" restarts the worker. Fields absent from the
// body are cleared: the body is the new state.
func (s *Server) adminPost(w http.ResponseWriter, r *http.Request) {
	b, ok := s.readBody(w, r, false)
	if !ok {
		return
	}
	var in faultsJSON
	if err := json.Unmarshal(b, &in); err != nil {
		apiwire.WriteOpenAIError(w, http.StatusBadRequest, "admin/fault: "+err.Error())
		return
	}
	f := in.Faults
	f.StallFirst = time.Duration(in.StallFirstMS) * time.Millisecond
	f.StallMid = time.Duration(in.StallMidMS) * time.Millisecond
	f.RefuseFor = time.Duration(in.RefuseForMS) * time.Millisecond
	if in.Clear {
		if err := s.ClearFaults(); err != nil {
			apiwire.WriteOpenAIError(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	if in.Restart {
		if err := s.Restart(); err != nil {
			apiwire.WriteOpenAIError(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	// Answer before a refusing listener closes (this connection stays).
	if err := f.validate(); err != nil {
		apiwire.WriteOpenAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.adminWrite(w, f)
	if err := s.SetFaults(f); err != nil {
		s.cfg.Logger.Warn("mock: admin/fault", "err", err)
	}
}

func (s *Server) adminWrite(w http.ResponseWriter, f Faults) {
	apiwire.WriteJSON(w, http.StatusOK, faultsJSON{Faults: f, StallFirstMS: f.StallFirst.Milliseconds(),
		StallMidMS: f.StallMid.Milliseconds(), RefuseForMS: f.RefuseFor.Milliseconds()})
}
