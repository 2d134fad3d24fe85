package wordtok

import (
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// Special tokens of the chat template. Their ids are fixed and below
// FirstWordID; their text is what Decode writes for them.
const (
	TokenSystem    uint32 = 1 // <|system|>
	TokenUser      uint32 = 2 // <|user|>
	TokenAssistant uint32 = 3 // <|assistant|>
	TokenTool      uint32 = 4 // <|tool|>
	TokenEnd       uint32 = 5 // <|end|>
	TokenToolCall  uint32 = 6 // <|tool_call|>
	TokenTools     uint32 = 7 // <|tools|>
	TokenEOS       uint32 = 8 // <|eos|>
)

// FirstWordID is the smallest id of a word token; ids below it are
// special tokens.
const FirstWordID = 16

// wordIDs is the size of the word id space: ids are in [FirstWordID,
// FirstWordID+wordIDs), below 2^31 so that every consumer's int32 holds
// them.
const wordIDs = 1<<31 - FirstWordID

// seed salts the word hash.
const seed = 0x776f7264746f6b31 // "wordtok1"

var specials = [...]string{
	TokenSystem: "<|system|>", TokenUser: "<|user|>", TokenAssistant: "<|assistant|>",
	TokenTool: "<|tool|>", TokenEnd: "<|end|>", TokenToolCall: "<|tool_call|>",
	TokenTools: "<|tools|>", TokenEOS: "<|eos|>",
}

// DefaultMaxLearned bounds the words a Tokenizer remembers for Decode when
// Config.MaxLearned is 0.
const DefaultMaxLearned = 1 << 20

// WordID returns the token id of one word (a string with no whitespace):
// FirstWordID + XXH3-64(word, seed) mod (2^31 − FirstWordID). Special
// token texts map to their fixed ids. The id depends on the word alone,
// so every process that tokenizes the same text gets the same ids.
func WordID(word string) uint32 {
	if len(word) >= 7 && word[0] == '<' && word[1] == '|' {
		for id, s := range specials {
			if s != "" && s == word {
				return uint32(id)
			}
		}
	}
	return FirstWordID + uint32(xxh3.HashStringSeed(word, seed)%wordIDs)
}

// Tokenizer is the deterministic word-level tokenizer. Encode splits text
// at Unicode white space (as strings.Fields does) and maps each word to
// WordID(word): one word is one token, whitespace is not a token and is
// not kept. Decode maps ids back to words joined by single spaces: the
// words of the mock's generated text (Words) are always known; other words
// are known once this Tokenizer has encoded them (it remembers up to
// MaxLearned distinct words; later ones still encode, but decode as
// "<unk:ID>" unless they were seen before the bound was reached). Two
// words whose ids collide (a 31-bit hash: rare below tens of thousands of
// distinct words) decode as the one seen first.
//
// A Tokenizer is safe for concurrent use.
type Tokenizer struct {
	maxLearned int

	mu      sync.RWMutex // guards learned
	learned map[uint32]string
}

// Config configures a Tokenizer. The zero value means the defaults.
type Config struct {
	// MaxLearned bounds the distinct words remembered for Decode; 0 means
	// DefaultMaxLearned, a negative value remembers none (only generated
	// words and special tokens decode).
	MaxLearned int
}

// New returns a Tokenizer.
func New(cfg Config) *Tokenizer {
	if cfg.MaxLearned == 0 {
		cfg.MaxLearned = DefaultMaxLearned
	}
	return &Tokenizer{maxLearned: max(cfg.MaxLearned, 0), learned: map[uint32]string{}}
}

// Encode appends the token ids of text to dst and returns the extended
// slice.
func (t *Tokenizer) Encode(dst []uint32, text string) []uint32 {
	start := len(dst)
	forEachWord(text, func(w string) { dst = append(dst, WordID(w)) })
	t.learn(text, dst[start:])
	return dst
}

// Count returns the number of tokens of text (without learning it).
func Count(text string) int {
	n := 0
	forEachWord(text, func(string) { n++ })
	return n
}

// learn remembers the words of text (whose ids are ids) for Decode.
func (t *Tokenizer) learn(text string, ids []uint32) {
	if t.maxLearned == 0 || len(ids) == 0 {
		return
	}
	t.mu.RLock()
	missing := false
	for _, id := range ids {
		if _, ok := t.learned[id]; !ok && id >= FirstWordID && !isGenerated(id) {
			missing = true
			break
		}
	}
	full := len(t.learned) >= t.maxLearned
	t.mu.RUnlock()
	if !missing || full {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	i := 0
	forEachWord(text, func(w string) {
		id := ids[i]
		i++
		if id < FirstWordID || isGenerated(id) || len(t.learned) >= t.maxLearned {
			return
		}
		if _, ok := t.learned[id]; !ok {
			t.learned[id] = strings.Clone(w)
		}
	})
}

// Word returns the text of one token and whether it is known.
func (t *Tokenizer) Word(id uint32) (string, bool) {
	if id < FirstWordID {
		if int(id) < len(specials) && specials[id] != "" {
			return specials[id], true
		}
		return "", false
	}
	if w, ok := generated[id]; ok {
		return w, true
	}
	t.mu.RLock()
	w, ok := t.learned[id]
	t.mu.RUnlock()
	return w, ok
}

// Decode returns the text of ids: their words joined by single spaces,
// unknown ids as "<unk:ID>".
func (t *Tokenizer) Decode(ids []uint32) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		w, ok := t.Word(id)
		if !ok {
			w = "<unk:" + strconv.FormatUint(uint64(id), 10) + ">"
		}
		b.WriteString(w)
	}
	return b.String()
}

// forEachWord calls fn for every maximal run of non-space runes of s.
func forEachWord(s string, fn func(string)) {
	start := -1
	for i := 0; i < len(s); {
		c := s[i]
		var space bool
		size := 1
		if c < utf8.RuneSelf {
			space = c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			space = unicode.IsSpace(r)
		}
		if space {
			if start >= 0 {
				fn(s[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
		i += size
	}
	if start >= 0 {
		fn(s[start:])
	}
}
