package hftok

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary tokenizer.json bytes to Parse: it must not
// panic, and a tokenizer it accepts must encode without panicking and
// give ids below VocabSize.
func FuzzParse(f *testing.F) {
	for _, name := range testTokenizers {
		f.Add(mustRead(f, name))
	}
	small := []string{
		`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},"pre_tokenizer":{"type":"ByteLevel"}}`,
		`{"model":{"vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":true},"added_tokens":[{"id":1,"content":"<s>","special":true}]}`,
		`{"model":{"type":"BPE","vocab":{},"merges":[],"unk_token":"x"},"pre_tokenizer":{"type":"ByteLevel"}}`,
		`{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"ignore_merges":true},"normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"}]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\s+|(?i:s)"},"behavior":"MergedWithNext","invert":true},{"type":"Digits","individual_digits":true},{"type":"ByteLevel","use_regex":false}]}}`,
		`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Split","pattern":{"String":""},"behavior":"Removed"}}`,
		`{"model":null}`, `[]`, `null`, `{"model":{"type":"BPE","vocab":{"a":4294967295},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}}`,
	}
	for _, s := range small {
		f.Add([]byte(s))
	}
	texts := []string{"", "a", "ab ab", " <s>x\n", "Hello, world! 123", "caf\u00e9 cafe\u0301", "\xff<|im_start|>", "  \t\n\n a'S 你好"}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		tok, err := Parse(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "hftok: ") {
				t.Fatalf("error without the hftok prefix: %v", err)
			}
			return
		}
		for _, s := range texts {
			for _, id := range tok.Encode(nil, s) {
				if int(id) >= tok.VocabSize() {
					t.Fatalf("Encode(%q) gave id %d, VocabSize %d", s, id, tok.VocabSize())
				}
			}
		}
	})
}

// FuzzEncode feeds arbitrary text to the small tokenizers: Encode must not
// panic, must equal the uncached path and the regexp2 path, and decoding
// the ids must give back the text as normalized (byte-level BPE loses
// nothing): the added tokens' contents (normalized ones as matched) and
// NFC of the text between them, less the white space that lstrip and
// rstrip tokens take.
func FuzzEncode(f *testing.F) {
	toks := []*Tokenizer{mustLoad(f, "tiny.json"), mustLoad(f, "tiny-llama.json")}
	for _, s := range []string{"", "Hello world", "<|im_start|>user\nit'S 12345 café<|im_end|>", "a <mask>  b [W] a[W]b",
		"cafe\u0301<think>\u0301</think>", "\xff\xfe", "a\u1dfa\u0301" + strings.Repeat("\u0301", 40), "  \t\n\u3000x\u00a0 'ſ",
		strings.Repeat("a", 300), "<|begin_of_text|>123456789 x'LL"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 1<<14 {
			return
		}
		for _, tok := range toks {
			got := tok.Encode(nil, text)
			if again := tok.Encode(nil, text); !slices.Equal(again, got) {
				t.Fatalf("Encode(%q) changed when cached: %v then %v", text, got, again)
			}
			if plain := encodeWith(tok, text, false, true); !slices.Equal(plain, got) {
				t.Fatalf("Encode(%q) = %v, uncached %v", text, got, plain)
			}
			if generic := encodeWith(tok, text, true, true); !slices.Equal(generic, got) {
				t.Fatalf("Encode(%q) = %v, regexp2 path %v", text, got, generic)
			}
			if dec, want := decodeForFuzz(tok, got), expectedDecode(tok, text); dec != want {
				t.Fatalf("Encode(%q) decodes to %q, want %q", text, dec, want)
			}
		}
	})
}

// decodeForFuzz decodes ids, normalized added tokens as their matched
// (normalized) form.
func decodeForFuzz(tok *Tokenizer, ids []uint32) string {
	inv := inverseVocab(tok)
	norm := map[uint32]string{}
	if tok.normAdded != nil {
		for _, p := range tok.normAdded.pats {
			norm[p.id] = p.text
		}
	}
	var b strings.Builder
	for _, id := range ids {
		if s, ok := norm[id]; ok {
			b.WriteString(s)
		} else {
			b.WriteString(inv[id])
		}
	}
	return b.String()
}

// expectedDecode is the text as Encode must reproduce it: invalid UTF-8
// replaced, each segment between raw added tokens normalized, and
// lstrip/rstrip white space gone.
func expectedDecode(tok *Tokenizer, text string) string {
	text = replaceInvalid(text)
	var b bytes.Buffer
	seg := func(s string) {
		if tok.nfc {
			s = nfc9String(s)
		}
		b.WriteString(s)
	}
	if tok.rawAdded == nil {
		seg(text)
		return b.String()
	}
	content := map[uint32]string{}
	for _, p := range tok.rawAdded.pats {
		content[p.id] = p.text
	}
	tok.rawAdded.split(text, func(id int64, piece string) {
		if id >= 0 {
			b.WriteString(content[uint32(id)])
		} else {
			seg(piece)
		}
	})
	return b.String()
}
