package translate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// EventWriter writes server-sent events to the client, flushing each. It
// is not safe for concurrent use.
type EventWriter struct {
	w   http.ResponseWriter
	fl  http.Flusher
	err error // the first write error (the client went away)
	buf []byte
}

// NewEventWriter returns an EventWriter writing to w (flushing each event
// when w is an http.Flusher).
func NewEventWriter(w http.ResponseWriter) *EventWriter {
	fl, _ := w.(http.Flusher)
	return &EventWriter{w: w, fl: fl}
}

// Event writes "event: name\ndata: JSON(v)\n\n".
func (e *EventWriter) Event(name string, v any) { e.write(name, v) }

// Data writes "data: JSON(v)\n\n" (an event with no name, as OpenAI's
// chat streams send).
func (e *EventWriter) Data(v any) { e.write("", v) }

// Err returns the first write error (the client went away), or nil.
func (e *EventWriter) Err() error { return e.err }

// write writes one event, named unless name is "", and flushes it.
func (e *EventWriter) write(name string, v any) {
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

// Translator turns a streamed chat completion into another API's stream.
// Start is called before the first chunk, Chunk per chat chunk, End once
// with the usage: complete is false when the worker's stream broke off
// before it finished (the client then gets the API's error event).
// Implementations are not safe for concurrent use.
type Translator interface {
	Start()
	Chunk(c *apiwire.ChatChunk)
	End(u Usage, complete bool, msg string)
}

// toolAcc accumulates one streamed tool call.
type toolAcc struct {
	out      int // output index (Responses) or block index (Messages)
	id, name string
	args     strings.Builder
}

// ResponsesStream translates to Responses events.
type ResponsesStream struct {
	ew     *EventWriter
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

func NewResponsesStream(ew *EventWriter, id, model string, created int64, req *apiwire.ChatRequest, custom map[string]bool) *ResponsesStream {
	return &ResponsesStream{ew: ew, resp: responsesShell(id, model, created, req), custom: custom, id: id,
		textOut: -1, tools: map[int]*toolAcc{}}
}

// emit writes ev with the next sequence number.
func (s *ResponsesStream) emit(ev apiwire.ResponsesStreamEvent) {
	s.ev = ev
	s.ev.SequenceNumber = s.seq
	s.seq++
	s.ew.Event(ev.Type, &s.ev)
}

// emitResponse writes a response.* event carrying the response so far.
func (s *ResponsesStream) emitResponse(typ string) {
	s.emit(apiwire.ResponsesStreamEvent{Type: typ, Response: &s.resp})
}

func (s *ResponsesStream) Start() {
	s.emitResponse(apiwire.EventResponseCreated)
	s.emitResponse(apiwire.EventResponseInProgress)
}

func (s *ResponsesStream) msgID() string { return "msg_" + s.id }

func (s *ResponsesStream) Chunk(c *apiwire.ChatChunk) {
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

func (s *ResponsesStream) itemID(a *toolAcc) string { return fmt.Sprintf("fc_%s_%d", s.id, a.out) }

func (s *ResponsesStream) closeText() {
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

func (s *ResponsesStream) closeTool() {
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

func (s *ResponsesStream) End(u Usage, complete bool, msg string) {
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

// MessagesStream translates to Anthropic Messages events.
type MessagesStream struct {
	ew      *EventWriter
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

func NewMessagesStream(ew *EventWriter, id, model string, prompt int) *MessagesStream {
	return &MessagesStream{ew: ew, id: id, model: model, prompt: prompt, textIdx: -1, tools: map[int]*toolAcc{}}
}

func (s *MessagesStream) emit(ev apiwire.MessagesStreamEvent) {
	s.ev = ev
	s.ew.Event(ev.Type, &s.ev)
}

// emitDelta writes a content_block_delta.
func (s *MessagesStream) emitDelta(index int, d apiwire.StreamDelta) {
	s.delta = d
	s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockDelta, Index: index, Delta: &s.delta})
}

func (s *MessagesStream) Start() {
	s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventMessageStart, Message: &apiwire.MessagesResponse{
		ID: s.id, Type: "message", Role: "assistant", Model: s.model, Content: []apiwire.ContentBlock{},
		Usage: apiwire.AnthropicUsage{InputTokens: s.prompt}}})
	s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventPing})
}

func (s *MessagesStream) Chunk(c *apiwire.ChatChunk) {
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

func (s *MessagesStream) closeText() {
	if s.textIdx >= 0 {
		s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStop, Index: s.textIdx})
		s.textIdx = -1
	}
}

func (s *MessagesStream) closeTool() {
	if s.open != nil {
		s.emit(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStop, Index: s.open.out})
		s.open = nil
	}
}

func (s *MessagesStream) End(u Usage, complete bool, msg string) {
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
