package hftok

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// ids maps token strings (as the vocabulary spells them, or added tokens'
// contents) to ids, failing on unknown ones.
func ids(t *testing.T, tok *Tokenizer, toks ...string) []uint32 {
	t.Helper()
	out := []uint32{}
	for _, s := range toks {
		id, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		out = append(out, id)
	}
	return out
}

// TestEncodeTable checks worked encodings with the small tokenizer (its
// merges and added tokens are in testdata/gen_tiny.py), each checked by
// hand against the merge ranks and with tokenizers 0.22.2.
func TestEncodeTable(t *testing.T) {
	tok := mustLoad(t, "tiny.json")
	cases := []struct {
		text string
		want []string
	}{
		{"", nil},
		{"Hello world", []string{"Hello", "Ġworld"}},
		{"the", []string{"t", "he"}},           // h e (rank 1) before t h (rank 27)
		{" the the", []string{"Ġthe", "Ġthe"}}, // Ġ t, then Ġt he
		{"aaa", []string{"aaa"}},
		{"aaaa", []string{"aa", "aa"}},   // a a leftmost, then a a (rank 28) before aa a (29)
		{"aaaaa", []string{"aa", "aaa"}}, // aa a a a, aa aa a, aa aaa
		{"abc", []string{"abc"}},         // a b, then ab c
		{"xy", []string{"xy"}},           // a merge listed twice
		{"it's", []string{"i", "t", "'s"}},
		{"IT'S", []string{"I", "T", "'S"}},
		{"we'll", []string{"w", "e", "'ll"}},
		{"12345", []string{"1", "2", "3", "4", "5"}}, // \p{N} one digit at a time
		{"a  b", []string{"a", "Ġ", "Ġ", "b"}},
		{"a   \n\nb", []string{"a", "ĠĠ", "Ġ", "ĊĊ", "b"}},
		{"a\r\nb", []string{"a", "čĊ", "b"}},
		{"x := f()", []string{"x", "Ġ:=", "Ġ", "f", "()"}},
		{"\t\tx", []string{"ĉ", "ĉ", "x"}}, // \s+(?!\S) leaves the last tab to \tx
		{"你好", []string{"ä½ł", "å", "¥", "½"}},
		{"a — b", []string{"a", "Ġ", "âĢĶ", "Ġ", "b"}},
		{"<|im_start|>user\nHi<|im_end|>\n", []string{"<|im_start|>", "u", "s", "er", "Ċ", "H", "i", "<|im_end|>", "Ċ"}},
		{"<think>ok</think>", []string{"<think>", "o", "k", "</think>"}},
		{"café", []string{"cafe\u0301"}},       // a normalized added token (its content is NFD in the file)
		{"cafe\u0301", []string{"cafe\u0301"}}, // NFC first, then matched
		{"CAFÉ", []string{"C", "A", "F", "Ã", "ī"}},
		{"a <mask>  b", []string{"a", "<mask>", "b"}}, // lstrip and rstrip take the spaces
		{"[W] x", []string{"[W]", "Ġ", "x"}},
		{"a[W]b", []string{"a", "[", "W", "]", "b"}}, // single_word: inside a word it is text
		{"Ġthe", []string{"Ġthe"}},                   // an added token whose content is a vocab entry
		{"thing", []string{"th", "ing"}},             // "ing" is an added token too
		{"<|im_start", []string{"<", "|", "i", "m", "_", "s", "t", "a", "r", "t"}},
	}
	for _, c := range cases {
		got := tok.Encode(nil, c.text)
		var want []uint32
		for _, s := range c.want {
			want = append(want, ids(t, tok, s)...)
		}
		if !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v (%q), want %v (%q)", c.text, got, tokenStrings(tok, got), want, c.want)
		}
	}
}

func tokenStrings(tok *Tokenizer, ids []uint32) []string {
	inv := map[uint32]string{}
	for s, id := range tok.vocab {
		inv[id] = s
	}
	for s, id := range tok.added {
		inv[id] = s
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = inv[id]
	}
	return out
}

func TestEncodeAppends(t *testing.T) {
	tok := mustLoad(t, "tiny.json")
	dst := []uint32{7, 8}
	got := tok.Encode(dst, "Hello")
	if want := []uint32{7, 8, ids(t, tok, "Hello")[0]}; !slices.Equal(got, want) {
		t.Fatalf("Encode(dst) = %v, want %v", got, want)
	}
}

func TestTokenIDAndVocabSize(t *testing.T) {
	tok := mustLoad(t, "tiny.json")
	for _, c := range []struct {
		s  string
		id uint32
		ok bool
	}{
		{"!", 33, true}, {"Ġ", 32, true}, {"Hello", 306, true}, {"<|im_start|>", 321, true},
		{"cafe\u0301", 325, true}, {"café", 0, false}, // the content as the file spells it
		{"Ġthe", 258, true}, {"nope", 0, false},
	} {
		id, ok := tok.TokenID(c.s)
		if id != c.id || ok != c.ok {
			t.Errorf("TokenID(%q) = %d, %v; want %d, %v", c.s, id, ok, c.id, c.ok)
		}
	}
	if n := tok.VocabSize(); n != 328 {
		t.Errorf("VocabSize() = %d, want 328", n)
	}
}

func TestInvalidUTF8(t *testing.T) {
	tok := mustLoad(t, "tiny.json")
	for _, s := range []string{"\xff", "a\xffb", "\xe4\xbd", "caf\xc3", "\xed\xa0\x80x"} {
		got := tok.Encode(nil, s)
		want := tok.Encode(nil, replaceInvalid(s))
		if !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v (its bytes read as U+FFFD)", s, got, want)
		}
		if !utf8.ValidString(replaceInvalid(s)) {
			t.Errorf("replaceInvalid(%q) is not valid UTF-8", s)
		}
	}
	if got, want := replaceInvalid("a\xff\xfeb"), "a\ufffd\ufffdb"; got != want {
		t.Errorf("replaceInvalid = %q, want %q (one U+FFFD per byte)", got, want)
	}
}

// TestParseErrors checks that what is not supported is refused with a
// message naming it.
func TestParseErrors(t *testing.T) {
	base, err := os.ReadFile(filepath.Join("testdata", "tiny.json"))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(base, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	cases := []struct {
		name string
		json []byte
		want string
	}{
		{"not json", []byte("{"), "tokenizer.json"},
		{"no model", []byte(`{"added_tokens":[]}`), "no model"},
		{"wordpiece", edit(func(m map[string]any) { model(m)["type"] = "WordPiece" }), `model type "WordPiece"`},
		{"unigram", edit(func(m map[string]any) { m["model"] = map[string]any{"type": "Unigram", "vocab": []any{}} }), "Unigram"},
		{"dropout", edit(func(m map[string]any) { model(m)["dropout"] = 0.1 }), "dropout"},
		{"byte fallback", edit(func(m map[string]any) { model(m)["byte_fallback"] = true }), "byte_fallback"},
		{"prefix", edit(func(m map[string]any) { model(m)["continuing_subword_prefix"] = "##" }), "continuing_subword_prefix"},
		{"suffix", edit(func(m map[string]any) { model(m)["end_of_word_suffix"] = "</w>" }), "end_of_word_suffix"},
		{"merge out of vocab", edit(func(m map[string]any) { model(m)["merges"] = []any{[]any{"Q", "Z"}} }), `"QZ" is not in the vocab`},
		{"bad legacy merge", edit(func(m map[string]any) { model(m)["merges"] = []any{"a b c"} }), "not two tokens"},
		{"merges neither", edit(func(m map[string]any) { model(m)["merges"] = 7 }), "neither"},
		{"no merges", edit(func(m map[string]any) { delete(model(m), "merges") }), "missing vocab or merges"},
		{"unk out of vocab", edit(func(m map[string]any) { model(m)["unk_token"] = "<nope>" }), "unk_token"},
		{"shared id", edit(func(m map[string]any) { model(m)["vocab"].(map[string]any)["dup"] = 5 }), "share id 5"},
		{"nfkc", edit(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFKC"} }), `normalizer "NFKC"`},
		{"lowercase in sequence", edit(func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "Lowercase"}}}
		}), `"Lowercase"`},
		{"no pre-tokenizer", edit(func(m map[string]any) { m["pre_tokenizer"] = nil }), "pre_tokenizer is null"},
		{"metaspace", edit(func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }), `"Metaspace"`},
		{"no byte level", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Digits", "individual_digits": true}
		}), "no ByteLevel"},
		{"byte level first", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "ByteLevel"}, map[string]any{"type": "Digits"}}}
		}), "must be the last"},
		{"bad behavior", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "a"}, "behavior": "Sideways"}, map[string]any{"type": "ByteLevel"}}}
		}), `behavior "Sideways"`},
		{"bad regex", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(a"}, "behavior": "Isolated"}, map[string]any{"type": "ByteLevel"}}}
		}), "Split pattern"},
		{"possessive", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\p{L}++`}, "behavior": "Isolated"}, map[string]any{"type": "ByteLevel"}}}
		}), "Split pattern"},
		{"no pattern", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "behavior": "Isolated"}, map[string]any{"type": "ByteLevel"}}}
		}), "one String or Regex"},
		{"added id disagrees", edit(func(m map[string]any) {
			m["added_tokens"].([]any)[0].(map[string]any)["id"] = 999
		}), "would give it 320"},
		{"added twice", edit(func(m map[string]any) {
			a := m["added_tokens"].([]any)
			m["added_tokens"] = append(a, a[0])
		}), "appears twice"},
		{"added no id", edit(func(m map[string]any) {
			delete(m["added_tokens"].([]any)[0].(map[string]any), "id")
		}), "has no id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.json)
			if err == nil {
				t.Fatalf("Parse succeeded, want an error containing %q", c.want)
			}
			if !strings.HasPrefix(err.Error(), "hftok: ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse error %q, want the prefix \"hftok: \" and %q", err, c.want)
			}
		})
	}
	if _, err := Load(filepath.Join("testdata", "missing.json")); err == nil || !strings.HasPrefix(err.Error(), "hftok: ") {
		t.Errorf("Load(missing) = %v, want an hftok error", err)
	}
}

// TestParseAccepts checks variants that must load: merges as strings,
// dropout 0, a null model type with merges, Digits, empty Sequences.
func TestParseAccepts(t *testing.T) {
	for _, name := range testTokenizers {
		if _, err := Load(filepath.Join("testdata", name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	base, _ := os.ReadFile(filepath.Join("testdata", "tiny.json"))
	var m map[string]any
	json.Unmarshal(base, &m)
	m["model"].(map[string]any)["dropout"] = 0.0
	m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{}}
	b, _ := json.Marshal(m)
	tok, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if tok.nfc {
		t.Error("an empty normalizer Sequence reads as NFC")
	}
}

// naive is a deliberately simple reimplementation of tokenizers' encode
// for Split(Regex, Isolated) + ByteLevel pipelines: added tokens found by
// trying every token at every position, NFC from x/text, the pattern run
// by regexp2 as written, and BPE that merges the lowest-rank adjacent
// pair over the whole word until none is left.
type naive struct {
	vocab     map[string]uint32
	ranks     map[[2]string]int
	added     []naiveAdded
	nfc       bool
	splits    []*regexp2.Regexp
	prefix    bool
	gpt2Regex bool
	// ignoreMerges: a word in the vocabulary is one token.
	ignoreMerges bool
}

type naiveAdded struct {
	content, match         string
	id                     uint32
	lstrip, rstrip, single bool
	normalized             bool
}

func newNaive(t *testing.T, name string) *naive {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		AddedTokens []struct {
			ID         uint32 `json:"id"`
			Content    string `json:"content"`
			SingleWord bool   `json:"single_word"`
			Lstrip     bool   `json:"lstrip"`
			Rstrip     bool   `json:"rstrip"`
			Normalized bool   `json:"normalized"`
		} `json:"added_tokens"`
		Normalizer   *struct{ Type string }
		PreTokenizer struct {
			Type           string
			AddPrefixSpace bool `json:"add_prefix_space"`
			UseRegex       bool `json:"use_regex"`
			Pretokenizers  []struct {
				Type    string
				Pattern struct{ Regex string }
			}
		} `json:"pre_tokenizer"`
		Model struct {
			Vocab        map[string]uint32
			Merges       json.RawMessage
			IgnoreMerges bool `json:"ignore_merges"`
		}
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	n := &naive{vocab: f.Model.Vocab, ranks: map[[2]string]int{}, nfc: f.Normalizer != nil, ignoreMerges: f.Model.IgnoreMerges}
	var pairs [][2]string
	if json.Unmarshal(f.Model.Merges, &pairs) != nil {
		var lines []string
		json.Unmarshal(f.Model.Merges, &lines)
		for _, l := range lines {
			a, b, _ := strings.Cut(l, " ")
			pairs = append(pairs, [2]string{a, b})
		}
	}
	for i, p := range pairs {
		n.ranks[p] = i
	}
	for _, a := range f.AddedTokens {
		na := naiveAdded{content: a.Content, match: a.Content, id: a.ID, lstrip: a.Lstrip, rstrip: a.Rstrip, single: a.SingleWord, normalized: a.Normalized}
		if a.Normalized && n.nfc {
			na.match = norm.NFC.String(a.Content)
		}
		n.added = append(n.added, na)
	}
	if f.PreTokenizer.Type == "ByteLevel" {
		n.prefix, n.gpt2Regex = f.PreTokenizer.AddPrefixSpace, f.PreTokenizer.UseRegex
	}
	for _, p := range f.PreTokenizer.Pretokenizers {
		if p.Type == "Split" {
			n.splits = append(n.splits, regexp2.MustCompile(p.Pattern.Regex, regexp2.None))
		}
	}
	return n
}

func (n *naive) encode(text string) []uint32 {
	var out []uint32
	// 1: tokens that are not normalized, on the raw text; 2: normalize
	// each remaining piece and find the normalized ones.
	for _, p := range n.splitAdded(text, false) {
		if p.id >= 0 {
			out = append(out, uint32(p.id))
			continue
		}
		s := p.text
		if n.nfc {
			s = norm.NFC.String(s)
		}
		for _, q := range n.splitAdded(s, true) {
			if q.id >= 0 {
				out = append(out, uint32(q.id))
				continue
			}
			for _, w := range n.preTokenize(q.text) {
				out = append(out, n.bpe(w)...)
			}
		}
	}
	return out
}

type naivePiece struct {
	id   int
	text string
}

func isSpaceRune(r rune) bool {
	return strings.ContainsRune(" \t\n\v\f\r\u0085\u00a0\u1680\u2028\u2029\u202f\u205f\u3000", r) || r >= 0x2000 && r <= 0x200a
}

// splitAdded finds the tokens with the given normalized flag: at each
// position every token is tried and the longest wins; then single_word,
// lstrip and rstrip as AddedVocabulary::find_matches applies them.
func (n *naive) splitAdded(s string, normalized bool) []naivePiece {
	var out []naivePiece
	start := 0
	for pos := 0; pos < len(s); {
		best := -1
		for i, a := range n.added {
			if a.normalized == normalized && strings.HasPrefix(s[pos:], a.match) && (best < 0 || len(a.match) > len(n.added[best].match)) {
				best = i
			}
		}
		if best < 0 {
			pos++
			continue
		}
		a := n.added[best]
		ms, me := pos, pos+len(a.match)
		pos = me
		if a.single {
			before, _ := utf8.DecodeLastRuneInString(s[:ms])
			after, _ := utf8.DecodeRuneInString(s[me:])
			if ms > 0 && isWordRune(before) || me < len(s) && isWordRune(after) {
				continue
			}
		}
		if a.lstrip {
			for ms > start {
				r, size := utf8.DecodeLastRuneInString(s[:ms])
				if !isSpaceRune(r) {
					break
				}
				ms -= size
			}
		}
		if a.rstrip {
			for me < len(s) {
				r, size := utf8.DecodeRuneInString(s[me:])
				if !isSpaceRune(r) {
					break
				}
				me += size
			}
		}
		if start < ms {
			out = append(out, naivePiece{-1, s[start:ms]})
		}
		out = append(out, naivePiece{int(a.id), s[ms:me]})
		start = me
	}
	if start < len(s) {
		out = append(out, naivePiece{-1, s[start:]})
	}
	return out
}

func (n *naive) preTokenize(s string) []string {
	pieces := []string{s}
	apply := func(re *regexp2.Regexp) {
		var next []string
		for _, p := range pieces {
			prev := 0
			m, _ := re.FindStringMatch(p)
			for m != nil {
				start := len(string([]rune(p)[:m.Index]))
				end := start + len(m.String())
				if start > prev {
					next = append(next, p[prev:start])
				}
				if end > start {
					next = append(next, p[start:end])
				}
				prev = end
				m, _ = re.FindNextMatch(m)
			}
			if prev < len(p) {
				next = append(next, p[prev:])
			}
		}
		pieces = next
	}
	for _, re := range n.splits {
		apply(re)
	}
	if n.prefix {
		for i, p := range pieces {
			if !strings.HasPrefix(p, " ") {
				pieces[i] = " " + p
			}
		}
	}
	if n.gpt2Regex {
		apply(naiveGPT2)
	}
	return pieces
}

var naiveGPT2 = regexp2.MustCompile(patGPT2, regexp2.None)

func (n *naive) bpe(word string) []uint32 {
	var syms []string
	for i := 0; i < len(word); i++ {
		syms = append(syms, string(bytesChar[word[i]]))
	}
	if id, ok := n.vocab[strings.Join(syms, "")]; ok && n.ignoreMerges {
		return []uint32{id}
	}
	for {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := n.ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		syms = append(syms[:at], append([]string{syms[at] + syms[at+1]}, syms[at+2:]...)...)
	}
	out := make([]uint32, len(syms))
	for i, s := range syms {
		out[i] = n.vocab[s]
	}
	return out
}

// randomText draws text from fragments that exercise every rule: ASCII,
// letters and marks that NFC composes (all in Unicode 9, runs short
// enough for x/text's NFC to agree), white space runs, digits and the
// added tokens' contents and pieces of them.
func randomText(r *rng, added []string) string {
	frags := []string{"a", "b", "c", "e", "f", "h", "i", "l", "n", "o", "r", "s", "t", "u", "w", "x", "y", "H", "S", "T", "A",
		"the", "aaa", "abc", "Hello", "world", "café", "cafe\u0301", "e\u0301", "\u0301", "a\u0315\u0300", "\u1100\u1161", "가",
		"'", "'s", "'S", "'ll", "'re", "'d", "'x", " ", "  ", "   ", "\t", "\n", "\r\n", "\r", " \n", "\u00a0", "\u3000", "\u2028", "\v", "\f", "\u0085",
		"0", "1", "12", "123", "1234", "7", "٣", "Ⅻ", "½", ".", ",", "(", ")", ":=", "{", "}", "\"", "—", "你好", "😀", "<", ">", "|", "[", "]", "#", "=", ";", "\x00", "\x01"}
	frags = append(frags, added...)
	for _, a := range added {
		if len(a) > 2 {
			frags = append(frags, a[:len(a)/2], a[len(a)/2:])
		}
	}
	var b strings.Builder
	for k := r.intn(24); k >= 0; k-- {
		b.WriteString(r.pick(frags))
	}
	return b.String()
}

// TestNaiveModel compares Encode with the naive model on random texts, for
// the three pipelines the naive model knows.
func TestNaiveModel(t *testing.T) {
	for _, name := range []string{"tiny.json", "tiny-gpt2.json", "tiny-llama.json"} {
		t.Run(name, func(t *testing.T) {
			tok := mustLoad(t, name)
			n := newNaive(t, name)
			var added []string
			for _, a := range n.added {
				added = append(added, a.content)
			}
			r := &rng{s: 1}
			count := 6000
			if testing.Short() {
				count = 1000
			}
			for i := 0; i < count; i++ {
				s := randomText(r, added)
				got, want := tok.Encode(nil, s), n.encode(s)
				if !slices.Equal(got, want) {
					t.Fatalf("Encode(%q) = %q, naive model %q", s, tokenStrings(tok, got), tokenStrings(tok, want))
				}
			}
		})
	}
}

// TestFastPatterns checks the hand-written matchers against regexp2
// running the same patterns (with compileOniguruma's adaptations) on
// random texts over every class the patterns distinguish.
func TestFastPatterns(t *testing.T) {
	alphabet := []string{"a", "Z", "é", "ſ", "K", "ß", "\U0002EBF0", "你", "ｶ", "1", "٣", "Ⅻ", "½", "'", "\"", ".", "-", "😀", "\u0301", "_",
		" ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\v", "\f", "\u0085", "\u200b", "'s", "'S", "'ſ", "'re", "'RE", "'Ve", "'ll", "'LL", "'lL", "'d", "'t", "'m", "'x", "s", "l", "e", "r", "v"}
	r := &rng{s: 2}
	for _, pat := range []string{patQwen2, patLlama3, patGPT2} {
		fast := knownPatterns[pat]
		re, err := compileOniguruma(pat)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 8000; i++ {
			var b strings.Builder
			for k := r.intn(16); k >= 0; k-- {
				b.WriteString(r.pick(alphabet))
			}
			s := b.String()
			var got []span
			for j := 0; j < len(s); {
				k := fast.next(s, j)
				if k <= j {
					t.Fatalf("%q: next(%d) = %d", s, j, k)
				}
				got = append(got, span{j, k, true})
				j = k
			}
			if want := findRegexp(re, s); !slices.Equal(got, want) {
				t.Fatalf("pattern %q on %q: fast %v, regexp2 %v", pat, s, got, want)
			}
		}
	}
}

func TestRewriteOniguruma(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`\p{L}+`, `[\p{L}\x{2EBF0}-\x{2EE5D}]+`},
		{`[^\r\n\p{L}\p{N}]`, `[^\r\n\p{L}\x{2EBF0}-\x{2EE5D}\p{N}]`},
		{`\P{L}`, `[^\p{L}\x{2EBF0}-\x{2EE5D}]`},
		{`\p{N}\p{So}`, `\p{N}[\p{So}\x{2FFC}-\x{2FFF}\x{31EF}]`},
		{`(?i:'s|x)s`, `(?i:'[s\x{17F}]|x)s`},
		{`(?i)s(?-i:s)s`, `(?i)[s\x{17F}](?-i:s)[s\x{17F}]`},
		{`(?is:a)`, `(?is:a)`},
		{`(?i:[a-s])`, `(?i:[a-s\x{17F}])`},
		{`\s\S\\s`, `\s\S\\s`},
		{`\w+\W`, `[` + wordClass + `]+[^` + wordClass + `]`},
	} {
		if got := rewriteOniguruma(c.in); got != c.want {
			t.Errorf("rewriteOniguruma(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// Oniguruma's ^ and $ are line anchors (tokenizers' Ruby syntax).
	re, err := compileOniguruma(`^a|b$`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := findRegexp(re, "xa\na\nb\nbb"), []span{{0, 3, false}, {3, 4, true}, {4, 5, false}, {5, 6, true}, {6, 8, false}, {8, 9, true}}; !slices.Equal(got, want) {
		t.Errorf("^a|b$: %v, want %v", got, want)
	}
}

// TestApplyBehavior checks the Split behaviours on the example of
// tokenizers' own tests ("How are you doing?" split at spaces...).
func TestApplyBehavior(t *testing.T) {
	s := "How are you doing?"
	re, _ := compileOniguruma(` `)
	spans := findRegexp(re, s)
	pieces := func(b splitBehavior, invert bool) []string {
		sp := slices.Clone(spans)
		if invert {
			for i := range sp {
				sp[i].match = !sp[i].match
			}
		}
		var out []string
		for _, p := range applyBehavior(sp, b) {
			out = append(out, s[p.start:p.end])
		}
		return out
	}
	for _, c := range []struct {
		b      splitBehavior
		invert bool
		want   []string
	}{
		{behaviorRemoved, false, []string{"How", "are", "you", "doing?"}},
		{behaviorIsolated, false, []string{"How", " ", "are", " ", "you", " ", "doing?"}},
		{behaviorMergedWithPrevious, false, []string{"How ", "are ", "you ", "doing?"}},
		{behaviorMergedWithNext, false, []string{"How", " are", " you", " doing?"}},
		{behaviorContiguous, false, []string{"How", " ", "are", " ", "you", " ", "doing?"}},
		{behaviorRemoved, true, []string{" ", " ", " "}},
	} {
		if got := pieces(c.b, c.invert); !slices.Equal(got, c.want) {
			t.Errorf("behavior %d invert %v: %q, want %q", c.b, c.invert, got, c.want)
		}
	}
	// Contiguous merges runs of matches.
	re, _ = compileOniguruma(`-`)
	s = "a--b-"
	spans = findRegexp(re, s)
	if got := pieces(behaviorContiguous, false); !slices.Equal(got, []string{"a", "--", "b", "-"}) {
		t.Errorf("contiguous: %q", got)
	}
}

// TestNFC checks the Unicode 9.0 normalization: cases where it differs
// from current Unicode (as tokenizers does), agreement with x/text
// elsewhere, and the quick check.
func TestNFC(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"e\u0301", "é"},
		{"a\u0315\u0300", "à\u0315"},                     // reordered, then composed
		{"\u212b", "Å"},                                  // singleton
		{"\u1100\u1161\u11a8", "각"},                      // Hangul LV + T
		{"a\u1dfa\u0301", "a\u1dfa\u0301"},               // U+1DFA (Unicode 14) blocks: class 0 in Unicode 9
		{"\U00011935\U00011930", "\U00011935\U00011930"}, // Dives Akuru (Unicode 13) does not compose
		{"\u0f71\u0f72", "\u0f71\u0f72"},
		{"\u0f73", "\u0f71\u0f72"}, // non-starter decomposition
	} {
		if got := nfc9String(c.in); got != c.want {
			t.Errorf("nfc9(%+q) = %+q, want %+q", c.in, got, c.want)
		}
	}
	// More than 30 combining marks: no U+034F inserted (x/text would).
	long := "a" + strings.Repeat("\u0301", 40)
	if got := nfc9String(long); got != "á"+strings.Repeat("\u0301", 39) {
		t.Errorf("40 marks: %+q", got)
	}
	d := nfcTables()
	for _, kv := range nfc9CCC {
		r := rune(kv >> 8)
		if got := norm.NFC.PropertiesString(string(r)).CCC(); got != uint8(kv) {
			t.Errorf("U+%04X: class %d in the Unicode 9 table, %d in x/text", r, uint8(kv), got)
		}
	}
	// Random strings of Unicode 9 characters, runs of marks short: equal to
	// x/text; any string: the quick check never says yes wrongly and the
	// result is stable.
	pool := []rune{'a', 'e', 'o', 'A', 'K', 0x300, 0x301, 0x302, 0x308, 0x315, 0x31b, 0x323, 0x327, 0x328, 0x345, 0x3b1, 0x3b9, 0x1f00,
		0x1100, 0x1161, 0x11a8, 0xac00, 0xac01, 0x212b, 0x2126, 0xf900, 0x0915, 0x093c, 0x0958, 0x0f71, 0x0f72, 0x0f73, 0x0f80, 0x0344,
		0x3099, 0x304b, 0x0b47, 0x0b3e, 0x0cc6, 0x0cd5, 0x1e0b, 0x1e63, 0x00c5, 0x0041, 0x030a, 0x05d0, 0x05b7, 0x0627, 0x0653, 0x0654}
	post9 := []rune{0x1dfa, 0x11930, 0x11935, 0x1e4ec, 0x10efd, 0x0898, 0x1ac1}
	r := &rng{s: 3}
	for i := 0; i < 50000; i++ {
		var b strings.Builder
		for k := r.intn(12); k >= 0; k-- {
			b.WriteRune(pool[r.intn(len(pool))])
		}
		s := b.String()
		got := nfc9String(s)
		if want := norm.NFC.String(s); got != want {
			t.Fatalf("nfc9(%+q) = %+q, x/text %+q", s, got, want)
		}
		b.WriteRune(post9[r.intn(len(post9))])
		for k := r.intn(4); k >= 0; k-- {
			b.WriteRune(pool[r.intn(len(pool))])
		}
		s = b.String()
		got = d.normalize(s)
		if d.isNFC(s) && got != s {
			t.Fatalf("quick check says %+q is NFC, it normalizes to %+q", s, got)
		}
		if again := d.normalize(got); again != got {
			t.Fatalf("nfc9 not stable on %+q: %+q then %+q", s, got, again)
		}
	}
}

// TestConcurrentEncode encodes from many goroutines through shared caches
// (run it under -race) and compares with single-threaded results.
func TestConcurrentEncode(t *testing.T) {
	tok, err := ParseConfig(mustRead(t, "tiny.json"), Config{SegmentCacheTokens: 4000, WordCacheEntries: 200})
	if err != nil {
		t.Fatal(err)
	}
	texts := referenceTexts(tok, 300, 2000)
	want := make([][]uint32, len(texts))
	for i, tx := range texts {
		want[i] = encodeWith(tok, tx.text, false, true)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := 0; k < 3; k++ {
				for i := range texts {
					j := (i*7 + g*13 + k) % len(texts)
					if got := tok.Encode(nil, texts[j].text); !slices.Equal(got, want[j]) {
						errs <- fmt.Sprintf("goroutine %d: text %d differs", g, j)
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if _, cost := tok.segs.stats(); cost > 4000 {
		t.Errorf("segment cache costs %d, budget 4000", cost)
	}
	if n := tok.words.len(); n > 200+wordShards {
		t.Errorf("word cache holds %d, bound 200 (rounded up per shard)", n)
	}
}

func mustRead(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSegmentCache checks reuse, LRU eviction and the budget, and that a
// hostile stream of distinct segments stays within it.
func TestSegmentCache(t *testing.T) {
	tok, err := ParseConfig(mustRead(t, "tiny.json"), Config{SegmentCacheTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(i int) string {
		return fmt.Sprintf("<|im_start|>user\nmessage number %d with enough text to be cached<|im_end|>\n", i)
	}
	conv := ""
	for i := 0; i < 5; i++ {
		conv += msg(i)
		tok.Encode(nil, conv)
	}
	entries, cost := tok.segs.stats()
	if entries != 5 {
		t.Errorf("%d cached segments after 5 turns, want 5 (one per message; the \\n between is too short)", entries)
	}
	// The next turn finds every old message.
	hits := 0
	for i := 0; i < 5; i++ {
		seg := strings.TrimSuffix(strings.TrimPrefix(msg(i), "<|im_start|>"), "<|im_end|>\n")
		if _, ok := tok.segs.get(tok.segs.key(seg)); ok {
			hits++
		}
	}
	if hits != 5 {
		t.Errorf("%d of 5 old messages cached", hits)
	}
	// Distinct segments past the budget: cost stays within it and the
	// oldest go first.
	for i := 5; i < 500; i++ {
		tok.Encode(nil, msg(i))
		if _, c := tok.segs.stats(); c > 1000 {
			t.Fatalf("cost %d over the budget 1000", c)
		}
	}
	entries, cost = tok.segs.stats()
	if entries == 0 || cost > 1000 {
		t.Errorf("%d entries, cost %d", entries, cost)
	}
	seg0 := strings.TrimSuffix(strings.TrimPrefix(msg(0), "<|im_start|>"), "<|im_end|>\n")
	if _, ok := tok.segs.get(tok.segs.key(seg0)); ok {
		t.Error("the oldest segment survived 495 newer ones")
	}
	seg499 := strings.TrimSuffix(strings.TrimPrefix(msg(499), "<|im_start|>"), "<|im_end|>\n")
	if _, ok := tok.segs.get(tok.segs.key(seg499)); !ok {
		t.Error("the newest segment is not cached")
	}
	// A segment larger than the whole budget is not cached.
	big := strings.Repeat("word ", 2000)
	tok.Encode(nil, big)
	if _, ok := tok.segs.get(tok.segs.key(big)); ok {
		t.Error("a segment over the budget was cached")
	}
	// Cached results equal uncached ones.
	if got, want := tok.Encode(nil, msg(499)), encodeWith(tok, msg(499), false, true); !slices.Equal(got, want) {
		t.Errorf("cached %v, uncached %v", got, want)
	}
	// Disabled caches.
	off, err := ParseConfig(mustRead(t, "tiny.json"), Config{SegmentCacheTokens: -1, WordCacheEntries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if off.segs != nil || off.words != nil {
		t.Error("negative Config fields did not disable the caches")
	}
	if got, want := off.Encode(nil, conv), tok.Encode(nil, conv); !slices.Equal(got, want) {
		t.Error("without caches the ids differ")
	}
}

// TestLongWords compares the two merge algorithms on words long enough for
// the priority queue (runs of one character and random mixtures).
func TestLongWords(t *testing.T) {
	tok := mustLoad(t, "tiny.json")
	n := newNaive(t, "tiny.json")
	m := tok.model
	r := &rng{s: 4}
	var sc wordScratch
	for i := 0; i < 3000; i++ {
		var b strings.Builder
		for k := smallWord/2 + r.intn(3*smallWord); k > 0; k-- {
			b.WriteString(r.pick([]string{"a", "a", "b", "c", "x", "y", " ", "t", "h", "e", "1", "\xc3", "\xa9", "l"}))
		}
		w := b.String()
		syms := m.symbols(nil, w)
		heap := m.mergeHeap(nil, slices.Clone(syms), &sc)
		small := slices.Clone(m.mergeSmall(slices.Clone(syms), &sc))
		want := n.bpe(w)
		if !slices.Equal(heap, want) || !slices.Equal(small, want) {
			t.Fatalf("word %q: heap %v, small %v, naive %v", w, heap, small, want)
		}
	}
}
