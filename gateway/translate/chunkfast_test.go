package translate

import (
	"reflect"
	"testing"

	"github.com/agentkv/agentkv/internal/apiwire"
)

var learnFastCases = []struct {
	data string
	fast bool
}{
	{`{"id":"c1","object":"chat.completion.chunk","created":1733400000,"model":"m","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}`, true},
	{`{"id":"c1","object":"chat.completion.chunk","created":1733400000,"model":"m","choices":[],"usage":{"prompt_tokens":2077,"total_tokens":2084,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":2048}}}`, true},
	{`{"choices":[{"index":0,"delta":{},"finish_reason":"length"},{"index":1,"delta":{"content":"x"},"finish_reason":"st\u006fp"}]}`, true},
	{`{"choices":[{"index":0,"delta":{"tool_calls":[]},"finish_reason":null}],"usage":null}`, true},
	{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"Bash"}}]}}]}`, false},
	{`{"choices":[{"index":0,"finish_reason":"stop","finish_reason":"length"}]}`, false},
	{`{"choices":[{"index":0,"Finish_Reason":"stop"}]}`, false},
	{`{"usage":{"prompt_tokens":"many"}}`, false},
	{`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`, false},
	{`{"choices":[{"index":"0","finish_reason":"stop"}]}`, false},
	{`{"created":1.5,"choices":[]}`, false},
	{`{"choices":[{"delta":"x"}]}`, false},
	{`{"choices":{}}`, false},
	{`{"choices":[1]}`, false},
	{`[]`, false},
	{`{"choices":[]`, false},
}

// checkLearnFast fails when learnFast takes a chunk and learns something
// other than decoding it does.
func checkLearnFast(t *testing.T, data []byte) bool {
	t.Helper()
	var got Usage
	gotDone, ok := learnFast(data, &got)
	if !ok {
		if !reflect.DeepEqual(got, Usage{}) {
			t.Fatalf("learnFast(%q) gave up after changing the usage: %+v", data, got)
		}
		return false
	}
	var want Usage
	var c apiwire.ChatChunk
	wantDone := false
	if sniffJSON(data, &c) {
		wantDone = Learn(&c, &want)
	}
	if !reflect.DeepEqual(got, want) || gotDone != wantDone {
		t.Fatalf("learnFast(%q) = %+v, %v; decoding %+v, %v", data, got, gotDone, want, wantDone)
	}
	return true
}

func TestLearnFast(t *testing.T) {
	for _, c := range learnFastCases {
		if got := checkLearnFast(t, []byte(c.data)); got != c.fast {
			t.Errorf("learnFast(%s) took it: %v, want %v", c.data, got, c.fast)
		}
	}
}

// FuzzLearnFast: whatever learnFast takes, decoding learns the same.
func FuzzLearnFast(f *testing.F) {
	for _, c := range learnFastCases {
		f.Add([]byte(c.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkLearnFast(t, data) })
}
