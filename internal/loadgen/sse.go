package loadgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"time"
)

// MaxEventBytes bounds one server-sent event line; a longer line is
// malformed and ends the read.
const MaxEventBytes = 4 << 20

// maxBodyBytes bounds a non-streamed reply that is parsed.
const maxBodyBytes = 64 << 20

// errLineTooLong is returned by readStream for a line over MaxEventBytes.
var errLineTooLong = errors.New("loadgen: event line too long")

// streamStats is what reading one reply found.
type streamStats struct {
	firstToken    time.Time // when the first generated token arrived (zero: none)
	events        int       // well-formed JSON events
	contentEvents int       // events that carried generated text, reasoning or tool calls
	malformed     int       // data that is not a JSON object
	done          bool      // saw data: [DONE]
	usage         usage
	hasUsage      bool
	finishReason  string
	streamError   string // the message of an {"error": ...} event
	scratch       chunk  // reused by event
	api           API    // the reply's shape
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// apiUsage holds the usage fields of the Responses and Messages APIs.
type apiUsage struct {
	InputTokens        *int `json:"input_tokens"`
	OutputTokens       *int `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
}

// chunk is the part of a stream event (or whole reply) that is measured:
// a chat / completions chunk, a Responses event or an Anthropic Messages
// event.
type chunk struct {
	Choices []choice        `json:"choices"`
	Usage   *usage          `json:"usage"`
	Error   json.RawMessage `json:"error"`

	// Responses and Messages events.
	Type     string          `json:"type"`
	Delta    json.RawMessage `json:"delta"`
	Response *struct {
		Status string    `json:"status"`
		Usage  *apiUsage `json:"usage"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	} `json:"response"`
	Message *struct {
		Usage *apiUsage `json:"usage"`
	} `json:"message"`
}

type choice struct {
	Delta        message `json:"delta"`
	Message      message `json:"message"`
	Text         string  `json:"text"`
	FinishReason string  `json:"finish_reason"` // null in every chunk but the last
}

// reset clears c for the next event, keeping the choices' capacity (json
// decodes into existing slice elements without zeroing them).
func (c *chunk) reset() {
	clear(c.Choices[:cap(c.Choices)])
	c.Choices, c.Usage, c.Error = c.Choices[:0], nil, c.Error[:0]
	c.Type, c.Delta, c.Response, c.Message = "", c.Delta[:0], nil, nil
}

// anthropicDelta is a message_delta's delta and a content_block_delta's.
type anthropicDelta struct {
	StopReason  string `json:"stop_reason"`
	Text        string `json:"text"`
	PartialJSON string `json:"partial_json"`
	Thinking    string `json:"thinking"`
}

// applyAPI accounts one Responses or Messages event at time t.
func (st *streamStats) applyAPI(c *chunk, raw []byte, t time.Time) {
	st.events++
	gen := false
	switch st.api {
	case Responses:
		switch c.Type {
		case "response.output_text.delta", "response.function_call_arguments.delta", "response.reasoning_text.delta",
			"response.custom_tool_call_input.delta", "response.refusal.delta":
			gen = true
		case "response.completed", "response.incomplete":
			st.done = true
			if c.Response != nil {
				st.finishReason = c.Response.Status
				if u := c.Response.Usage; u != nil {
					st.setAPIUsage(u, false)
				}
			}
		case "response.failed", "error":
			msg := "response failed"
			if c.Response != nil && c.Response.Error != nil {
				msg = c.Response.Error.Message
			}
			st.streamError = truncate(msg, 200)
		case "":
			if c.Response == nil { // a whole Responses object
				var whole struct {
					Object string    `json:"object"`
					Status string    `json:"status"`
					Usage  *apiUsage `json:"usage"`
					Output []any     `json:"output"`
				}
				if json.Unmarshal(raw, &whole) == nil && whole.Object == "response" {
					gen, st.done, st.finishReason = len(whole.Output) > 0, true, whole.Status
					if whole.Usage != nil {
						st.setAPIUsage(whole.Usage, false)
					}
				}
			}
		}
	case Messages:
		var d anthropicDelta
		if len(c.Delta) > 0 {
			_ = json.Unmarshal(c.Delta, &d)
		}
		switch c.Type {
		case "content_block_delta":
			gen = d.Text != "" || d.PartialJSON != "" || d.Thinking != ""
		case "message_start":
			if c.Message != nil && c.Message.Usage != nil {
				st.setAPIUsage(c.Message.Usage, true)
			}
		case "message_delta":
			if d.StopReason != "" {
				st.finishReason = d.StopReason
			}
			var u struct {
				Usage *apiUsage `json:"usage"`
			}
			if json.Unmarshal(raw, &u) == nil && u.Usage != nil {
				st.setAPIUsage(u.Usage, true)
			}
		case "message_stop":
			st.done = true
		case "message": // a whole message
			var whole struct {
				StopReason string    `json:"stop_reason"`
				Usage      *apiUsage `json:"usage"`
				Content    []any     `json:"content"`
			}
			if json.Unmarshal(raw, &whole) == nil {
				gen, st.done, st.finishReason = len(whole.Content) > 0, true, whole.StopReason
				if whole.Usage != nil {
					st.setAPIUsage(whole.Usage, true)
				}
			}
		}
	}
	if gen {
		st.contentEvents++
		if st.firstToken.IsZero() {
			st.firstToken = t
		}
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(c.Error, &e) != nil || e.Message == "" {
			e.Message = string(c.Error)
		}
		st.streamError = truncate(e.Message, 200)
	}
}

// setAPIUsage folds Responses or Messages usage into the chat-shaped
// st.usage: prompt tokens include the cached ones (Anthropic's
// input_tokens excludes cache reads and writes, so they are added back).
// Fields absent from u keep their value (message_delta carries only some).
func (st *streamStats) setAPIUsage(u *apiUsage, anthropic bool) {
	st.hasUsage = true
	if u.OutputTokens != nil {
		st.usage.CompletionTokens = *u.OutputTokens
	}
	var cached *int
	if anthropic {
		cached = u.CacheReadInputTokens
		if u.InputTokens != nil || u.CacheReadInputTokens != nil || u.CacheCreationInputTokens != nil {
			in := 0
			for _, p := range []*int{u.InputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens} {
				if p != nil {
					in += *p
				}
			}
			if in > 0 || u.InputTokens != nil {
				st.usage.PromptTokens = in
			}
		}
	} else {
		if u.InputTokens != nil {
			st.usage.PromptTokens = *u.InputTokens
		}
		if u.InputTokensDetails != nil {
			cached = u.InputTokensDetails.CachedTokens
		}
	}
	if cached != nil {
		v := *cached
		st.usage.PromptTokensDetails = &struct {
			CachedTokens *int `json:"cached_tokens"`
		}{&v}
	}
}

type message struct {
	Content          string            `json:"content"`
	ReasoningContent string            `json:"reasoning_content"`
	Reasoning        string            `json:"reasoning"`
	ToolCalls        []json.RawMessage `json:"tool_calls"`
}

func (m *message) generated() bool {
	return m.Content != "" || m.ReasoningContent != "" || m.Reasoning != "" || len(m.ToolCalls) > 0
}

// apply accounts one decoded event (or whole reply) at time t.
func (st *streamStats) apply(c *chunk, t time.Time) {
	st.events++
	gen := false
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Text != "" || ch.Delta.generated() || ch.Message.generated() {
			gen = true
		}
		if ch.FinishReason != "" {
			st.finishReason = ch.FinishReason
		}
	}
	if gen {
		st.contentEvents++
		if st.firstToken.IsZero() {
			st.firstToken = t
		}
	}
	if c.Usage != nil {
		st.usage, st.hasUsage = *c.Usage, true
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(c.Error, &e) != nil || e.Message == "" {
			e.Message = string(c.Error)
		}
		st.streamError = truncate(e.Message, 200)
	}
}

// event decodes one event's data.
func (st *streamStats) event(data []byte, t time.Time) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return // an event with no data (a keep-alive) is not malformed
	}
	if string(data) == "[DONE]" {
		st.done = true
		return
	}
	c := &st.scratch
	c.reset()
	if data[0] != '{' || json.Unmarshal(data, c) != nil {
		st.malformed++
		return
	}
	if st.api == Responses || st.api == Messages {
		st.applyAPI(c, data, t)
		return
	}
	st.apply(c, t)
}

// readStream reads a text/event-stream reply to its end, timing each event
// with now. It returns the read error (nil at EOF), or errLineTooLong.
// Events are separated by blank lines; several data lines of one event are
// joined by "\n"; comments (":...") and other fields are ignored; data
// after the last blank line is processed at EOF.
func readStream(r io.Reader, now func() time.Time, st *streamStats) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 16<<10), MaxEventBytes)
	var data []byte
	have := false
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(line) == 0 {
			if have {
				st.event(data, now())
				data, have = data[:0], false
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue // event:, id:, retry: or an unknown field
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if have {
			data = append(data, '\n')
		}
		data, have = append(data, value...), true
	}
	if have {
		st.event(data, now())
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			st.malformed++
			return errLineTooLong
		}
		return err
	}
	return nil
}

// readWhole parses a non-streamed JSON reply (a server that ignored
// "stream": true): the first token is taken to arrive with the reply.
func readWhole(r io.Reader, now func() time.Time, st *streamStats) error {
	b, err := io.ReadAll(io.LimitReader(r, maxBodyBytes))
	if err != nil {
		return err
	}
	st.event(b, now())
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
