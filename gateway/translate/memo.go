package translate

import (
	"bytes"
	"encoding/json"
	"reflect"

	"github.com/zeebo/xxh3"

	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/bytelru"
	"github.com/agentkv/agentkv/internal/jsonscan"
)

// Memos remembers, for recent request bodies, what decoding them left
// (MessagesToChatMemo, ResponsesToChatMemo): an agent's next turn resends
// its previous body with items appended, so decoding it takes every
// earlier message or input item from the memo, by byte equality, and
// decodes only the new ones and the request's other fields. A memo is
// found by a hash of the body's first MemoKeyBytes bytes (an agent's
// body starts the same way every turn; sessions that share that start
// share a slot, which costs reuse, never correctness: an item is taken
// only where its bytes are the memo's). The result equals decoding the
// whole body. Bounded by bytes; least recently used first out. Safe for
// concurrent use.
type Memos struct {
	c *bytelru.Cache[memoKey, any] // *arrayMemo[E] or *chatOut
}

// MemoKeyBytes is how much of a body's start names its memo slot.
const MemoKeyBytes = 4096

// minMemoBody is the smallest body decoded through a memo: a smaller one
// decodes whole about as fast.
const minMemoBody = 8 << 10

// DefaultMemoBytes is NewMemos' default bound.
const DefaultMemoBytes = 64 << 20

type memoKey struct {
	api  byte
	hash uint64
}

// NewMemos returns a memo cache of about maxBytes (0: DefaultMemoBytes).
func NewMemos(maxBytes int) *Memos {
	if maxBytes <= 0 {
		maxBytes = DefaultMemoBytes
	}
	return &Memos{c: bytelru.New[memoKey, any](maxBytes)}
}

func (ms *Memos) key(api byte, body []byte) memoKey {
	return memoKey{api, xxh3.Hash(body[:min(len(body), MemoKeyBytes)])}
}

func (ms *Memos) get(k memoKey) any {
	v, _ := ms.c.Get(k)
	return v
}

func (ms *Memos) put(k memoKey, m any, size int) { ms.c.Put(k, m, size) }

// arrayMemo is what decoding a body's item array left: the body and each
// item's span in it and decoded value. Items are only read afterwards
// (the translations build new chat messages from them).
type arrayMemo[E any] struct {
	body   []byte
	spans  [][2]int
	items  []E
	reused int // items taken from the memo before this one
}

func (m *arrayMemo[E]) size() int { return 3*len(m.body) + 64*len(m.items) + 64 }

// decodeMemo decodes body into r as json.Unmarshal does, except that the
// top-level array field key (its items of type E, given to r by set) is
// decoded item by item, each item whose bytes equal prev's item at the
// same index taken from prev. It returns the memo for the next body, or
// false where it does not apply or the body does not decode; the caller
// then decodes the whole body (which gives the error a whole decode
// gives). The body's JSON is checked as json.Unmarshal checks it: the
// structure around the items here, each new item and the other fields by
// encoding/json, each reused item when it was first decoded.
func decodeMemo[R, E any](body []byte, key string, prev *arrayMemo[E], r *R, set func(*R, []E)) (*arrayMemo[E], bool) {
	arrStart, arrEnd, ok := topArray(body, key)
	if !ok {
		return nil, false
	}
	spans, ok := itemSpans(body, arrStart, arrEnd)
	if !ok {
		return nil, false
	}
	rest := make([]byte, 0, len(body)-(arrEnd-arrStart)+2)
	rest = append(append(append(rest, body[:arrStart]...), "[]"...), body[arrEnd:]...)
	if json.Unmarshal(rest, r) != nil {
		return nil, false
	}
	lcp := 0
	if prev != nil {
		lcp = jsonscan.CommonPrefix(prev.body, body)
	}
	items := make([]E, len(spans))
	reused := 0
	for i, sp := range spans {
		if prev != nil && i < len(prev.spans) {
			ps := prev.spans[i]
			// In the shared prefix with the byte after it (a number ends
			// where the next byte is not a digit), or equal bytes.
			if (ps == sp && sp[1] < lcp) || (ps[1]-ps[0] == sp[1]-sp[0] && bytes.Equal(prev.body[ps[0]:ps[1]], body[sp[0]:sp[1]])) {
				items[i] = prev.items[i]
				reused++
				continue
			}
		}
		if json.Unmarshal(body[sp[0]:sp[1]], &items[i]) != nil {
			return nil, false
		}
	}
	set(r, items)
	return &arrayMemo[E]{body: bytes.Clone(body), spans: spans, items: items, reused: reused}, true
}

// topArray finds the array value of the top-level member whose name is
// key (ASCII, matched case-insensitively as encoding/json matches field
// names): its bytes [start, end). false: the body is not an object, the
// member is absent or given twice, its value is not an array, or a member
// name holds an escape or a non-ASCII byte (left to encoding/json).
func topArray(body []byte, key string) (start, end int, ok bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return 0, 0, false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return 0, 0, false
	}
	found := false
	for {
		if i >= len(body) || body[i] != '"' {
			return 0, 0, false
		}
		ke := jsonscan.StringEnd(body, i)
		if ke < 0 {
			return 0, 0, false
		}
		name := body[i+1 : ke-1]
		for _, c := range name {
			if c == '\\' || c >= 0x80 {
				return 0, 0, false
			}
		}
		i = skipSpace(body, ke)
		if i >= len(body) || body[i] != ':' {
			return 0, 0, false
		}
		i = skipSpace(body, i+1)
		ve, ok := jsonscan.ValueEnd(body, i)
		if !ok {
			return 0, 0, false
		}
		if bytes.EqualFold(name, []byte(key)) {
			if found || body[i] != '[' {
				return 0, 0, false
			}
			found, start, end = true, i, ve
		}
		i = skipSpace(body, ve)
		if i >= len(body) {
			return 0, 0, false
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return start, end, found && skipSpace(body, i+1) == len(body)
		default:
			return 0, 0, false
		}
	}
}

// itemSpans splits the array body[start:end) ('[' to ']') into its items'
// spans, checking the commas and white space between them.
func itemSpans(body []byte, start, end int) ([][2]int, bool) {
	i := skipSpace(body, start+1)
	if i == end-1 && body[i] == ']' {
		return nil, true
	}
	var spans [][2]int
	for {
		ie, ok := jsonscan.ValueEnd(body, i)
		if !ok || ie >= end {
			return nil, false
		}
		spans = append(spans, [2]int{i, ie})
		i = skipSpace(body, ie)
		switch {
		case i >= end:
			return nil, false
		case body[i] == ',':
			i = skipSpace(body, i+1)
		case body[i] == ']' && i == end-1:
			return spans, true
		default:
			return nil, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// decodeMessages decodes a Messages request, from ms's memo of a body
// that started the same way where it can.
func decodeMessages(body []byte, ms *Memos) (*apiwire.MessagesRequest, error) {
	return decodeRequest(body, ms, 'm', "messages request", "messages", func(r *apiwire.MessagesRequest, items []apiwire.AnthropicMessage) {
		r.Messages = items
	})
}

// decodeResponses decodes a Responses request, from ms's memo of a body
// that started the same way where it can.
func decodeResponses(body []byte, ms *Memos) (*apiwire.ResponsesRequest, error) {
	return decodeRequest(body, ms, 'r', "responses request", "input", func(r *apiwire.ResponsesRequest, items []apiwire.InputItem) {
		r.Input = apiwire.TextOr[apiwire.InputItem]{Parts: items}
	})
}

// decodeRequest decodes body into an R, its array member key (items E,
// given to the R by set) from ms's memo (slot api) where it can, else
// whole; a whole decode's error is a bad request about what.
func decodeRequest[R, E any](body []byte, ms *Memos, api byte, what, key string, set func(*R, []E)) (*R, error) {
	var in R
	if ms != nil && len(body) >= minMemoBody {
		k := ms.key(api, body)
		prev, _ := ms.get(k).(*arrayMemo[E])
		if m, ok := decodeMemo(body, key, prev, &in, set); ok {
			ms.put(k, m, m.size())
			return &in, nil
		}
		var zero R
		in = zero
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, badRequest("%s: %v", what, err)
	}
	return &in, nil
}

// chatOut is what encoding a translated chat request left: its messages
// and each one's JSON.
type chatOut struct {
	msgs  []apiwire.ChatMessage
	enc   [][]byte
	fresh int // messages encoded, not taken from the memo
}

func (o *chatOut) size() int {
	n := 64
	for _, e := range o.enc {
		n += 2*len(e) + 64
	}
	return n
}

// messagesHole is where the messages go in a chat request encoded with
// none: Messages is ChatRequest's second field, after the model's string
// (in which a quote is escaped), so the first match is the field.
var messagesHole = []byte(`,"messages":[]`)

// MarshalChat is json.Marshal(cr) for the chat request translated from
// body, encoding again only the messages that differ from those of the
// last request translated from a body that started the same way (ms's
// memo; nil: none). The bytes equal json.Marshal's: an array's encoding
// is its elements' encodings joined by commas.
func MarshalChat(cr *apiwire.ChatRequest, body []byte, ms *Memos) ([]byte, error) {
	if ms == nil || len(body) < minMemoBody || len(cr.Messages) == 0 {
		return json.Marshal(cr)
	}
	k := ms.key('c', body)
	prev, _ := ms.get(k).(*chatOut)
	msgs := cr.Messages
	cr.Messages = []apiwire.ChatMessage{}
	frame, err := json.Marshal(cr)
	cr.Messages = msgs
	if err != nil {
		return nil, err
	}
	at := bytes.Index(frame, messagesHole)
	if at < 0 {
		return json.Marshal(cr)
	}
	at += len(messagesHole) - 1 // at the ']'
	out := &chatOut{msgs: msgs, enc: make([][]byte, len(msgs))}
	n := len(frame)
	for i := range msgs {
		if prev != nil && i < len(prev.msgs) && reflect.DeepEqual(prev.msgs[i], msgs[i]) {
			out.enc[i] = prev.enc[i]
		} else {
			if out.enc[i], err = json.Marshal(&msgs[i]); err != nil {
				return nil, err
			}
			out.fresh++
		}
		n += len(out.enc[i]) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, frame[:at]...)
	for i, e := range out.enc {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	b = append(b, frame[at:]...)
	ms.put(k, out, out.size())
	return b, nil
}
