package mock

import (
	"encoding/json"
	"net/http"

	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/wordtok"
)

// messagesTurn is a Messages request's turn: the template applied to its
// messages, continuing a final assistant message (prefill) or with a tool.
// max_tokens is required unless only the prompt is wanted (count_tokens).
func (s *Server) messagesTurn(req *apiwire.MessagesRequest, t *turn) error {
	return s.messagesPrompt(req, t, false)
}

// messagesPrompt is messagesTurn, or with promptOnly the prompt alone.
func (s *Server) messagesPrompt(req *apiwire.MessagesRequest, t *turn, promptOnly bool) error {
	t.model = req.Model
	if len(req.Messages) == 0 {
		return badRequest("messages: at least one message is required")
	}
	msgs, tools := wordtok.FromMessages(req)
	// A final assistant message is prefilled: the reply continues it.
	t.continuing = req.Messages[len(req.Messages)-1].Role == "assistant"
	t.prompt = s.tok.ApplyChat(nil, msgs, tools, wordtok.ChatOptions{AddGenerationPrompt: !t.continuing, ContinueFinalMessage: t.continuing})
	if promptOnly {
		return nil
	}
	if req.MaxTokens == nil || *req.MaxTokens < 1 {
		return badRequest("max_tokens: Field required (a positive integer)")
	}
	if !t.continuing {
		t.tool = chooseTool(msgs, tools, req.ToolChoice)
	}
	t.maxTokens, t.salt = *req.MaxTokens, req.CacheSalt
	return nil
}

func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	var req apiwire.MessagesRequest
	t, ok := s.parseTurn(w, r, true, &req, func(t *turn) error { return s.messagesPrompt(&req, t, true) })
	if !ok {
		return
	}
	apiwire.WriteJSON(w, http.StatusOK, apiwire.CountTokensResponse{InputTokens: len(t.prompt)})
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request, req *apiwire.MessagesRequest, t *turn) {
	g, rf, prompt := t.g, t.rf, t.prompt
	stop := apiwire.StopEndTurn
	switch {
	case g.tool != nil:
		stop = apiwire.StopToolUse
	case g.limited:
		stop = apiwire.StopMaxTokens
	}
	usage := func(cached, out int) apiwire.AnthropicUsage {
		return apiwire.AnthropicUsage{InputTokens: len(prompt) - cached, CacheReadInputTokens: cached, OutputTokens: out}
	}
	msg := apiwire.MessagesResponse{ID: s.nextID("msg_"), Type: "message", Role: "assistant", Model: s.replyModel(req.Model),
		Content: []apiwire.ContentBlock{}}
	toolBlock := func(input json.RawMessage) apiwire.ContentBlock {
		return apiwire.ContentBlock{Type: apiwire.BlockToolUse, ID: "toolu_" + g.toolID[len("call_"):], Name: g.tool.Name, Input: input}
	}
	if !req.Stream {
		cached, ok := s.waitAll(w, r, true, t)
		if !ok {
			return
		}
		if g.tool != nil {
			msg.Content = append(msg.Content, toolBlock(json.RawMessage(g.toolArgs)))
		} else {
			msg.Content = append(msg.Content, apiwire.ContentBlock{Type: apiwire.BlockText, Text: g.text(g.n)})
		}
		msg.StopReason, msg.Usage = &stop, usage(cached, g.n)
		apiwire.WriteJSON(w, http.StatusOK, msg)
		return
	}
	sw := apiwire.NewSSEWriter(w)
	ev := func(e apiwire.MessagesStreamEvent) error { return sw.Event(e.Type, e) }
	started := false
	cached, err := g.wait(r.Context(), &rf, func(from, to int) error {
		if !started {
			// message_start goes out with the first token, when the
			// cached prompt tokens are known.
			started = true
			_, _, c, _ := s.drv.progress(g.job)
			start := msg
			start.Usage = usage(c, 1)
			if err := ev(apiwire.MessagesStreamEvent{Type: apiwire.EventMessageStart, Message: &start}); err != nil {
				return err
			}
			block := apiwire.ContentBlock{Type: apiwire.BlockText}
			if g.tool != nil {
				block = toolBlock(nil)
			}
			if err := ev(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStart, ContentBlock: &block}); err != nil {
				return err
			}
			if err := ev(apiwire.MessagesStreamEvent{Type: apiwire.EventPing}); err != nil {
				return err
			}
		}
		if g.tool != nil {
			return ev(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockDelta, Delta: &apiwire.StreamDelta{Type: apiwire.DeltaInputJSON, PartialJSON: g.toolArgs}})
		}
		for i := from; i < to; i++ {
			if err := ev(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockDelta, Delta: &apiwire.StreamDelta{Type: apiwire.DeltaText, Text: g.piece(i)}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if sw.Err() == nil && r.Context().Err() == nil {
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventError, Error: &apiwire.AnthropicErrorDetail{Type: "api_error", Message: err.Error()}})
		}
		return
	}
	u := usage(cached, g.n)
	ev(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStop})
	ev(apiwire.MessagesStreamEvent{Type: apiwire.EventMessageDelta, Delta: &apiwire.StreamDelta{StopReason: &stop}, Usage: &u})
	ev(apiwire.MessagesStreamEvent{Type: apiwire.EventMessageStop})
}
