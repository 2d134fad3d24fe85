package gateway

import (
	"bytes"
	"encoding/json"

	"github.com/agentkv/agentkv/internal/jsonscan"
)

// requestHead is what the gateway reads of every request body itself: the
// rest reaches the worker (and the translations) as it came.
type requestHead struct {
	Model         string          `json:"model"`
	Stream        bool            `json:"stream"`
	StreamOptions json.RawMessage `json:"stream_options"`
}

// readHead decodes the head of a request body (valid JSON: readBody
// checked it), as json.Unmarshal into a requestHead would, without decoding the whole body: a scan of the
// object's top level finds the three members (keys matched as
// encoding/json matches them, case-insensitively; the last of a repeated
// key wins) and only their values are decoded. Bodies the scan does not
// take (a key with an escape, anything malformed) and any decoding error
// go through json.Unmarshal, so errors are encoding/json's.
func readHead(body []byte, h *requestHead) error {
	if readHeadFast(body, h) {
		return nil
	}
	*h = requestHead{}
	return json.Unmarshal(body, h)
}

func readHeadFast(body []byte, h *requestHead) bool {
	s := headScanner{b: body}
	if !s.byte('{') {
		return false
	}
	if s.peek() == '}' {
		s.i++
		return s.end()
	}
	for {
		k, ok := s.key()
		if !ok || !s.byte(':') {
			return false
		}
		s.space()
		start := s.i
		if !s.skipValue() {
			return false
		}
		v := body[start:s.i]
		var err error
		switch {
		case bytes.EqualFold(k, []byte("model")):
			err = json.Unmarshal(v, &h.Model)
		case bytes.EqualFold(k, []byte("stream")):
			err = json.Unmarshal(v, &h.Stream)
		case bytes.EqualFold(k, []byte("stream_options")):
			err = json.Unmarshal(v, &h.StreamOptions)
		}
		if err != nil {
			return false
		}
		s.space()
		switch {
		case s.byte(','):
		case s.byte('}'):
			return s.end()
		default:
			return false
		}
	}
}

// headScanner walks a JSON text that json.Valid has not necessarily
// seen: every step reports failure rather than read past the end.
type headScanner struct {
	b []byte
	i int
}

func (s *headScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *headScanner) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// byte consumes c after white space.
func (s *headScanner) byte(c byte) bool {
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// end reports whether only white space is left.
func (s *headScanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// key reads a member's key: a string without escapes.
func (s *headScanner) key() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i + 1
	j := bytes.IndexAny(s.b[start:], "\"\\")
	if j < 0 || s.b[start+j] != '"' {
		return nil, false
	}
	s.i = start + j + 1
	return s.b[start : start+j], true
}

// skipValue passes one value. Strings and nesting are followed exactly;
// the value's own validity is left to the decoding of the members read
// and, for the others, to the body's json.Valid check before parse.
func (s *headScanner) skipValue() bool {
	depth := 0
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch c {
		case '"':
			j := jsonscan.StringEnd(s.b, s.i)
			if j < 0 {
				return false
			}
			s.i = j
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			if depth == 0 {
				return true
			}
			depth--
			s.i++
		case ',':
			if depth == 0 {
				return true
			}
			s.i++
		default:
			if depth == 0 && (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
				return true
			}
			s.i++
		}
		if depth == 0 && (c == '"' || c == '}' || c == ']') {
			return true
		}
	}
	return depth == 0
}
