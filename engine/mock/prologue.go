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

// prologue is how every generation handler (chat, completions, responses,
// messages) begins: parseTurn, then the request's faults (begin), then the
// generation. It returns false once it has answered the request (an error
// in the API's shape) or the client went away.
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
