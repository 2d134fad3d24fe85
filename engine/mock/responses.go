package mock

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/wordtok"
)

func (s *Server) responses(w http.ResponseWriter, r *http.Request, req *apiwire.ResponsesRequest, t *turn) {
	g, rf, prompt := t.g, t.rf, t.prompt
	resp := &apiwire.Response{ID: s.nextID("resp_"), Object: apiwire.ObjectResponse, CreatedAt: time.Now().Unix(),
		Status: apiwire.StatusInProgress, Model: s.replyModel(req.Model), Output: []apiwire.OutputItem{},
		MaxOutputTokens: req.MaxOutputTokens, ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		Temperature: req.Temperature, TopP: req.TopP, ToolChoice: req.ToolChoice, Tools: req.Tools, Truncation: "disabled",
		Metadata: req.Metadata}
	if resp.ToolChoice == nil {
		resp.ToolChoice = json.RawMessage(`"auto"`)
	}
	if resp.Tools == nil {
		resp.Tools = []apiwire.ResponsesTool{}
	}
	if s := req.InstructionsText(); s != "" {
		resp.Instructions = &s
	}
	if req.PreviousResponseID != "" {
		resp.PreviousResponseID = &req.PreviousResponseID
	}
	itemID := s.nextID("msg_")
	if g.tool != nil {
		itemID = s.nextID("fc_")
	}
	finalItem := func() apiwire.OutputItem {
		if g.tool != nil {
			return apiwire.OutputItem{Type: apiwire.ItemFunctionCall, ID: itemID, CallID: g.toolID, Name: g.tool.Name,
				Arguments: g.toolArgs, Status: apiwire.StatusCompleted}
		}
		return apiwire.OutputItem{Type: apiwire.ItemMessage, ID: itemID, Status: apiwire.StatusCompleted, Role: "assistant",
			Content: []apiwire.ResponsesContent{apiwire.OutputText(g.text(g.n))}}
	}
	finish := func(cached int) {
		resp.Output = []apiwire.OutputItem{finalItem()}
		resp.Usage = &apiwire.ResponsesUsage{InputTokens: len(prompt), InputTokensDetails: apiwire.InputTokensDetails{CachedTokens: cached},
			OutputTokens: g.n, TotalTokens: len(prompt) + g.n}
		resp.Status = apiwire.StatusCompleted
		if g.limited && g.tool == nil {
			resp.Status = apiwire.StatusIncomplete
			resp.IncompleteDetails = &apiwire.IncompleteDetails{Reason: "max_output_tokens"}
		}
	}
	if !req.Stream {
		cached, ok := s.waitAll(w, r, false, t)
		if !ok {
			return
		}
		finish(cached)
		apiwire.WriteJSON(w, http.StatusOK, resp)
		return
	}
	sw := apiwire.NewSSEWriter(w)
	seq := 0
	ev := func(e apiwire.ResponsesStreamEvent) error {
		e.SequenceNumber = seq
		seq++
		return sw.Event(e.Type, e)
	}
	start := *resp
	if ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventResponseCreated, Response: &start}) != nil ||
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventResponseInProgress, Response: &start}) != nil {
		return
	}
	var added apiwire.OutputItem
	if g.tool != nil {
		added = apiwire.OutputItem{Type: apiwire.ItemFunctionCall, ID: itemID, CallID: g.toolID, Name: g.tool.Name, Status: apiwire.StatusInProgress}
	} else {
		added = apiwire.OutputItem{Type: apiwire.ItemMessage, ID: itemID, Status: apiwire.StatusInProgress, Role: "assistant"}
	}
	if ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputItemAdded, Item: &added}) != nil {
		return
	}
	if g.tool == nil {
		if ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventContentPartAdded, ItemID: itemID, Part: apiwire.Ptr(apiwire.OutputText(""))}) != nil {
			return
		}
	}
	cached, err := g.wait(r.Context(), &rf, func(from, to int) error {
		if g.tool != nil {
			return ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventFunctionCallArgumentsDelta, ItemID: itemID, Delta: g.toolArgs})
		}
		for i := from; i < to; i++ {
			if err := ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputTextDelta, ItemID: itemID, Delta: g.piece(i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if sw.Err() == nil && r.Context().Err() == nil {
			failed := start
			failed.Status = apiwire.StatusFailed
			failed.Error = &apiwire.ResponseError{Code: "server_error", Message: err.Error()}
			ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventResponseFailed, Response: &failed})
		}
		return
	}
	finish(cached)
	item := resp.Output[0]
	if g.tool != nil {
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventFunctionCallArgumentsDone, ItemID: itemID, Name: g.tool.Name, Arguments: g.toolArgs})
	} else {
		text := item.Content[0].Text
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputTextDone, ItemID: itemID, Text: text})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventContentPartDone, ItemID: itemID, Part: &item.Content[0]})
	}
	ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputItemDone, Item: &item})
	// As vLLM does, the stream ends with response.completed also when the
	// response is incomplete (max_output_tokens reached): its status says
	// so.
	ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventResponseCompleted, Response: resp})
}

// responsesTurn is a Responses request's turn: the template applied to its
// input items and instructions, and a tool.
func (s *Server) responsesTurn(req *apiwire.ResponsesRequest, t *turn) error {
	t.model = req.Model
	msgs, tools := wordtok.FromResponses(req)
	if len(msgs) == 0 {
		return badRequest("input must not be empty")
	}
	t.prompt = s.tok.ApplyChat(nil, msgs, tools, wordtok.ChatOptions{AddGenerationPrompt: true})
	t.tool = chooseTool(msgs, tools, req.ToolChoice)
	if req.MaxOutputTokens != nil {
		t.maxTokens = *req.MaxOutputTokens
	}
	t.salt = req.CacheSalt
	return nil
}
