package translate

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// Usage is what a worker's reply said about one request, in the chat
// completions vocabulary whatever the API: prompt tokens include the
// cached ones (Anthropic's input_tokens + cache_read_input_tokens +
// cache_creation_input_tokens), finish reasons are chat's (stop, length,
// tool_calls).
type Usage struct {
	PromptTokens, CompletionTokens, CachedTokens int
	// HasUsage is set when the reply carried a usage object.
	HasUsage     bool
	FinishReason string
	// ToolCalls names the tool calls the model made, in order.
	ToolCalls []string
}

// SSEScanner splits a server-sent event stream into events, calling on
// for each data line with the current event name. Lines longer than
// maxSSELine are skipped whole. The zero value with On set is ready; it is
// not safe for concurrent use.
type SSEScanner struct {
	line  []byte
	skip  bool
	event string
	On    func(event string, data []byte)
	// SawDone is set by OpenAI's end marker, data: [DONE] (not handed to on).
	SawDone bool
}

const maxSSELine = 8 << 20

// Feed scans the next bytes of the stream.
func (s *SSEScanner) Feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(s.line)+len(b) > maxSSELine {
				s.skip, s.line = true, s.line[:0]
			} else if !s.skip {
				s.line = append(s.line, b...)
			}
			return
		}
		if !s.skip && len(s.line)+i <= maxSSELine {
			s.line = append(s.line, b[:i]...)
			s.handle()
		}
		s.line, s.skip = s.line[:0], false
		b = b[i+1:]
	}
}

// Flush handles a last line that had no newline.
func (s *SSEScanner) Flush() {
	if len(s.line) > 0 && !s.skip {
		s.handle()
	}
	s.line = s.line[:0]
}

func (s *SSEScanner) handle() {
	l := bytes.TrimRight(s.line, "\r")
	if len(l) == 0 {
		s.event = ""
		return
	}
	if ev, ok := bytes.CutPrefix(l, []byte("event:")); ok {
		s.event = string(bytes.TrimSpace(ev))
		return
	}
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("[DONE]")) {
		s.SawDone = true
		return
	}
	if len(data) == 0 {
		return
	}
	s.On(s.event, data)
}

// Sniffer learns a reply's Usage from the bytes passed through, for each
// API's own shapes (streamed or whole). It is not safe for concurrent use.
type Sniffer struct {
	api    API
	stream bool
	u      Usage
	sse    SSEScanner
	whole  bytes.Buffer
	// done is set once the stream said it ended properly: [DONE] is not
	// visible after scanning, so chat-shaped streams count a finish reason.
	done bool
}

// MaxSniff bounds how much of a whole (non-streamed) reply is kept to
// parse; the reply itself is always passed through whole.
const MaxSniff = 64 << 20

// NewSniffer returns a Sniffer for a reply of api, streamed (server-sent
// events) or whole.
func NewSniffer(api API, stream bool) *Sniffer {
	s := &Sniffer{api: api, stream: stream}
	s.sse.On = s.onEvent
	return s
}

// Stream reports whether the reply is a stream.
func (s *Sniffer) Stream() bool { return s.stream }

// Done reports whether the reply said it ended properly (a finish reason,
// message_stop, response.completed; for chat streams, data: [DONE] seen by
// Finish).
func (s *Sniffer) Done() bool { return s.done }

// Write feeds the next bytes of the reply.
func (s *Sniffer) Write(b []byte) {
	if s.stream {
		s.sse.Feed(b)
	} else if s.whole.Len()+len(b) <= MaxSniff {
		s.whole.Write(b)
	}
}

// Finish parses what is left and returns the usage.
func (s *Sniffer) Finish() Usage {
	if s.stream {
		s.sse.Flush()
		if s.sse.SawDone && (s.api == Chat || s.api == Completions) {
			s.done = true
		}
	} else {
		s.onWhole(s.whole.Bytes())
	}
	return s.u
}

// sniffJSON decodes a worker's reply (or event) into v, apiwire's shape of
// it. A value of an unexpected type is skipped, not fatal: the Sniffer
// reads a few fields of a large shape, which a worker may extend.
func sniffJSON(data []byte, v any) bool {
	err := json.Unmarshal(data, v)
	if err == nil {
		return true
	}
	var te *json.UnmarshalTypeError
	return errors.As(err, &te)
}

func (s *Sniffer) onWhole(b []byte) {
	switch s.api {
	case Chat, Completions:
		var cr apiwire.ChatResponse
		if !sniffJSON(b, &cr) {
			return
		}
		usageInto(cr.Usage, &s.u)
		for _, ch := range cr.Choices {
			if f := ch.FinishReason; f != "" {
				s.u.FinishReason = f
			}
			for _, tc := range ch.Message.ToolCalls {
				s.u.ToolCalls = append(s.u.ToolCalls, tc.Function.Name)
			}
		}
		s.done = len(cr.Choices) > 0
	case Responses:
		var r apiwire.Response
		if sniffJSON(b, &r) {
			s.fromResponse(&r)
		}
	case Messages:
		var m sniffedMessage
		if sniffJSON(b, &m) && m.Type == "message" {
			s.fromMessageUsage(&m.Usage, true)
			s.u.FinishReason = chatFinish(deref(m.StopReason))
			for _, c := range m.Content {
				if c.Type == "tool_use" {
					s.u.ToolCalls = append(s.u.ToolCalls, c.Name)
				}
			}
			s.done = true
		}
	}
}

func (s *Sniffer) fromResponse(r *apiwire.Response) {
	responsesUsageInto(r.Usage, &s.u)
	s.u.ToolCalls = s.u.ToolCalls[:0]
	calls := false
	for _, o := range r.Output {
		if o.Type == "function_call" || o.Type == "custom_tool_call" {
			s.u.ToolCalls = append(s.u.ToolCalls, o.Name)
			calls = true
		}
	}
	switch {
	case r.Status == "incomplete" && r.IncompleteDetails != nil && r.IncompleteDetails.Reason == "max_output_tokens":
		s.u.FinishReason = "length"
	case calls:
		s.u.FinishReason = "tool_calls"
	case r.Status == "completed":
		s.u.FinishReason = "stop"
	}
	s.done = r.Status == "completed" || r.Status == "incomplete"
}

// sniffedMessage is an Anthropic message (a whole reply, or
// message_start's) with its usage read count by count (nil: left out).
type sniffedMessage struct {
	apiwire.MessagesResponse
	Usage apiwire.MessageDeltaUsage `json:"usage"`
}

func (s *Sniffer) fromMessageUsage(u *apiwire.MessageDeltaUsage, start bool) {
	if u.InputTokens == nil && u.OutputTokens == nil && u.CacheReadInputTokens == nil {
		return
	}
	s.u.HasUsage = true
	if u.InputTokens != nil || u.CacheReadInputTokens != nil || u.CacheCreationInputTokens != nil {
		in := 0
		for _, p := range []*int{u.InputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens} {
			if p != nil {
				in += *p
			}
		}
		if in > 0 || start {
			s.u.PromptTokens = in
		}
		if u.CacheReadInputTokens != nil {
			s.u.CachedTokens = *u.CacheReadInputTokens
		}
	}
	if u.OutputTokens != nil {
		s.u.CompletionTokens = *u.OutputTokens
	}
}

// Learn folds what a chat chunk says about usage into u: the usage
// object, a finish reason (it returns true: the stream finished), the
// names of new tool calls (only a call's first delta names it).
func Learn(c *apiwire.ChatChunk, u *Usage) (finished bool) {
	usageInto(c.Usage, u)
	for _, ch := range c.Choices {
		if f := deref(ch.FinishReason); f != "" {
			u.FinishReason, finished = f, true
		}
		for _, tc := range ch.Delta.ToolCalls {
			if tc.Function.Name != "" {
				u.ToolCalls = append(u.ToolCalls, tc.Function.Name)
			}
		}
	}
	return finished
}

// ChunkMatters reports whether a chat chunk may carry usage, a finish
// reason or a tool call, so that plain content deltas, most of a stream,
// are not decoded: it looks for "usage", "tool_calls" or a finish_reason
// whose value is not null (whitespace allowed around the colon).
func ChunkMatters(data []byte) bool {
	if bytes.Contains(data, []byte(`"usage"`)) || bytes.Contains(data, []byte(`"tool_calls"`)) {
		return true
	}
	key := []byte(`"finish_reason"`)
	for rest := data; ; {
		i := bytes.Index(rest, key)
		if i < 0 {
			return false
		}
		rest = bytes.TrimLeft(rest[i+len(key):], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		rest = bytes.TrimLeft(rest[1:], " \t\r\n")
		if !bytes.HasPrefix(rest, []byte("null")) {
			return true
		}
	}
}

// chatFinish maps an Anthropic stop_reason to a chat finish reason.
func chatFinish(stop string) string {
	switch stop {
	case "end_turn", "stop_sequence", "pause_turn", "refusal":
		return "stop"
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	}
	return stop
}

func (s *Sniffer) onEvent(event string, data []byte) {
	switch s.api {
	case Chat, Completions:
		if !ChunkMatters(data) {
			return // a plain content delta: nothing to learn
		}
		if finished, ok := learnFast(data, &s.u); ok {
			s.done = s.done || finished
			return
		}
		var c apiwire.ChatChunk
		if !sniffJSON(data, &c) {
			return
		}
		if Learn(&c, &s.u) {
			s.done = true
		}
	case Responses:
		if event != "" && event != "response.completed" && event != "response.incomplete" && event != "response.failed" {
			return
		}
		var ev apiwire.ResponsesStreamEvent
		if !sniffJSON(data, &ev) {
			return
		}
		switch ev.Type {
		case "response.completed", "response.incomplete":
			if ev.Response != nil {
				s.fromResponse(ev.Response)
			}
		case "response.failed":
			s.done = false
		}
	case Messages:
		switch event {
		case "", "message_start", "content_block_start", "message_delta", "message_stop":
		default:
			return // deltas, pings: nothing to learn
		}
		var ev struct {
			apiwire.MessagesStreamEvent
			// These shadow the event's: usage counts may be left out.
			Message *sniffedMessage            `json:"message"`
			Usage   *apiwire.MessageDeltaUsage `json:"usage"`
		}
		if !sniffJSON(data, &ev) {
			return
		}
		switch ev.Type {
		case "message_start":
			if ev.Message != nil {
				s.fromMessageUsage(&ev.Message.Usage, true)
			}
		case "content_block_start":
			if ev.ContentBlock != nil && ev.ContentBlock.Type == "tool_use" {
				s.u.ToolCalls = append(s.u.ToolCalls, ev.ContentBlock.Name)
			}
		case "message_delta":
			if ev.Delta != nil && deref(ev.Delta.StopReason) != "" {
				s.u.FinishReason = chatFinish(*ev.Delta.StopReason)
			}
			if ev.Usage != nil {
				s.fromMessageUsage(ev.Usage, false)
			}
		case "message_stop":
			s.done = true
		}
	}
}
