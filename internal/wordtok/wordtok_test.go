package wordtok

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentkv/agentkv/internal/apiwire"
)

func TestEncodeDecode(t *testing.T) {
	tk := New(Config{})
	ids := tk.Encode(nil, "  hello\tworld \n hello ünïcode\u00a0x ")
	if len(ids) != 5 || ids[0] != ids[2] || ids[0] == ids[1] {
		t.Fatalf("ids %v", ids)
	}
	if got := tk.Decode(ids); got != "hello world hello ünïcode x" {
		t.Fatalf("decode %q", got)
	}
	if Count("a  b\nc") != 3 || Count("   ") != 0 {
		t.Fatal("Count")
	}
	// Another tokenizer gives the same ids but has not learned the words.
	other := New(Config{})
	if !slices.Equal(other.Encode(nil, "hello world"), ids[:2]) {
		t.Fatal("ids differ between tokenizers")
	}
	if got := New(Config{}).Decode(ids[:1]); got != fmt.Sprintf("<unk:%d>", ids[0]) {
		t.Fatalf("unknown id decodes as %q", got)
	}
	for _, id := range ids {
		if id < FirstWordID || id >= 1<<31 {
			t.Fatalf("id %d out of range", id)
		}
	}
}

func TestGeneratedWordsDecode(t *testing.T) {
	tk := New(Config{MaxLearned: -1})
	ids := Generate(nil, 42, 200)
	if !slices.Equal(ids, Generate(nil, 42, 200)) || slices.Equal(ids, Generate(nil, 43, 200)) {
		t.Fatal("Generate is not a function of its seed")
	}
	text := tk.Decode(ids)
	if strings.Contains(text, "<unk") || !slices.Equal(tk.Encode(nil, text), ids) {
		t.Fatalf("generated text does not round-trip: %q", text)
	}
	seen := map[uint32]bool{}
	for _, w := range Words {
		if seen[WordID(w)] {
			t.Fatalf("generated words collide at %q", w)
		}
		seen[WordID(w)] = true
	}
}

func TestLearnBound(t *testing.T) {
	tk := New(Config{MaxLearned: 2})
	ids := tk.Encode(nil, "alpha beta gamma")
	if tk.Decode(ids) != fmt.Sprintf("alpha beta <unk:%d>", ids[2]) {
		t.Fatalf("decode %q", tk.Decode(ids))
	}
}

func TestSpecials(t *testing.T) {
	tk := New(Config{})
	ids := tk.Encode(nil, "<|user|> hi <|end|> <|assistant|>")
	if !slices.Equal([]uint32{ids[0], ids[2], ids[3]}, []uint32{TokenUser, TokenEnd, TokenAssistant}) {
		t.Fatalf("ids %v", ids)
	}
	if tk.Decode(ids) != "<|user|> hi <|end|> <|assistant|>" {
		t.Fatal(tk.Decode(ids))
	}
}

func TestRenderChat(t *testing.T) {
	msgs := []Message{
		{Role: "system", Content: "You are a coding agent."},
		{Role: "user", Content: "list the files"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Name: "Glob", Arguments: `{ "pattern": "*" }`}}},
		{Role: "tool", Content: "a.go b.go", ToolCallID: "c1"},
	}
	tools := []Tool{{Name: "Glob", Description: "find files", Parameters: json.RawMessage(`{"type": "object"}`)}}
	got := RenderChat(msgs, tools, ChatOptions{AddGenerationPrompt: true})
	want := "<|tools|> Glob find files {\"type\":\"object\"} <|end|>\n" +
		"<|system|> You are a coding agent. <|end|>\n<|user|> list the files <|end|>\n" +
		"<|assistant|> <|tool_call|> Glob {\"pattern\":\"*\"} <|end|>\n<|tool|> a.go b.go <|end|>\n<|assistant|>"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	tk := New(Config{})
	full := tk.ApplyChat(nil, msgs, tools, ChatOptions{AddGenerationPrompt: true})
	if len(full) != Count(want) || full[len(full)-1] != TokenAssistant {
		t.Fatalf("%d tokens", len(full))
	}
	// Continuing a partial assistant reply: the prompt is the generation
	// prompt's prefix followed by the partial words, with no <|end|>.
	cont := append(slices.Clone(msgs), Message{Role: "assistant", Content: "the code"})
	ct := tk.ApplyChat(nil, cont, tools, ChatOptions{ContinueFinalMessage: true})
	if !slices.Equal(ct[:len(full)], full) || tk.Decode(ct[len(full):]) != "the code" {
		t.Fatalf("continued prompt %q", tk.Decode(ct))
	}
}

// TestAPIsAgree sends one conversation through the three APIs' request
// shapes: the template gives the same tokens.
func TestAPIsAgree(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)
	var chat apiwire.ChatRequest
	if err := json.Unmarshal([]byte(`{"model":"m","messages":[
		{"role":"system","content":"be brief"},
		{"role":"user","content":[{"type":"text","text":"read a"}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"Read","arguments":"{\"path\": \"a\"}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"body of a"}],
		"tools":[{"type":"function","function":{"name":"Read","description":"read","parameters":`+string(schema)+`}}]}`), &chat); err != nil {
		t.Fatal(err)
	}
	var resp apiwire.ResponsesRequest
	if err := json.Unmarshal([]byte(`{"model":"m","instructions":"be brief","input":[
		{"role":"user","content":[{"type":"input_text","text":"read a"}]},
		{"type":"function_call","call_id":"c1","name":"Read","arguments":"{\"path\":\"a\"}"},
		{"type":"function_call_output","call_id":"c1","output":"body of a"}],
		"tools":[{"type":"function","name":"Read","description":"read","parameters":`+string(schema)+`}]}`), &resp); err != nil {
		t.Fatal(err)
	}
	var msgs apiwire.MessagesRequest
	if err := json.Unmarshal([]byte(`{"model":"m","max_tokens":5,"system":"be brief","messages":[
		{"role":"user","content":"read a"},
		{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"Read","input":{"path":"a"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"body of a"}]}],
		"tools":[{"name":"Read","description":"read","input_schema":`+string(schema)+`}]}`), &msgs); err != nil {
		t.Fatal(err)
	}
	opt := ChatOptions{AddGenerationPrompt: true}
	m1, t1 := FromChat(&chat)
	m2, t2 := FromResponses(&resp)
	m3, t3 := FromMessages(&msgs)
	r1, r2, r3 := RenderChat(m1, t1, opt), RenderChat(m2, t2, opt), RenderChat(m3, t3, opt)
	if r1 != r2 || r1 != r3 {
		t.Fatalf("chat:\n%s\nresponses:\n%s\nmessages:\n%s", r1, r2, r3)
	}
}

func FuzzEncode(f *testing.F) {
	f.Add("hello  world\n<|user|>")
	f.Add("\u2028x\u00a0y")
	f.Fuzz(func(t *testing.T, s string) {
		tk := New(Config{MaxLearned: 64})
		ids := tk.Encode(nil, s)
		if len(ids) != Count(s) || len(ids) != len(strings.Fields(s)) {
			t.Fatalf("%d ids, %d fields", len(ids), len(strings.Fields(s)))
		}
		// Decoding what was learned and encoding again gives the same ids.
		if d := tk.Decode(ids); !strings.Contains(d, "<unk:") && !slices.Equal(tk.Encode(nil, d), ids) {
			t.Fatalf("round trip %q -> %q", s, d)
		}
	})
}

func ExampleTokenizer_ApplyChat() {
	tk := New(Config{})
	ids := tk.ApplyChat(nil, []Message{{Role: "user", Content: "hello there"}}, nil, ChatOptions{AddGenerationPrompt: true})
	fmt.Println(len(ids), tk.Decode(ids))
	// Output: 5 <|user|> hello there <|end|> <|assistant|>
}
