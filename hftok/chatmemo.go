package hftok

import (
	"bytes"

	"github.com/agentkv/agentkv/internal/jinja"

	"github.com/agentkv/agentkv/internal/jsonscan"
)

// parseMemo is what parsing one request body leaves for parsing the same
// session's next body: the body, and the decoded value and byte span of
// each top-level field and of each element of "messages". An agent's next
// turn resends the previous body with messages appended, so the two share
// a long byte prefix: a value whose span lies in that prefix is taken
// from the memo without reading its bytes (the bytes before it are equal,
// so the parser is in the same state there), and a top-level value or a
// message at the same index whose bytes are equal (a field written after
// "messages", such as "tools") is taken after a scan for its end instead
// of a decode. The decoded values are only read: the template gets the
// messages and tools as new values built from them (conversation, tools).
type parseMemo struct {
	body []byte
	top  []memoSpan      // top-level fields, in body order
	msgs []memoSpan      // the elements of the top-level "messages"
	conv []convMemo      // the messages as converted for the template (Chat.reuseConv)
	loop *jinja.LoopMemo // the template's loop memo (jinja.Template.RenderMemo)
}

// memoSpan is one decoded value and its bytes [start, end) in body.
type memoSpan struct {
	key        string // top-level fields only
	start, end int
	v          jinja.Value
}

// minEqualScan is the shortest value worth reusing by byte equality (a
// scan and a compare) instead of decoding it.
const minEqualScan = 256

// size is about the memory a memo holds: the body, and the decoded
// strings (about as long again).
func (m *parseMemo) size() int {
	if m == nil {
		return 0
	}
	return 2*len(m.body) + 64*(len(m.top)+len(m.msgs)) + 24*len(m.conv) + 64
}

// memoParse is parseJSON that reuses prev's values where body repeats
// them and, with record, returns the memo for the next body (which keeps
// body itself: the caller does not modify it afterwards). prev may be nil.
func memoParse(body []byte, prev *parseMemo, record bool) (jinja.Value, *parseMemo, error) {
	return memoParseMin(body, prev, record, minEqualScan)
}

// memoParseMin is memoParse reusing by byte equality values of at least
// minEq bytes (tests lower it to reach that path with short bodies).
func memoParseMin(body []byte, prev *parseMemo, record bool, minEq int) (jinja.Value, *parseMemo, error) {
	p := jsonParser{b: body, minEq: minEq}
	if record {
		p.rec = &parseMemo{}
	}
	if prev != nil {
		p.prev = prev
		p.lcp = jsonscan.CommonPrefix(prev.body, body)
	}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return jinja.Undefined(), nil, err
	}
	p.space()
	if p.i != len(p.b) {
		return jinja.Undefined(), nil, p.fail("data after the value")
	}
	if p.rec != nil {
		p.rec.body = body
	}
	return v, p.rec, nil
}

// reuse returns prev's value for the one that starts at p.i, if it may be
// taken: s (prev's span that would hold it, or nil) starts here and lies,
// with the byte after it, in the common prefix, or it is long and the bytes here through the
// value's end equal its bytes. It moves p.i past the value.
func (p *jsonParser) reuse(s *memoSpan) (jinja.Value, bool) {
	if s == nil {
		return jinja.Undefined(), false
	}
	// A byte past the value is shared too: a number's end is where the
	// next byte is not a digit.
	if s.start == p.i && s.end < p.lcp {
		p.i = s.end
		return s.v, true
	}
	n := s.end - s.start
	if n < p.minEq || len(p.b)-p.i < n {
		return jinja.Undefined(), false
	}
	if end, ok := jsonscan.ValueEnd(p.b, p.i); ok && end-p.i == n && bytes.Equal(p.b[p.i:end], p.prev.body[s.start:s.end]) {
		p.i = end
		return s.v, true
	}
	return jinja.Undefined(), false
}

// topSpan is prev's top-level field key, or nil.
func (p *jsonParser) topSpan(key string) *memoSpan {
	if p.prev == nil {
		return nil
	}
	for i := range p.prev.top {
		if p.prev.top[i].key == key {
			return &p.prev.top[i]
		}
	}
	return nil
}

// msgSpan is prev's message i, or nil.
func (p *jsonParser) msgSpan(i int) *memoSpan {
	if p.prev == nil || i >= len(p.prev.msgs) {
		return nil
	}
	return &p.prev.msgs[i]
}

// topValue reads the value of top-level field key, from the memo where
// it can, and records it.
func (p *jsonParser) topValue(key string) (jinja.Value, error) {
	start := p.i
	v, ok := p.reuse(p.topSpan(key))
	if !ok {
		var err error
		if key == "messages" && p.i < len(p.b) && p.b[p.i] == '[' {
			v, err = p.messages()
		} else {
			v, err = p.value(1)
		}
		if err != nil {
			return v, err
		}
	} else if key == "messages" && p.rec != nil {
		// Taken whole: so are its elements.
		p.rec.msgs = append(p.rec.msgs, p.prev.msgs...)
	}
	if p.rec != nil {
		p.rec.top = append(p.rec.top, memoSpan{key: key, start: start, end: p.i, v: v})
	}
	return v, nil
}

// messages reads the top-level messages array element by element, each
// from the memo where it can.
func (p *jsonParser) messages() (jinja.Value, error) {
	var items []jinja.Value
	if p.prev != nil {
		items = make([]jinja.Value, 0, len(p.prev.msgs)+4)
	}
	return p.list(items, func(i int) (jinja.Value, error) {
		start := p.i
		e, ok := p.reuse(p.msgSpan(i))
		if !ok {
			var err error
			if e, err = p.value(2); err != nil {
				return e, err
			}
		}
		if p.rec != nil {
			p.rec.msgs = append(p.rec.msgs, memoSpan{start: start, end: p.i, v: e})
		}
		return e, nil
	})
}
