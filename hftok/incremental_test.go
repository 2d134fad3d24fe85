package hftok

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// fragments are the pieces random texts are built from: every kind of
// added token the test tokenizers have (plain, lstrip+rstrip, single_word,
// normalized, rstrip-only), white space around them, words, digits,
// combining marks (NFC across a cut), invalid UTF-8.
var fragments = []string{
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<mask>", " <mask> ", "[W]", "a[W]b", " [W] ",
	"café", "cafe\u0301", "\u0301", "<s>", "</s>", " </s>", "[x]", "<|begin_of_text|>", "<|eot_id|>", "<|pad|>",
	"user\n", "assistant\n", "Hello", " world", "  ", "\n", "\n\n", "\t", "it's", " 12345", "6789", "ſ", "\u3000", "x",
	"\xff",
}

func fragmentText(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(fragments[r.IntN(len(fragments))])
	}
	return b.String()
}

// TestEncodeFromProperty: EncodeFrom equals Encode (the reference) on
// every turn of random sessions whose next text is the previous one, cut
// at a random byte (an edit, a rewritten tail, a compaction) or whole,
// plus a random suffix; and a turn that appends to the previous text
// reuses ids whenever the previous text had a cut point well before its
// end.
func TestEncodeFromProperty(t *testing.T) {
	for _, name := range testTokenizers {
		tok := mustLoad(t, name)
		r := rand.New(rand.NewPCG(1, uint64(len(name))))
		reusedTurns := 0
		for session := 0; session < 200; session++ {
			text := fragmentText(r, r.IntN(20))
			prev, _ := tok.EncodeFrom(nil, text)
			require.Equal(t, tok.Encode(nil, text), prev.IDs(), "%s: %q", name, text)
			for turn := 0; turn < 6; turn++ {
				keep := len(text)
				if r.IntN(3) == 0 {
					keep = r.IntN(len(text) + 1)
				}
				text = text[:keep] + fragmentText(r, r.IntN(8))
				next, reused := tok.EncodeFrom(prev, text)
				require.Equal(t, tok.Encode(nil, text), next.IDs(), "%s: %q after %q", name, text, prev.Text())
				require.Equal(t, text, next.Text())
				if reused > 0 {
					reusedTurns++
				}
				prev = next
			}
		}
		if name == "tiny.json" || name == "tiny-llama.json" {
			require.Greater(t, reusedTurns, 100, "%s: turns reuse the previous ids", name)
		}
	}
}

// TestEncodeFromSharedArray: Encodings extend one another's id arrays in
// place (an agent's turns); from any earlier Encoding, branching (a turn
// retried, a context rewritten, an older turn resent), every Encoding
// made still equals Encode of its text at the end, so no extension wrote
// over ids another Encoding holds. Concurrent turns from one Encoding
// (run under -race) each get exact ids and leave the others' intact.
func TestEncodeFromSharedArray(t *testing.T) {
	tok := mustLoad(t, "tiny.json")
	r := rand.New(rand.NewPCG(3, 4))
	turnText := func(i int) string {
		// Valid UTF-8: a text that is not is encoded whole, in its own array.
		words := strings.ToValidUTF8(fragmentText(r, r.IntN(6)), "?")
		return fmt.Sprintf("<|im_start|>user\nturn %d: %s<|im_end|>\n<|im_start|>assistant\n", i, words)
	}
	type made struct {
		e    *Encoding
		want []uint32
	}
	first, _ := tok.EncodeFrom(nil, turnText(0))
	all := []made{{first, tok.Encode(nil, first.Text())}}
	appended, shared := 0, 0
	for i := 1; i < 400; i++ {
		from, latest := all[len(all)-1], true
		if r.IntN(4) == 0 {
			from, latest = all[r.IntN(len(all))], false
		}
		text := from.e.Text()
		if r.IntN(6) == 0 { // cut back
			text, latest = text[:r.IntN(len(text)+1)], false
		}
		text += turnText(i)
		next, _ := tok.EncodeFrom(from.e, text)
		if latest {
			appended++
			if next.buf == from.e.buf {
				shared++
			}
		}
		all = append(all, made{next, tok.Encode(nil, text)})
	}
	for i, m := range all {
		require.Equal(t, m.want, m.e.IDs(), "encoding %d", i)
	}
	require.Greater(t, shared, appended*9/10, "turns appended to the latest extend its array (of %d)", appended)

	base, _ := tok.EncodeFrom(nil, strings.Repeat(turnText(0), 50))
	baseIDs := slices.Clone(base.IDs())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				text := base.Text() + fmt.Sprintf("<|im_start|>user\ngoroutine %d turn %d<|im_end|>\n", g%2, i%3)
				e, _ := tok.EncodeFrom(base, text)
				if got, want := e.IDs(), tok.Encode(nil, text); !slices.Equal(got, want) {
					t.Errorf("goroutine %d turn %d: ids differ from Encode", g, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, baseIDs, base.IDs())
}

// TestEncodeFromReusesAppendedTurn: a conversation rendered as a chat
// template renders it, one turn appended at a time, reuses everything up
// to the last message boundary before the new turn.
func TestEncodeFromReusesAppendedTurn(t *testing.T) {
	tok := mustLoad(t, "tiny.json")
	var text string
	var prev *Encoding
	for turn := 0; turn < 20; turn++ {
		text += fmt.Sprintf("<|im_start|>user\nturn %d: list the files in dir%d<|im_end|>\n<|im_start|>assistant\n", turn, turn)
		next, reused := tok.EncodeFrom(prev, text)
		require.Equal(t, tok.Encode(nil, text), next.IDs())
		if prev != nil {
			require.Greater(t, reused, len(prev.IDs())/2, "turn %d reuses the previous turn's ids", turn)
		}
		text += "a.go b.go<|im_end|>\n"
		prev = next
	}
}

// TestTokenizeChatSession: a session's turns tokenized incrementally
// equal TokenizeChat on every turn, also with sessions interleaved, a
// session rewritten, and the memory off.
func TestTokenizeChatSession(t *testing.T) {
	for _, cfg := range []ChatConfig{{}, {SessionBytes: -1}, {SessionBytes: 4 << 10}} {
		c := testChat(t, "tools.jinja", cfg)
		type msg struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		convs := [][]msg{{{"system", "You are a coding agent."}}, {{"system", "You are a coding agent."}}}
		for turn := 0; turn < 12; turn++ {
			for i := range convs {
				convs[i] = append(convs[i], msg{"user", fmt.Sprintf("session %d turn %d: run ls", i, turn)})
				if turn == 7 && i == 1 {
					convs[i] = convs[i][:1] // compaction: the context rewritten
				}
				body, err := json.Marshal(map[string]any{"model": "m", "messages": convs[i]})
				require.NoError(t, err)
				want, err := c.TokenizeChat(body)
				require.NoError(t, err)
				got, err := c.TokenizeChatSession(fmt.Sprint("s", i), body)
				require.NoError(t, err)
				require.Equal(t, want, got, "session %d turn %d", i, turn)
				convs[i] = append(convs[i], msg{"assistant", "a.go b.go"})
			}
		}
		_, err := c.TokenizeChatSession("s0", []byte(`{"messages":7}`))
		require.Error(t, err)
	}
}

// FuzzEncodeFrom: for any two texts, encoding the second from the first's
// Encoding (and from the first with the second appended) equals encoding
// it whole.
func FuzzEncodeFrom(f *testing.F) {
	toks := []*Tokenizer{mustLoad(f, "tiny.json"), mustLoad(f, "tiny-llama.json"), mustLoad(f, "tiny-misc.json")}
	f.Add("<|im_start|>user\nhi<|im_end|>\n", "<|im_start|>assistant\n")
	f.Add("a <mask> b<|im_end|>x", " [W] cafe\u0301")
	f.Add("<s> x </s>  <s>", "</s>[x]")
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a)+len(b) > 1<<13 {
			return
		}
		for _, tok := range toks {
			prev, _ := tok.EncodeFrom(nil, a)
			if !slices.Equal(prev.IDs(), tok.Encode(nil, a)) {
				t.Fatalf("EncodeFrom(nil, %q) differs from Encode", a)
			}
			for _, text := range []string{b, a + b} {
				next, _ := tok.EncodeFrom(prev, text)
				if want := tok.Encode(nil, text); !slices.Equal(next.IDs(), want) {
					t.Fatalf("EncodeFrom(%q, %q) = %v, Encode %v", a, text, next.IDs(), want)
				}
			}
		}
	})
}

// TestSessionReusesConversion: a session's next turn takes the previous
// turn's converted messages for those it parsed unchanged (the same Dict
// from the parse memo), and renders exactly as a whole render does; a
// template that changes values in place (here .update) gets no reuse, so
// one render's change cannot leak into the next, and still renders right.
func TestSessionReusesConversion(t *testing.T) {
	long := strings.Repeat("func f() { return 1 }\n", 40) // past minEqualScan
	body := func(n int) []byte {
		msgs := []map[string]string{{"role": "system", "content": "You are a coding agent."}}
		for i := range n {
			msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("turn %d\n%s", i, long)},
				map[string]string{"role": "assistant", "content": "done"})
		}
		b, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
		require.NoError(t, err)
		return b
	}
	mutating := "{% for m in messages %}{% set _ = m.update({'role': m.role ~ '!'}) %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
	for _, tc := range []struct {
		name, template string
		reuse          bool
	}{{"tools.jinja", "", true}, {"mutating", mutating, false}} {
		c := testChat(t, "tools.jinja", ChatConfig{})
		if tc.template != "" {
			var err error
			c, err = NewChat(c.tok, []byte(testConfigJSON), ChatConfig{Template: tc.template})
			require.NoError(t, err)
		}
		require.Equal(t, tc.reuse, c.reuseConv, tc.name)
		_, memo, err := c.render(body(3), nil, true)
		require.NoError(t, err)
		for n := 4; n < 7; n++ {
			text, next, err := c.render(body(n), memo, true)
			require.NoError(t, err)
			want, err := c.Render(body(n))
			require.NoError(t, err)
			require.Equal(t, want, text, "%s: turn of %d exchanges", tc.name, n)
			if tc.reuse {
				require.Len(t, next.conv, 2*n+1)
				// All but the previous turn's last message (the parse memo
				// takes a short value only when the byte after it is
				// shared too) and the new exchange.
				for i := range 2*n - 2 {
					require.Same(t, memo.conv[i].out.AsDict(), next.conv[i].out.AsDict(), "%s: message %d converted again", tc.name, i)
				}
			} else {
				require.Empty(t, next.conv)
			}
			memo = next
		}
	}
}
