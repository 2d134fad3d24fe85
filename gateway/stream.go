package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentkv/agentkv/internal/apiwire"
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
	chunk(c *apiwire.ChatChunk)
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
	resp   apiwire.Response
	custom map[string]bool
	id     string
	ev     apiwire.ResponsesStreamEvent // the event being written

	textOut int // output index of the open message item, -1 when none
	text    strings.Builder
	tools   map[int]*toolAcc // by chat tool-call index
	open    *toolAcc
}

func newResponsesStream(ew *eventWriter, id, model string, created int64, req *apiwire.ChatRequest, custom map[string]bool) *responsesStream {
	return &responsesStream{ew: ew, resp: responsesShell(id, model, created, req), custom: custom, id: id,
		textOut: -1, tools: map[int]*toolAcc{}}
}

// emit writes ev with the next sequence number.
func (s *responsesStream) emit(ev apiwire.ResponsesStreamEvent) {
	s.ev = ev
	s.ev.SequenceNumber = s.seq
	s.seq++
	s.ew.event(ev.Type, &s.ev)
}

// emitResponse writes a response.* event carrying the response so far.
func (s *responsesStream) emitResponse(typ string) {
	s.emit(apiwire.ResponsesStreamEvent{Type: typ, Response: &s.resp})
}

func (s *responsesStream) start() {
	s.emitResponse(apiwire.EventResponseCreated)
	s.emitResponse(apiwire.EventResponseInProgress)
}

func (s *responsesStream) msgID() string { return "msg_" + s.id }

func (s *responsesStream) chunk(c *apiwire.ChatChunk) {
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
				item := apiwire.OutputItem{Type: apiwire.ItemMessage, ID: s.msgID(), Status: "in_progress", Role: "assistant"}
				s.resp.Output = append(s.resp.Output, item)
				s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputItemAdded, OutputIndex: s.textOut, Item: &item})
				part := outputText("")
				s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventContentPartAdded, ItemID: s.msgID(),
					OutputIndex: s.textOut, Part: &part})
			}
			s.text.WriteString(t)
			s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputTextDelta, ItemID: s.msgID(), OutputIndex: s.textOut,
				Delta: t})
		}
		for _, tc := range ch.Delta.ToolCalls {
			idx := tc.Index
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
				s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputItemAdded, OutputIndex: a.out, Item: &item})
			}
			if d := tc.Function.Arguments; d != "" {
				a.args.WriteString(d)
				if !s.custom[a.name] {
					s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventFunctionCallArgumentsDelta, ItemID: s.itemID(a),
						OutputIndex: a.out, Delta: d})
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
	part := outputText(s.text.String())
	s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputTextDone, ItemID: s.msgID(), OutputIndex: s.textOut,
		Text: part.Text})
	s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventContentPartDone, ItemID: s.msgID(), OutputIndex: s.textOut,
		Part: &part})
	item := &s.resp.Output[s.textOut]
	item.Status, item.Content = "completed", []apiwire.ResponsesContent{part}
	s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputItemDone, OutputIndex: s.textOut, Item: item})
	s.textOut = -1
}

func (s *responsesStream) closeTool() {
	a := s.open
	if a == nil {
		return
	}
	s.open = nil
	item := toolItem(s.itemID(a), a.id, a.name, a.args.String(), s.custom)
	if item.Type == apiwire.ItemCustomToolCall {
		s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventCustomToolCallInputDelta, ItemID: item.ID, OutputIndex: a.out,
			Delta: item.Input})
		s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventCustomToolCallInputDone, ItemID: item.ID, OutputIndex: a.out,
			Input: item.Input})
	} else {
		s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventFunctionCallArgumentsDone, ItemID: item.ID, OutputIndex: a.out,
			Arguments: item.Arguments})
	}
	s.resp.Output[a.out] = item
	s.emit(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputItemDone, OutputIndex: a.out, Item: &item})
}

func (s *responsesStream) end(u Usage, complete bool, msg string) {
	s.closeText()
	s.closeTool()
	if !complete {
		s.resp.Status = "failed"
		s.resp.Error = &apiwire.ResponseError{Code: "server_error", Message: msg}
		s.emitResponse(apiwire.EventResponseFailed)
		return
	}
	s.resp.Status, s.resp.IncompleteDetails = responsesStatus(u.FinishReason)
	s.resp.Usage = newResponsesUsage(u)
	typ := apiwire.EventResponseCompleted
	if s.resp.Status == "incomplete" {
		typ = apiwire.EventResponseIncomplete
	}
	s.emitResponse(typ)
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
	ev      apiwire.MessagesStreamEvent // the event being written
	delta   apiwire.StreamDelta         // its delta
}

func newMessagesStream(ew *eventWriter, id, model string, prompt int) *messagesStream {
	return &messagesStream{ew: ew, id: id, model: model, prompt: prompt, textIdx: -1, tools: map[int]*toolAcc{}}
}

func (s *messagesStream) emit(ev apiwire.MessagesStreamEvent) {
	s.ev = ev
	s.ew.event(ev.Type, &s.ev)
}

// emitDelta writes a content_block_delta.
func (s *messagesStream) emitDelta(index int, d apiwire.StreamDelta) {
	s.delta = d
	s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockDelta, Index: index, Delta: &s.delta})
}

func (s *messagesStream) start() {
	s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventMessageStart, Message: &apiwire.MessagesResponse{
		ID: s.id, Type: "message", Role: "assistant", Model: s.model, Content: []apiwire.ContentBlock{},
		Usage: apiwire.AnthropicUsage{InputTokens: s.prompt}}})
	s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventPing})
}

func (s *messagesStream) chunk(c *apiwire.ChatChunk) {
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		if t := deref(ch.Delta.Content); t != "" {
			if s.textIdx < 0 {
				s.closeTool()
				s.textIdx = s.block
				s.block++
				s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStart, Index: s.textIdx,
					ContentBlock: &apiwire.ContentBlock{Type: apiwire.BlockText}})
			}
			s.emitDelta(s.textIdx, apiwire.StreamDelta{Type: apiwire.DeltaText, Text: t})
		}
		for _, tc := range ch.Delta.ToolCalls {
			idx := tc.Index
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
				s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStart, Index: a.out,
					ContentBlock: &apiwire.ContentBlock{Type: apiwire.BlockToolUse, ID: a.id, Name: a.name}})
			}
			if d := tc.Function.Arguments; d != "" {
				a.args.WriteString(d)
				s.emitDelta(a.out, apiwire.StreamDelta{Type: apiwire.DeltaInputJSON, PartialJSON: d})
			}
		}
	}
}

func (s *messagesStream) closeText() {
	if s.textIdx >= 0 {
		s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStop, Index: s.textIdx})
		s.textIdx = -1
	}
}

func (s *messagesStream) closeTool() {
	if s.open != nil {
		s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStop, Index: s.open.out})
		s.open = nil
	}
}

func (s *messagesStream) end(u Usage, complete bool, msg string) {
	s.closeText()
	s.closeTool()
	if !complete {
		s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventError,
			Error: &apiwire.AnthropicErrorDetail{Type: "api_error", Message: msg}})
		return
	}
	au := newAnthUsage(u)
	s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventMessageDelta,
		Delta: &apiwire.StreamDelta{StopReason: apiwire.Ptr(stopReason(u.FinishReason, false))}, Usage: &au})
	s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventMessageStop})
}
