package hftok

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/agentkv/agentkv/internal/jinja"
)

// maxJSONDepth bounds the nesting of a request body, so a hostile body
// cannot exhaust the stack (encoding/json allows 10,000 levels).
const maxJSONDepth = 512

// errJSON is the error of a body that is not valid JSON.
var errJSON = errors.New("hftok: invalid JSON")

// parseJSON decodes one JSON document into template values, keeping the
// key order of every object as written (Python's json.loads keeps it, and
// a template's tojson prints keys in that order). Integers stay integers,
// as json.loads keeps them; a repeated key keeps its first place and its
// last value, as a Python dict does.
func parseJSON(b []byte) (jinja.Value, error) {
	v, _, err := memoParse(b, nil, false)
	return v, err
}

type jsonParser struct {
	b []byte
	i int

	// memoParse's: the previous body's memo, the length of the prefix
	// this body shares with it, and the memo being recorded (each nil or
	// 0 in a plain parse).
	prev *parseMemo
	lcp  int
	rec  *parseMemo
	// minEq: the shortest value reused by byte equality.
	minEq int
}

func (p *jsonParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) fail(what string) error {
	return fmt.Errorf("%w: %s at byte %d", errJSON, what, p.i)
}

func (p *jsonParser) value(depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Undefined(), p.fail("nesting too deep")
	}
	if p.i >= len(p.b) {
		return jinja.Undefined(), p.fail("unexpected end")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		return jinja.NewString(s), err
	case c == 't':
		return jinja.NewBool(true), p.literal("true")
	case c == 'f':
		return jinja.NewBool(false), p.literal("false")
	case c == 'n':
		return jinja.None(), p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return jinja.Undefined(), p.fail("unexpected character")
	}
}

func (p *jsonParser) literal(word string) error {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return p.fail("invalid literal")
	}
	p.i += len(word)
	return nil
}

func (p *jsonParser) object(depth int) (jinja.Value, error) {
	p.i++ // {
	v := jinja.NewDict()
	d := v.AsDict()
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return v, nil
	}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return jinja.Undefined(), p.fail("want an object key")
		}
		k, err := p.str()
		if err != nil {
			return jinja.Undefined(), err
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return jinja.Undefined(), p.fail("want ':'")
		}
		p.i++
		p.space()
		var e jinja.Value
		if depth == 0 && (p.prev != nil || p.rec != nil) {
			e, err = p.topValue(k)
		} else {
			e, err = p.value(depth + 1)
		}
		if err != nil {
			return jinja.Undefined(), err
		}
		d.Set(k, e)
		p.space()
		if p.i >= len(p.b) {
			return jinja.Undefined(), p.fail("unterminated object")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return v, nil
		default:
			return jinja.Undefined(), p.fail("want ',' or '}'")
		}
	}
}

func (p *jsonParser) array(depth int) (jinja.Value, error) {
	return p.list(nil, func(int) (jinja.Value, error) { return p.value(depth + 1) })
}

// list reads an array, each element by item (given its index), appending
// them to items (nil, or room made ahead).
func (p *jsonParser) list(items []jinja.Value, item func(i int) (jinja.Value, error)) (jinja.Value, error) {
	p.i++ // [
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return jinja.NewList(items), nil
	}
	for {
		p.space()
		e, err := item(len(items))
		if err != nil {
			return jinja.Undefined(), err
		}
		items = append(items, e)
		p.space()
		if p.i >= len(p.b) {
			return jinja.Undefined(), p.fail("unterminated array")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return jinja.NewList(items), nil
		default:
			return jinja.Undefined(), p.fail("want ',' or ']'")
		}
	}
}

// str reads a string literal, decoding escapes as encoding/json does
// (invalid UTF-8 and lone surrogates become U+FFFD).
func (p *jsonParser) str() (string, error) {
	p.i++ // opening quote
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(p.b[start : p.i-1]), nil
		case c == '\\' || c >= utf8.RuneSelf:
			return p.strSlow(start)
		case c < 0x20:
			return "", p.fail("control character in string")
		}
		p.i++
	}
	return "", p.fail("unterminated string")
}

// strSlow finishes a string with escapes or non-ASCII bytes, from start
// (the first byte after the quote).
func (p *jsonParser) strSlow(start int) (string, error) {
	out := make([]byte, 0, p.i-start+64)
	out = append(out, p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c < 0x20:
			return "", p.fail("control character in string")
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && n == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, p.b[p.i:p.i+n]...)
			}
			p.i += n
			continue
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			return "", p.fail("unterminated string")
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.fail("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					if r2, ok = p.hex4(); !ok {
						return "", p.fail("invalid \\u escape")
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						out = utf8.AppendRune(out, d)
						continue
					}
					p.i = save // not a pair: the second escape stands alone
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", p.fail("invalid escape")
		}
	}
	return "", p.fail("unterminated string")
}

// hex4 reads the four hex digits of a \u escape.
func (p *jsonParser) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// number reads a JSON number: an integer that fits int64 stays an
// integer, anything else is a float (as json.loads gives a Python int of
// any size, a huge integer differs, which no chat request carries).
func (p *jsonParser) number() (jinja.Value, error) {
	start := p.i
	isFloat := false
	if p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c >= '0' && c <= '9':
		case c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-':
			isFloat = true
		default:
			goto done
		}
		p.i++
	}
done:
	lit := string(p.b[start:p.i])
	if p.i == digits || !json.Valid(p.b[start:p.i]) {
		return jinja.Undefined(), fmt.Errorf("%w: invalid number %q", errJSON, lit)
	}
	if !isFloat {
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return jinja.NewInt(n), nil
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("%w: invalid number %q", errJSON, lit)
	}
	return jinja.NewFloat(f), nil
}
