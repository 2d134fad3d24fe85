package apiwire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// SSEWriter writes server-sent events to an HTTP reply, flushing after
// each event so that every token reaches the client when it is generated.
// OpenAI streams are `data:` lines ending with `data: [DONE]`; Anthropic
// and Responses streams name each event with an `event:` line.
//
// An SSEWriter is not safe for concurrent use.
type SSEWriter struct {
	w   io.Writer
	rc  *http.ResponseController
	buf []byte
	err error
}

// NewSSEWriter returns a writer on w. It sets the stream's headers
// (Content-Type: text/event-stream, Cache-Control: no-cache) but writes
// nothing until the first event, so a caller may still set headers or
// fail with a plain error reply.
func NewSSEWriter(w http.ResponseWriter) *SSEWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	return &SSEWriter{w: w, rc: http.NewResponseController(w)}
}

// Err returns the first write error (the client went away).
func (s *SSEWriter) Err() error { return s.err }

// Data writes `data: JSON(v)` and flushes.
func (s *SSEWriter) Data(v any) error { return s.Event("", v) }

// Event writes `event: name` (omitted when name is "") and `data: JSON(v)`,
// then flushes.
func (s *SSEWriter) Event(name string, v any) error {
	if s.err != nil {
		return s.err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.Raw(name, b)
}

// Raw writes an event whose data is data as is (it must hold no newline).
func (s *SSEWriter) Raw(name string, data []byte) error {
	if s.err != nil {
		return s.err
	}
	s.buf = s.buf[:0]
	if name != "" {
		s.buf = append(s.buf, "event: "...)
		s.buf = append(s.buf, name...)
		s.buf = append(s.buf, '\n')
	}
	s.buf = append(s.buf, "data: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, '\n', '\n')
	return s.write()
}

// Done writes OpenAI's terminator, `data: [DONE]`.
func (s *SSEWriter) Done() error { return s.Raw("", []byte("[DONE]")) }

// Comment writes a `: text` comment line (a keep-alive clients ignore).
func (s *SSEWriter) Comment(text string) error {
	if s.err != nil {
		return s.err
	}
	s.buf = append(append(append(s.buf[:0], ": "...), text...), '\n', '\n')
	return s.write()
}

// Flush flushes what was written (events are flushed as written; this is
// for a caller that wrote headers only).
func (s *SSEWriter) Flush() error {
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
	return s.err
}

func (s *SSEWriter) write() error {
	if _, err := s.w.Write(s.buf); err != nil {
		s.err = err
		return err
	}
	return s.Flush()
}

// DefaultMaxSSELine bounds one line of an SSE stream read by SSEReader
// when no bound is given.
const DefaultMaxSSELine = 4 << 20

// ErrSSELineTooLong is returned by SSEReader.Next for a line longer than
// the reader's bound.
var ErrSSELineTooLong = errors.New("apiwire: SSE line too long")

// SSEEvent is one server-sent event: its `event:` name ("" when none), its
// data (several data lines joined with "\n") and its id.
type SSEEvent struct {
	Event string
	Data  []byte
	ID    string
}

// IsDone reports whether the event is OpenAI's `data: [DONE]`.
func (e *SSEEvent) IsDone() bool { return string(e.Data) == "[DONE]" }

// SSEReader reads server-sent events from an upstream stream (as the
// gateway reads an engine's), following the WHATWG rules for lines ending
// in \n or \r\n: events end at a blank line; a
// field's value drops one leading space; comments (":...") and retry:
// lines are ignored; an event with no data line is not dispatched; a last
// event cut off by EOF without its blank line is still returned. Lines
// longer than the bound end the read with ErrSSELineTooLong.
//
// An SSEReader is not safe for concurrent use.
type SSEReader struct {
	sc   *bufio.Scanner
	data []byte
	err  error
}

// NewSSEReader returns a reader of r whose lines are at most maxLine bytes
// (DefaultMaxSSELine when maxLine <= 0).
func NewSSEReader(r io.Reader, maxLine int) *SSEReader {
	if maxLine <= 0 {
		maxLine = DefaultMaxSSELine
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(maxLine, 16<<10)), maxLine)
	return &SSEReader{sc: sc}
}

// Next returns the next event. Its Data is valid until the next call. At
// the end of the stream it returns io.EOF; a read error or
// ErrSSELineTooLong ends the stream too.
func (r *SSEReader) Next() (SSEEvent, error) {
	if r.err != nil {
		return SSEEvent{}, r.err
	}
	var ev SSEEvent
	r.data = r.data[:0]
	have := false
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if len(line) == 0 {
			if have {
				ev.Data = r.data
				return ev, nil
			}
			ev = SSEEvent{}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(field) {
		case "data":
			if have {
				r.data = append(r.data, '\n')
			}
			r.data, have = append(r.data, value...), true
		case "event":
			ev.Event = string(value)
		case "id":
			ev.ID = string(value)
		}
	}
	r.err = r.sc.Err()
	if errors.Is(r.err, bufio.ErrTooLong) {
		r.err = ErrSSELineTooLong
	}
	if r.err == nil {
		r.err = io.EOF
	}
	if have {
		ev.Data = r.data
		return ev, nil
	}
	return SSEEvent{}, r.err
}
