package mock

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/wordtok"
)

func (s *Server) chat(w http.ResponseWriter, r *http.Request, req *apiwire.ChatRequest, t *turn) {
	g, rf, prompt := t.g, t.rf, t.prompt
	id, created, model := s.nextID("chatcmpl-"), time.Now().Unix(), s.replyModel(req.Model)
	finish := apiwire.FinishStop
	if g.tool != nil {
		finish = apiwire.FinishToolCalls
	} else if g.limited {
		finish = apiwire.FinishLength
	}
	usage := func(cached int) *apiwire.Usage {
		return &apiwire.Usage{PromptTokens: len(prompt), CompletionTokens: g.n, TotalTokens: len(prompt) + g.n,
			PromptTokensDetails: &apiwire.PromptTokensDetails{CachedTokens: cached}}
	}
	if !req.Stream {
		cached, ok := s.waitAll(w, r, false, t)
		if !ok {
			return
		}
		msg := apiwire.ChatResponseMessage{Role: "assistant"}
		if g.tool != nil {
			msg.ToolCalls = []apiwire.ToolCall{{ID: g.toolID, Type: "function", Function: apiwire.FunctionCall{Name: g.tool.Name, Arguments: g.toolArgs}}}
		} else {
			msg.Content = apiwire.Ptr(g.text(g.n))
		}
		apiwire.WriteJSON(w, http.StatusOK, apiwire.ChatResponse{ID: id, Object: apiwire.ObjectChatCompletion, Created: created, Model: model,
			Choices: []apiwire.ChatChoice{{Message: msg, FinishReason: finish, Logprobs: jsonNull}}, Usage: usage(cached)})
		return
	}
	sw := apiwire.NewSSEWriter(w)
	chunk := func(d apiwire.ChatDelta, fin *string) apiwire.ChatChunk {
		return apiwire.ChatChunk{ID: id, Object: apiwire.ObjectChatCompletionChunk, Created: created, Model: model,
			Choices: []apiwire.ChatChunkChoice{{Delta: d, FinishReason: fin, Logprobs: jsonNull}}}
	}
	// The headers go at once; the role chunk, as vLLM sends it, with the
	// first output (its stream starts when the engine returns the first
	// token), so a stream's first byte is its time to first token.
	w.WriteHeader(http.StatusOK)
	if err := sw.Flush(); err != nil {
		return
	}
	role := false
	cached, err := g.wait(r.Context(), &rf, func(from, to int) error {
		if !role {
			role = true
			if err := sw.Data(chunk(apiwire.ChatDelta{Role: "assistant", Content: apiwire.Ptr("")}, nil)); err != nil {
				return err
			}
		}
		if g.tool != nil {
			if err := sw.Data(chunk(apiwire.ChatDelta{ToolCalls: []apiwire.ToolCallDelta{{ID: g.toolID, Type: "function",
				Function: apiwire.FunctionCallDelta{Name: g.tool.Name}}}}, nil)); err != nil {
				return err
			}
			return sw.Data(chunk(apiwire.ChatDelta{ToolCalls: []apiwire.ToolCallDelta{{Function: apiwire.FunctionCallDelta{Arguments: g.toolArgs}}}}, nil))
		}
		for i := from; i < to; i++ {
			if err := sw.Data(chunk(apiwire.ChatDelta{Content: apiwire.Ptr(g.piece(i))}, nil)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.streamError(sw, err)
		return
	}
	if !role { // nothing generated (a cut at 0 tokens)
		sw.Data(chunk(apiwire.ChatDelta{Role: "assistant", Content: apiwire.Ptr("")}, nil))
	}
	sw.Data(chunk(apiwire.ChatDelta{}, &finish))
	if req.IncludeUsage() {
		sw.Data(apiwire.ChatChunk{ID: id, Object: apiwire.ObjectChatCompletionChunk, Created: created, Model: model,
			Choices: []apiwire.ChatChunkChoice{}, Usage: usage(cached)})
	}
	sw.Done()
}

// chatTurn is a chat request's turn: the template applied to its
// messages, a tool unless the reply continues the last message.
func (s *Server) chatTurn(req *apiwire.ChatRequest, t *turn) error {
	t.model = req.Model
	if len(req.Messages) == 0 {
		return badRequest("messages must not be empty")
	}
	if req.ContinueFinalMessage && req.GenerationPrompt() {
		return badRequest("continue_final_message and add_generation_prompt cannot both be true")
	}
	msgs, tools := wordtok.FromChat(req)
	t.prompt = s.tok.ApplyChat(nil, msgs, tools, wordtok.ChatOptionsOf(req))
	if !req.ContinueFinalMessage {
		t.tool = chooseTool(msgs, tools, req.ToolChoice)
	}
	t.maxTokens, t.continuing, t.salt = req.MaxOutputTokens(), req.ContinueFinalMessage, req.CacheSalt
	return nil
}

// completionTurn is a completions request's turn: its prompt as given,
// which the text continues.
func (s *Server) completionTurn(req *apiwire.CompletionRequest, t *turn) error {
	t.model = req.Model
	var err error
	if t.prompt, err = s.promptTokens(req.Prompt); err != nil {
		return err
	}
	t.maxTokens = 16 // the completions API's default
	if req.MaxTokens != nil {
		t.maxTokens = *req.MaxTokens
	}
	t.continuing, t.salt = true, req.CacheSalt
	return nil
}

var jsonNull = json.RawMessage("null")

// streamError ends an OpenAI stream that failed after it started: an
// error event, as vLLM sends, and no [DONE].
func (s *Server) streamError(sw *apiwire.SSEWriter, err error) {
	if sw.Err() != nil || errors.Is(err, errClientGone) {
		return
	}
	sw.Data(apiwire.NewOpenAIError(http.StatusInternalServerError, err.Error()))
}

var errClientGone = errors.New("mock: client went away")

func (s *Server) replyModel(asked string) string {
	if asked == "" {
		return s.cfg.Model
	}
	return asked
}

// promptTokens tokenizes a completions prompt: one text or one token list.
func (s *Server) promptTokens(p apiwire.Prompt) ([]uint32, error) {
	switch {
	case len(p.Texts) == 1 && p.Tokens == nil:
		return s.tok.Encode(nil, p.Texts[0]), nil
	case len(p.Tokens) == 1:
		out := make([]uint32, len(p.Tokens[0]))
		for i, t := range p.Tokens[0] {
			if t < 0 || t > 1<<31 {
				return nil, badRequest("token id %d out of range", t)
			}
			out[i] = uint32(t)
		}
		return out, nil
	}
	return nil, badRequest("the mock serves one prompt per request (got %d)", max(len(p.Texts), len(p.Tokens)))
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request, req *apiwire.CompletionRequest, t *turn) {
	g, rf, prompt := t.g, t.rf, t.prompt
	id, created, model := s.nextID("cmpl-"), time.Now().Unix(), s.replyModel(req.Model)
	finish := apiwire.FinishStop
	if g.limited {
		finish = apiwire.FinishLength
	}
	usage := func(cached int) *apiwire.Usage {
		return &apiwire.Usage{PromptTokens: len(prompt), CompletionTokens: g.n, TotalTokens: len(prompt) + g.n,
			PromptTokensDetails: &apiwire.PromptTokensDetails{CachedTokens: cached}}
	}
	resp := apiwire.CompletionResponse{ID: id, Object: apiwire.ObjectTextCompletion, Created: created, Model: model}
	if !req.Stream {
		cached, ok := s.waitAll(w, r, false, t)
		if !ok {
			return
		}
		resp.Choices = []apiwire.CompletionChoice{{Text: g.text(g.n), FinishReason: &finish, Logprobs: jsonNull}}
		resp.Usage = usage(cached)
		apiwire.WriteJSON(w, http.StatusOK, resp)
		return
	}
	sw := apiwire.NewSSEWriter(w)
	choice := []apiwire.CompletionChoice{{Logprobs: jsonNull}}
	resp.Choices = choice
	cached, err := g.wait(r.Context(), &rf, func(from, to int) error {
		for i := from; i < to; i++ {
			choice[0].Text = g.piece(i)
			if i == g.n-1 {
				choice[0].FinishReason = &finish
			}
			if err := sw.Data(resp); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.streamError(sw, err)
		return
	}
	if req.IncludeUsage() {
		resp.Choices, resp.Usage = []apiwire.CompletionChoice{}, usage(cached)
		sw.Data(resp)
	}
	sw.Done()
}
