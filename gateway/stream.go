package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// eventWriter writes server-sent events to the client, flushing each.
type eventWriter struct {
	w   http.ResponseWriter
	fl  http.Flusher
	err error // the first write error (the client went away)
	buf []byte
}

func newEventWriter(w http.ResponseWriter) *eventWriter {
	fl, _ := w.(http.Flusher)
	return &eventWriter{w: w, fl: fl}
}

// event writes "event: name\ndata: JSON(v)\n\n".
func (e *eventWriter) event(name string, v any) { e.write(name, v) }

// data writes "data: JSON(v)\n\n" (an event with no name, as OpenAI's
// chat streams send).
func (e *eventWriter) data(v any) { e.write("", v) }

// write writes one event, named unless name is "", and flushes it.
func (e *eventWriter) write(name string, v any) {
	if e.err != nil {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return
	}
	e.buf = e.buf[:0]
	if name != "" {
		e.buf = append(append(append(e.buf, "event: "...), name...), '\n')
	}
	e.buf = append(append(append(e.buf, "data: "...), data...), "\n\n"...)
	if _, e.err = e.w.Write(e.buf); e.err == nil && e.fl != nil {
		e.fl.Flush()
	}
}

// translator turns a streamed chat completion into another API's stream.
// start is called before the first chunk, chunk per chat chunk, end once
// with the usage: complete is false when the worker's stream broke off
// before it finished (the client then gets the API's error event).
type translator interface {
	start()
	chunk(c *chatChunk)
	end(u Usage, complete bool, msg string)
}

// toolAcc accumulates one streamed tool call.
type toolAcc struct {
	out      int // output index (Responses) or block index (Messages)
	id, name string
	args     strings.Builder
}

// responsesStream translates to Responses events.
type responsesStream struct {
	ew     *eventWriter
	seq    int
	resp   responsesResponse
	custom map[string]bool
	id     string

	textOut int // output index of the open message item, -1 when none
	text    strings.Builder
	tools   map[int]*toolAcc // by chat tool-call index
	open    *toolAcc
}

func newResponsesStream(ew *eventWriter, id, model string, created int64, req *chatRequest, custom map[string]bool) *responsesStream {
	return &responsesStream{ew: ew, resp: responsesShell(id, model, created, req), custom: custom, id: id,
		textOut: -1, tools: map[int]*toolAcc{}}
}

type jobj = map[string]any

func (s *responsesStream) emit(typ string, v jobj) {
	v["type"], v["sequence_number"] = typ, s.seq
	s.seq++
	s.ew.event(typ, v)
}

// respDelta is the per-chunk Responses event (output_text.delta,
// function_call_arguments.delta), encoded from a struct: the hot path.
type respDelta struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	ContentIndex   *int   `json:"content_index,omitempty"`
	Delta          string `json:"delta"`
	Logprobs       *[]any `json:"logprobs,omitempty"`
}

var zero = 0

func (s *responsesStream) emitDelta(typ, item string, out int, text bool, delta string) {
	ev := respDelta{Type: typ, SequenceNumber: s.seq, ItemID: item, OutputIndex: out, Delta: delta}
	if text {
		ev.ContentIndex, ev.Logprobs = &zero, &[]any{}
	}
	s.seq++
	s.ew.event(typ, &ev)
}

func (s *responsesStream) start() {
	s.emit("response.created", jobj{"response": s.resp})
	s.emit("response.in_progress", jobj{"response": s.resp})
}

func (s *responsesStream) msgID() string { return "msg_" + s.id }

func (s *responsesStream) chunk(c *chatChunk) {
	if s.resp.Model == "" && c.Model != "" {
		s.resp.Model = c.Model
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		if t := deref(ch.Delta.Content); t != "" {
			if s.textOut < 0 {
				s.closeTool()
				s.textOut = len(s.resp.Output)
				item := responsesOutput{Type: "message", ID: s.msgID(), Status: "in_progress", Role: "assistant",
					Content: &[]responsesText{}}
				s.resp.Output = append(s.resp.Output, item)
				s.emit("response.output_item.added", jobj{"output_index": s.textOut, "item": item})
				s.emit("response.content_part.added", jobj{"item_id": s.msgID(), "output_index": s.textOut,
					"content_index": 0, "part": responsesText{Type: "output_text", Annotations: []any{}}})
			}
			s.text.WriteString(t)
			s.emitDelta("response.output_text.delta", s.msgID(), s.textOut, true, t)
		}
		for _, tc := range ch.Delta.ToolCalls {
			idx := 0
			if tc.Index != nil {
				idx = *tc.Index
			}
			a := s.tools[idx]
			if a == nil {
				s.closeText()
				s.closeTool()
				a = &toolAcc{out: len(s.resp.Output), id: tc.ID, name: tc.Function.Name}
				if a.id == "" {
					a.id = fmt.Sprintf("call_%s_%d", s.id, idx)
				}
				s.tools[idx] = a
				s.open = a
				item := toolItem(s.itemID(a), a.id, a.name, "", s.custom)
				item.Status = "in_progress"
				s.resp.Output = append(s.resp.Output, item)
				s.emit("response.output_item.added", jobj{"output_index": a.out, "item": item})
			}
			if d := tc.Function.Arguments; d != "" {
				a.args.WriteString(d)
				if !s.custom[a.name] {
					s.emitDelta("response.function_call_arguments.delta", s.itemID(a), a.out, false, d)
				}
			}
		}
	}
}

func (s *responsesStream) itemID(a *toolAcc) string { return fmt.Sprintf("fc_%s_%d", s.id, a.out) }

func (s *responsesStream) closeText() {
	if s.textOut < 0 {
		return
	}
	t := s.text.String()
	part := responsesText{Type: "output_text", Text: t, Annotations: []any{}}
	s.emit("response.output_text.done", jobj{"item_id": s.msgID(), "output_index": s.textOut, "content_index": 0,
		"text": t, "logprobs": []any{}})
	s.emit("response.content_part.done", jobj{"item_id": s.msgID(), "output_index": s.textOut, "content_index": 0,
		"part": part})
	item := &s.resp.Output[s.textOut]
	item.Status, item.Content = "completed", &[]responsesText{part}
	s.emit("response.output_item.done", jobj{"output_index": s.textOut, "item": *item})
	s.textOut = -1
}

func (s *responsesStream) closeTool() {
	a := s.open
	if a == nil {
		return
	}
	s.open = nil
	item := toolItem(s.itemID(a), a.id, a.name, a.args.String(), s.custom)
	if item.Input != nil {
		s.emit("response.custom_tool_call_input.delta", jobj{"item_id": item.ID, "output_index": a.out, "delta": *item.Input})
		s.emit("response.custom_tool_call_input.done", jobj{"item_id": item.ID, "output_index": a.out, "input": *item.Input})
	} else {
		s.emit("response.function_call_arguments.done", jobj{"item_id": item.ID, "output_index": a.out,
			"arguments": *item.Arguments})
	}
	s.resp.Output[a.out] = item
	s.emit("response.output_item.done", jobj{"output_index": a.out, "item": item})
}

func (s *responsesStream) end(u Usage, complete bool, msg string) {
	s.closeText()
	s.closeTool()
	if !complete {
		s.resp.Status = "failed"
		s.resp.Error = &responsesError{Code: "server_error", Message: msg}
		s.emit("response.failed", jobj{"response": s.resp})
		return
	}
	s.resp.Status, s.resp.IncompleteDetails = responsesStatus(u.FinishReason)
	s.resp.Usage = newResponsesUsage(u)
	typ := "response.completed"
	if s.resp.Status == "incomplete" {
		typ = "response.incomplete"
	}
	s.emit(typ, jobj{"response": s.resp})
}

// messagesStream translates to Anthropic Messages events.
type messagesStream struct {
	ew      *eventWriter
	id      string
	model   string
	prompt  int // input tokens announced in message_start (the routed prompt)
	block   int // next block index
	textIdx int // index of the open text block, -1 when none
	tools   map[int]*toolAcc
	open    *toolAcc
}

func newMessagesStream(ew *eventWriter, id, model string, prompt int) *messagesStream {
	return &messagesStream{ew: ew, id: id, model: model, prompt: prompt, textIdx: -1, tools: map[int]*toolAcc{}}
}

// anthDelta is a content_block_delta event, encoded from a struct: the
// hot path.
type anthDelta struct {
	Type  string        `json:"type"`
	Index int           `json:"index"`
	Delta anthDeltaBody `json:"delta"`
}

type anthDeltaBody struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

func (s *messagesStream) start() {
	s.ew.event("message_start", jobj{"type": "message_start", "message": jobj{
		"id": s.id, "type": "message", "role": "assistant", "model": s.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": anthUsage{InputTokens: s.prompt},
	}})
	s.ew.event("ping", jobj{"type": "ping"})
}

func (s *messagesStream) chunk(c *chatChunk) {
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		if t := deref(ch.Delta.Content); t != "" {
			if s.textIdx < 0 {
				s.closeTool()
				s.textIdx = s.block
				s.block++
				s.ew.event("content_block_start", jobj{"type": "content_block_start", "index": s.textIdx,
					"content_block": jobj{"type": "text", "text": ""}})
			}
			s.ew.event("content_block_delta", &anthDelta{Type: "content_block_delta", Index: s.textIdx,
				Delta: anthDeltaBody{Type: "text_delta", Text: &t}})
		}
		for _, tc := range ch.Delta.ToolCalls {
			idx := 0
			if tc.Index != nil {
				idx = *tc.Index
			}
			a := s.tools[idx]
			if a == nil {
				s.closeText()
				s.closeTool()
				a = &toolAcc{out: s.block, id: tc.ID, name: tc.Function.Name}
				if a.id == "" {
					a.id = fmt.Sprintf("toolu_%s_%d", s.id, idx)
				}
				s.block++
				s.tools[idx] = a
				s.open = a
				s.ew.event("content_block_start", jobj{"type": "content_block_start", "index": a.out,
					"content_block": jobj{"type": "tool_use", "id": a.id, "name": a.name, "input": jobj{}}})
			}
			if d := tc.Function.Arguments; d != "" {
				a.args.WriteString(d)
				s.ew.event("content_block_delta", &anthDelta{Type: "content_block_delta", Index: a.out,
					Delta: anthDeltaBody{Type: "input_json_delta", PartialJSON: &d}})
			}
		}
	}
}

func (s *messagesStream) closeText() {
	if s.textIdx >= 0 {
		s.ew.event("content_block_stop", jobj{"type": "content_block_stop", "index": s.textIdx})
		s.textIdx = -1
	}
}

func (s *messagesStream) closeTool() {
	if s.open != nil {
		s.ew.event("content_block_stop", jobj{"type": "content_block_stop", "index": s.open.out})
		s.open = nil
	}
}

func (s *messagesStream) end(u Usage, complete bool, msg string) {
	s.closeText()
	s.closeTool()
	if !complete {
		s.ew.event("error", jobj{"type": "error", "error": jobj{"type": "api_error", "message": msg}})
		return
	}
	s.ew.event("message_delta", jobj{"type": "message_delta",
		"delta": jobj{"stop_reason": stopReason(u.FinishReason, false), "stop_sequence": nil},
		"usage": newAnthUsage(u)})
	s.ew.event("message_stop", jobj{"type": "message_stop"})
}
