package gateway

import (
	"encoding/json"
	"testing"

	"github.com/agentkv/agentkv/internal/apiwire"
)

var plainDeltaCases = []struct {
	data  string
	plain bool
}{
	{`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733400000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}`, true},
	{` {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"stop_reason":null}],"x":[1,{"y":"}"}]} `, true},
	{`{"choices":[{"index":0,"delta":{"content":"line\nnext \u00e9 \"q\""}}]}`, true},
	{`{"choices":[{"index":0,"delta":{"content":null}}]}`, true},
	{`{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}`, false},
	{`{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":1}}`, false},
	{`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}`, false},
	{`{"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}`, false},
	{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}`, false},
	{`{"choices":[{"index":1,"delta":{"content":"a"}}]}`, false},
	{`{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}`, false},
	{`{"choices":[{"index":0,"delta":{"Content":"a"}}]}`, false},
	{`{"choices":[{"index":0,"delta":{"c\u006fntent":"a"}}]}`, false},
	{`{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}`, false},
	{`{"choices":[{"index":0,"delta":{"content":"a"}}],"created":"now"}`, false},
	{`{"choices":[{"index":0,"delta":{"content":"a"}}],"created":1.5}`, false},
	{`{"choices":[{"index":0,"delta":{"content":"a"}}],"id":7}`, false},
	{`{"choices":[{"index":0,"delta":{"content":"a"}}]`, false},
	{`{"choices":[]}`, false},
	{`{}`, false},
	{`[1]`, false},
	{"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xff\"}}]}", true},
}

// checkPlainDelta fails when plainDelta claims a chunk that the decoding
// path would learn differently from.
func checkPlainDelta(t *testing.T, data []byte) bool {
	t.Helper()
	content, ok := plainDelta(data)
	if !ok {
		return false
	}
	var ch apiwire.ChatChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		t.Fatalf("plainDelta took %q, which json.Unmarshal refuses: %v", data, err)
	}
	var want, got streamSoFar
	want.learn(&ch)
	got.learnContent(content)
	if want.text.String() != got.text.String() || want.chunks != got.chunks || want.noResume != got.noResume {
		t.Fatalf("plainDelta(%q) learned %q/%d/%v, decoding %q/%d/%v", data, got.text.String(), got.chunks, got.noResume,
			want.text.String(), want.chunks, want.noResume)
	}
	return true
}

func TestPlainDelta(t *testing.T) {
	for _, c := range plainDeltaCases {
		if got := checkPlainDelta(t, []byte(c.data)); got != c.plain {
			t.Errorf("plainDelta(%s) = %v, want %v", c.data, got, c.plain)
		}
	}
}

// FuzzPlainDelta: whatever plainDelta takes, decoding learns the same.
func FuzzPlainDelta(f *testing.F) {
	for _, c := range plainDeltaCases {
		f.Add([]byte(c.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkPlainDelta(t, data) })
}
