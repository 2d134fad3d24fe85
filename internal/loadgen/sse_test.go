package loadgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestReadStream(t *testing.T) {
	clock := func() func() time.Time {
		t0 := time.Unix(0, 0)
		return func() time.Time { t0 = t0.Add(time.Millisecond); return t0 }
	}
	for _, tc := range []struct {
		name                       string
		in                         string
		events, content, malformed int
		done, usage                bool
		prompt, completion, cached int
		cachedReported             bool
		finish, streamErr          string
		firstTokenMs               int // ms on the fake clock (0: none)
		err                        bool
	}{
		{name: "vllm chat",
			in: "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"!\"},\"finish_reason\":\"stop\"}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n" +
				"data: [DONE]\n\n",
			events: 4, content: 2, done: true, usage: true, prompt: 10, completion: 2, cached: 8, cachedReported: true, finish: "stop", firstTokenMs: 2},
		{name: "completions, CRLF, comments, no final blank line",
			in:     ": keep-alive\r\n\r\nevent: message\r\ndata: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\r\n\r\ndata: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}",
			events: 2, content: 1, usage: true, prompt: 3, completion: 1, firstTokenMs: 1},
		{name: "usage without details, null details",
			in:     "data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"prompt_tokens_details\":null}}\n\n",
			events: 1, usage: true, prompt: 3, completion: 1},
		{name: "reasoning and tool calls are tokens",
			in:     "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n",
			events: 2, content: 2, firstTokenMs: 1},
		{name: "multi-line data joins",
			in:     "data: {\"choices\":\ndata: [{\"text\":\"x\"}]}\n\n",
			events: 1, content: 1, firstTokenMs: 1},
		{name: "malformed events counted, others kept",
			in:     "data: {oops\n\ndata: 42\n\ndata: null\n\ndata: {\"choices\":[{\"text\":\"x\"}]}\n\n",
			events: 1, content: 1, malformed: 3, firstTokenMs: 4},
		{name: "error event",
			in:     "data: {\"error\":{\"message\":\"boom\",\"code\":500}}\n\n",
			events: 1, streamErr: "boom"},
		{name: "error null is no error",
			in:     "data: {\"error\":null,\"choices\":[{\"text\":\"x\"}]}\n\n",
			events: 1, content: 1, firstTokenMs: 1},
		{name: "empty data is a keep-alive", in: "data:\n\ndata: \n\n"},
		{name: "line too long", in: "data: " + strings.Repeat("x", MaxEventBytes+1) + "\n\n", malformed: 1, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st streamStats
			err := readStream(strings.NewReader(tc.in), clock(), &st)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v", err)
			}
			var first int
			if !st.firstToken.IsZero() {
				first = int(st.firstToken.UnixMilli())
			}
			var cached int
			cachedReported := false
			if d := st.usage.PromptTokensDetails; d != nil && d.CachedTokens != nil {
				cached, cachedReported = *d.CachedTokens, true
			}
			got := []any{st.events, st.contentEvents, st.malformed, st.done, st.hasUsage, st.usage.PromptTokens,
				st.usage.CompletionTokens, cached, cachedReported, st.finishReason, st.streamError, first}
			want := []any{tc.events, tc.content, tc.malformed, tc.done, tc.usage, tc.prompt, tc.completion, tc.cached,
				tc.cachedReported, tc.finish, tc.streamErr, tc.firstTokenMs}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("got  %v\nwant %v", got, want)
			}
		})
	}
}

// TestReadStreamSplitsAnywhere feeds a well-formed stream through readers
// that return it in random pieces: the result never depends on where the
// reads split.
func TestReadStreamSplitsAnywhere(t *testing.T) {
	var b bytes.Buffer
	for i := 0; i < 50; i++ {
		c, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"delta": map[string]any{"content": "tok"}}}})
		fmt.Fprintf(&b, "data: %s\n\n", c)
	}
	b.WriteString("data: {\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":50}}\n\ndata: [DONE]\n\n")
	now := func() time.Time { return time.Unix(1, 0) }
	for seed := uint64(0); seed < 50; seed++ {
		var st streamStats
		r := &choppy{b: b.Bytes(), rng: rand.New(rand.NewPCG(seed, 1))}
		if err := readStream(r, now, &st); err != nil {
			t.Fatal(err)
		}
		if st.events != 51 || st.contentEvents != 50 || !st.done || st.usage.CompletionTokens != 50 || st.malformed != 0 {
			t.Fatalf("seed %d: %+v", seed, st)
		}
	}
}

type choppy struct {
	b   []byte
	rng *rand.Rand
}

func (c *choppy) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), 1+c.rng.IntN(40), len(c.b))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

func FuzzReadStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens\":1e400}}\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"finish_reason\":7}]}\n\n"))
	f.Add([]byte("data: {\"error\":\"x\"}\n\n:\n\ndata:[DONE]"))
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":-3}}}\r\n\r\n"))
	f.Add([]byte("\n\n\ndata"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var st streamStats
		_ = readStream(bytes.NewReader(in), time.Now, &st)
		dataLines := bytes.Count(in, []byte("data"))
		if st.events+st.malformed > dataLines || st.contentEvents > st.events {
			t.Fatalf("%d events + %d malformed from %d data lines", st.events, st.malformed, dataLines)
		}
		if st.contentEvents > 0 && st.firstToken.IsZero() {
			t.Fatal("content without a first-token time")
		}
		var whole streamStats
		_ = readWhole(bytes.NewReader(in), time.Now, &whole)
		if whole.events+whole.malformed > 1 {
			t.Fatalf("a whole reply is one event, got %+v", whole)
		}
	})
}
