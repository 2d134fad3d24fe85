package hftok

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

// Config tunes a Tokenizer's caches. The zero Config means the documented
// defaults; a negative field disables that cache. Caches change speed
// only, never ids.
type Config struct {
	// SegmentCacheTokens bounds the segment cache: the ids of whole
	// segments (the text between two added tokens, such as a chat
	// message between <|im_start|> and <|im_end|>; 32 bytes or more)
	// keyed by a randomly seeded 128-bit XXH3 of the segment, so that a
	// conversation resent with one more message re-encodes only the new
	// one. Each cached segment counts its ids plus 16 for its bookkeeping;
	// the least recently used go past the bound. 0 means
	// DefaultSegmentCacheTokens (4 Mi tokens: 16 MiB of ids).
	SegmentCacheTokens int
	// WordCacheEntries bounds the word cache: the ids of pre-tokens
	// (words) of 3 to 128 bytes, as Hugging Face's BPE caches them. An
	// arbitrary entry goes when a shard is full. 0 means
	// DefaultWordCacheEntries (64 Ki words: a few MiB for prose and code,
	// at most about 48 MiB).
	WordCacheEntries int
}

// Cache defaults; see Config.
const (
	DefaultSegmentCacheTokens = 4 << 20
	DefaultWordCacheEntries   = 1 << 16
)

// Cache limits; see Config.
const (
	// segmentOverheadTokens is what each cached segment costs the segment
	// cache's budget beyond its ids: its key, list links and map entry.
	segmentOverheadTokens = 16
	// minCachedSegmentBytes: shorter segments are encoded without the
	// segment cache (they are cheap and would only churn it).
	minCachedSegmentBytes = 32
	// maxCachedWordBytes: longer pre-tokens are encoded without the word
	// cache.
	maxCachedWordBytes = 128
)

// Tokenizer is a loaded tokenizer.json; safe for concurrent use. Its
// vocabulary, merges and pipeline are immutable after Parse; its caches
// have their own locks and change only speed.
type Tokenizer struct {
	vocab     map[string]uint32 // the model's vocab as in the file (byte-level strings)
	added     map[string]uint32 // added tokens' contents
	vocabSize int

	rawAdded  *addedMatcher // added tokens with normalized=false, matched on the raw text; nil if none
	normAdded *addedMatcher // added tokens with normalized=true, matched after normalization; nil if none
	nfc       bool          // the normalizer is NFC (else none)
	pre       []preStep     // flattened pre-tokenizer; the last step is ByteLevel
	model     *bpeModel

	segs  *segmentCache // nil when disabled
	words *wordCache    // nil when disabled
}

// Load reads a tokenizer.json file and parses it with the default Config.
func Load(path string) (*Tokenizer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hftok: %w", err)
	}
	return Parse(b)
}

// Parse parses a tokenizer.json (Hugging Face tokenizers' serialization)
// with the default Config. It supports a BPE model with byte-level
// pre-tokenization as Qwen2/2.5/3, Llama 3.x, DeepSeek V3/R1 and GPT-2
// ship it; any other model, normalizer or pre-tokenizer is an error
// prefixed "hftok: ", so that the caller can fall back to the engine's
// /tokenize.
func Parse(tokenizerJSON []byte) (*Tokenizer, error) {
	return ParseConfig(tokenizerJSON, Config{})
}

// ParseConfig is Parse with the caches sized by cfg.
func ParseConfig(tokenizerJSON []byte, cfg Config) (*Tokenizer, error) {
	t, err := parse(tokenizerJSON)
	if err != nil {
		return nil, err
	}
	segTokens := cfg.SegmentCacheTokens
	if segTokens == 0 {
		segTokens = DefaultSegmentCacheTokens
	}
	if segTokens > 0 {
		t.segs = newSegmentCache(segTokens)
	}
	words := cfg.WordCacheEntries
	if words == 0 {
		words = DefaultWordCacheEntries
	}
	if words > 0 {
		t.words = newWordCache(words)
	}
	return t, nil
}

// TokenID returns the id of a vocabulary entry (as spelled in
// tokenizer.json, e.g. "Ġworld") or of an added token's content.
func (t *Tokenizer) TokenID(content string) (uint32, bool) {
	if id, ok := t.added[content]; ok {
		return id, true
	}
	id, ok := t.vocab[content]
	return id, ok
}

// VocabSize returns one more than the largest id of the vocabulary and
// the added tokens: the bound every id Encode returns is below (equal to
// tokenizers' get_vocab_size(with_added_tokens=True) for the usual dense
// vocabularies; not the model's embedding size, which may be padded).
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// Encode appends to dst the ids of text as tokenizers'
// encode(text, add_special_tokens=False) gives them, and returns the
// extended slice: added tokens (tokenizer.json's added_tokens, special or
// not, honouring lstrip, rstrip, single_word and normalized) are split out
// first and map to their ids; each remaining segment is normalized,
// pre-tokenized and BPE-encoded. Truncation and padding settings of the
// file are ignored, as vLLM's tokenizer calls ignore them.
//
// text should be valid UTF-8 (tokenizers only takes valid strings); each
// byte of an invalid sequence is read as U+FFFD, as a range loop and
// encoding/json read it. Encode does not keep dst or text.
func (t *Tokenizer) Encode(dst []uint32, text string) []uint32 {
	if !utf8.ValidString(text) {
		text = replaceInvalid(text)
	}
	if t.rawAdded == nil {
		return t.encodeSegment(dst, text)
	}
	t.rawAdded.split(text, func(id int64, piece string) {
		if id >= 0 {
			dst = append(dst, uint32(id))
		} else {
			dst = t.encodeSegment(dst, piece)
		}
	})
	return dst
}

// encodeSegment encodes text between raw added tokens, through the
// segment cache.
func (t *Tokenizer) encodeSegment(dst []uint32, seg string) []uint32 {
	if seg == "" {
		return dst
	}
	if t.segs == nil || len(seg) < minCachedSegmentBytes {
		return t.encodeSegmentUncached(dst, seg)
	}
	key := t.segs.key(seg)
	if ids, ok := t.segs.get(key); ok {
		return append(dst, ids...)
	}
	n := len(dst)
	dst = t.encodeSegmentUncached(dst, seg)
	t.segs.put(key, dst[n:])
	return dst
}

// encodeSegmentUncached normalizes seg, splits out normalized added
// tokens and pre-tokenizes and BPE-encodes the rest.
func (t *Tokenizer) encodeSegmentUncached(dst []uint32, seg string) []uint32 {
	if t.nfc {
		seg = nfc9String(seg)
	}
	st := encodeState{t: t, dst: dst}
	if t.normAdded == nil {
		st.preTokenize(0, seg)
		return st.dst
	}
	t.normAdded.split(seg, func(id int64, piece string) {
		if id >= 0 {
			st.dst = append(st.dst, uint32(id))
		} else {
			st.preTokenize(0, piece)
		}
	})
	return st.dst
}

// replaceInvalid replaces each byte of an invalid UTF-8 sequence by
// U+FFFD.
func replaceInvalid(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

// The JSON of tokenizer.json, as far as encoding reads it.
type fileJSON struct {
	AddedTokens  []addedTokenJSON `json:"added_tokens"`
	Normalizer   json.RawMessage  `json:"normalizer"`
	PreTokenizer json.RawMessage  `json:"pre_tokenizer"`
	Model        json.RawMessage  `json:"model"`
}

type addedTokenJSON struct {
	ID         *uint32 `json:"id"`
	Content    string  `json:"content"`
	SingleWord bool    `json:"single_word"`
	LStrip     bool    `json:"lstrip"`
	RStrip     bool    `json:"rstrip"`
	Normalized *bool   `json:"normalized"`
	Special    bool    `json:"special"`
}

type modelJSON struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 *bool             `json:"fuse_unk"`
	ByteFallback            *bool             `json:"byte_fallback"`
	IgnoreMerges            *bool             `json:"ignore_merges"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  json.RawMessage   `json:"merges"`
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("hftok: "+format, args...)
}

func parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, errorf("tokenizer.json: %v", err)
	}
	if len(f.Model) == 0 || bytes.Equal(f.Model, []byte("null")) {
		return nil, errorf("tokenizer.json has no model")
	}
	var kind struct {
		Type   string          `json:"type"`
		Merges json.RawMessage `json:"merges"`
	}
	if err := json.Unmarshal(f.Model, &kind); err != nil {
		return nil, errorf("model: %v", err)
	}
	// tokenizers reads a model without "type" as the first kind it fits;
	// a BPE model is the one with merges.
	if kind.Type != "BPE" && !(kind.Type == "" && kind.Merges != nil) {
		return nil, errorf("model type %q is not supported (only BPE)", kind.Type)
	}
	m := new(modelJSON)
	if err := json.Unmarshal(f.Model, m); err != nil {
		return nil, errorf("BPE model: %v", err)
	}
	if m.Vocab == nil || len(m.Merges) == 0 || bytes.Equal(m.Merges, []byte("null")) {
		return nil, errorf("BPE model: missing vocab or merges")
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, errorf("BPE model: dropout %v is not supported", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, errorf("BPE model: continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, errorf("BPE model: end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	if m.ByteFallback != nil && *m.ByteFallback {
		return nil, errorf("BPE model: byte_fallback is not supported")
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{vocab: m.Vocab, added: map[string]uint32{}}
	t.model, err = newBPEModel(m.Vocab, merges, m.UnkToken, m.FuseUnk != nil && *m.FuseUnk, m.IgnoreMerges != nil && *m.IgnoreMerges)
	if err != nil {
		return nil, err
	}
	if t.nfc, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.addTokens(f.AddedTokens); err != nil {
		return nil, err
	}
	for _, id := range t.vocab {
		t.vocabSize = max(t.vocabSize, int(id)+1)
	}
	for _, id := range t.added {
		t.vocabSize = max(t.vocabSize, int(id)+1)
	}
	return t, nil
}

// parseMerges reads merges in either format: "a b" strings (lines
// starting with "#version" skipped) or ["a","b"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		out := make([][2]string, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 {
				return nil, errorf("BPE model: merge %d has %d parts, want 2", i, len(p))
			}
			out[i] = [2]string{p[0], p[1]}
		}
		return out, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, errorf("BPE model: merges are neither strings nor pairs")
	}
	out := make([][2]string, 0, len(lines))
	for _, l := range lines {
		if strings.HasPrefix(l, "#version") {
			continue
		}
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, errorf("BPE model: merge %d (%q) is not two tokens separated by a space", len(out)+1, l)
		}
		out = append(out, [2]string{a, b})
	}
	return out, nil
}

// parseNormalizer accepts null, NFC and Sequences of those; it reports
// whether NFC applies.
func parseNormalizer(raw json.RawMessage) (bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return false, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return false, errorf("normalizer: %v", err)
	}
	switch n.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		nfc := false
		for _, sub := range n.Normalizers {
			if bytes.Equal(bytes.TrimSpace(sub), []byte("null")) {
				return false, errorf("normalizer: null in a Sequence")
			}
			s, err := parseNormalizer(sub)
			if err != nil {
				return false, err
			}
			nfc = nfc || s // NFC is idempotent: any number of them is one
		}
		return nfc, nil
	default:
		return false, errorf("normalizer %q is not supported (only NFC and Sequence)", n.Type)
	}
}

// addTokens registers tokenizer.json's added_tokens as tokenizers'
// AddedVocabulary.add_tokens does when it loads the file: a token whose
// content is in the vocabulary takes that id, any other the next free id
// from the vocabulary's size on, in file order. The file's "id" must
// agree (tokenizers only warns when it does not, and which ids an engine
// then uses depends on its library; we refuse the file). Special tokens
// are matched before the others only in that they come first; with
// distinct contents order never matters under leftmost-longest matching.
func (t *Tokenizer) addTokens(toks []addedTokenJSON) error {
	next := uint32(len(t.vocab))
	var raw, norm []addedPattern
	seen := map[string]bool{}
	// tokenizers builds its matchers from the special tokens first, then
	// the others, each in file order.
	ordered := make([]addedTokenJSON, 0, len(toks))
	for _, tk := range toks {
		if tk.Special {
			ordered = append(ordered, tk)
		}
	}
	for _, tk := range toks {
		if !tk.Special {
			ordered = append(ordered, tk)
		}
	}
	ids := map[string]uint32{}
	for _, tk := range toks { // ids are assigned in file order
		if tk.Content == "" {
			continue
		}
		if seen[tk.Content] {
			return errorf("added token %q appears twice", tk.Content)
		}
		seen[tk.Content] = true
		id, ok := t.vocab[tk.Content]
		if !ok {
			id = next
			next++
		}
		if tk.ID == nil {
			return errorf("added token %q has no id", tk.Content)
		}
		if *tk.ID != id {
			return errorf("added token %q has id %d in the file but tokenizers would give it %d", tk.Content, *tk.ID, id)
		}
		ids[tk.Content] = id
		t.added[tk.Content] = id
	}
	for _, tk := range ordered {
		if tk.Content == "" {
			continue
		}
		normalized := !tk.Special
		if tk.Normalized != nil {
			normalized = *tk.Normalized
		}
		p := addedPattern{id: ids[tk.Content], lstrip: tk.LStrip, rstrip: tk.RStrip, singleWord: tk.SingleWord}
		if normalized {
			p.text = tk.Content
			if t.nfc {
				p.text = nfc9String(p.text)
			}
			norm = append(norm, p)
		} else {
			p.text = tk.Content
			raw = append(raw, p)
		}
	}
	if len(raw) > 0 {
		t.rawAdded = newAddedMatcher(raw)
	}
	if len(norm) > 0 {
		t.normAdded = newAddedMatcher(norm)
	}
	return nil
}
