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
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// chunk is the part of a chat / completions stream chunk (or whole reply)
// that is measured.
type chunk struct {
	Choices []choice        `json:"choices"`
	Usage   *usage          `json:"usage"`
	Error   json.RawMessage `json:"error"`
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
