package mock

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/wordtok"
)

// turn is one generation request as the handlers' shared prologue sees
// it, whatever its API.
type turn struct {
	// Filled by the API's parse function.
	model      string        // the model asked for ("" is the served one)
	prompt     []uint32      // the templated prompt's tokens
	maxTokens  int           // 0: as many as the context leaves
	tool       *wordtok.Tool // the tool the reply calls, or nil
	continuing bool          // the reply continues the prompt's last message
	salt       string        // cache_salt

	// Filled by the prologue.
	g  *generation
	rf requestFaults
}

// generates is the handler of a generation API (chat, completions,
// responses, messages): the shared prologue with the API's parse, then the
// API's reply to the turn.
func generates[R any](s *Server, anthropic bool, parse func(*R, *turn) error,
	reply func(http.ResponseWriter, *http.Request, *R, *turn)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req R
		t, ok := s.prologue(w, r, anthropic, &req, func(t *turn) error { return parse(&req, t) })
		if ok {
			reply(w, r, &req, t)
		}
	}
}

// prologue is how every generation handler begins: parseTurn, then the
// request's faults (begin), then the generation. It returns false once it
// has answered the request (an error in the API's shape) or the client
// went away.
func (s *Server) prologue(w http.ResponseWriter, r *http.Request, anthropic bool, req any, parse func(*turn) error) (*turn, bool) {
	t, ok := s.parseTurn(w, r, anthropic, req, parse)
	if !ok {
		return nil, false
	}
	if t.rf, ok = s.begin(w, r, anthropic); !ok {
		return nil, false
	}
	var err error
	if t.g, err = s.generate(t.prompt, t.maxTokens, t.tool, t.continuing, t.salt); err != nil {
		s.replyError(w, r, anthropic, err)
		return nil, false
	}
	return t, true
}

// waitAll waits for the whole of a reply that is not streamed and returns
// the prompt's cached tokens; false once it answered the error. A cut
// fault cuts the connection here, before the reply.
func (s *Server) waitAll(w http.ResponseWriter, r *http.Request, anthropic bool, t *turn) (int, bool) {
	cached, err := t.g.wait(r.Context(), nil, func(int, int) error { return nil })
	if err != nil {
		s.replyError(w, r, anthropic, err)
		return 0, false
	}
	if t.rf.cutAfter > 0 {
		panic(http.ErrAbortHandler)
	}
	return cached, true
}

// parseTurn reads the body (bounded by Config.MaxBodyBytes), decodes it
// into req, runs its inline hints, and has parse fill a turn from req
// (its own checks and the prompt). parse sets the turn's model before
// anything that can fail: an unknown model is answered first (404), then
// parse's error (a badRequest). False once it has answered.
func (s *Server) parseTurn(w http.ResponseWriter, r *http.Request, anthropic bool, req any, parse func(*turn) error) (*turn, bool) {
	if !s.decode(w, r, anthropic, req) {
		return nil, false
	}
	t := &turn{}
	err := parse(t)
	if !s.checkModel(t.model) {
		s.unknownModel(w, anthropic, t.model)
		return nil, false
	}
	if err != nil {
		s.replyError(w, r, anthropic, err)
		return nil, false
	}
	return t, true
}

// decode decodes a request body into v; false when it answered the error.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, anthropic bool, v any) bool {
	b, ok := s.readBody(w, r, anthropic)
	if !ok {
		return false
	}
	if err := json.Unmarshal(b, v); err != nil {
		s.fail(w, anthropic, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return false
	}
	s.inlineHints(w, r, b)
	return true
}

func (s *Server) unknownModel(w http.ResponseWriter, anthropic bool, model string) {
	s.fail(w, anthropic, http.StatusNotFound, "The model `"+model+"` does not exist.")
}

// replyError answers err in the API's error shape: a request error with
// its status, anything else (the worker restarted) 500; nothing once the
// client has gone.
func (s *Server) replyError(w http.ResponseWriter, r *http.Request, anthropic bool, err error) {
	if r.Context().Err() != nil {
		return
	}
	var es *errStatus
	if errors.As(err, &es) {
		s.fail(w, anthropic, es.status, es.msg)
		return
	}
	s.fail(w, anthropic, http.StatusInternalServerError, err.Error())
}

// chooseTool is the tool the reply calls under the request's tool_choice,
// or nil.
func chooseTool(msgs []wordtok.Message, tools []wordtok.Tool, choice json.RawMessage) *wordtok.Tool {
	mode, named := apiwire.ToolChoice(choice)
	if t, ok := pickTool(msgs, tools, mode, named); ok {
		return &t
	}
	return nil
}
