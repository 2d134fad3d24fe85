package hftok

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentkv/agentkv/internal/jinja"
	"github.com/stretchr/testify/require"
)

const testConfigJSON = `{"bos_token": "<|endoftext|>", "eos_token": {"content": "<|im_end|>", "special": true}, "pad_token": null}`

func testChat(t testing.TB, template string, cfg ChatConfig) *Chat {
	t.Helper()
	tok, err := Load("testdata/tiny.json")
	require.NoError(t, err)
	src, err := os.ReadFile(filepath.Join("testdata/chat", template))
	require.NoError(t, err)
	cfg.Template = string(src)
	c, err := NewChat(tok, []byte(testConfigJSON), cfg)
	require.NoError(t, err)
	return c
}

// TestChatConversion checks vLLM's message conversion rule by rule on the
// text the tools template renders.
func TestChatConversion(t *testing.T) {
	c := testChat(t, "tools.jinja", ChatConfig{})
	require.False(t, c.openai, "tools.jinja does not loop over content")
	for _, tc := range []struct {
		name, body string
		want       []string // substrings of the rendered prompt, in order
		not        []string
	}{
		{"arguments text parsed to an object, key order kept", `{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"run","arguments":"{\"z\": 1, \"a\": [true, null, 1.5]}"}}]}]}`,
			[]string{`<call>{"name": "run", "arguments": {"z": 1, "a": [true, null, 1.5]}}</call>`}, nil},
		{"invalid arguments become {}", `{"messages":[{"role":"user","content":"go"},{"role":"assistant","tool_calls":[{"function":{"name":"run","arguments":"{oops"}}]}]}`,
			[]string{`"arguments": {}}`}, nil},
		{"empty tool_calls dropped", `{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":"done","tool_calls":[]}]}`,
			[]string{"<|im_start|>assistant\ndone<|im_end|>"}, []string{"<call>"}},
		{"text parts joined with newlines, null text skipped", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":null},"b",{"type":"input_text","text":"c"}]}]}`,
			[]string{"<|im_start|>user\na\nb\nc<|im_end|>"}, nil},
		{"tool results grouped", `{"messages":[{"role":"user","content":"go"},{"role":"tool","tool_call_id":"1","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]},{"role":"tool","content":"z"}]}`,
			[]string{"<|im_start|>user\n<result>\nx\ny\n</result>\n<result>\nz\n</result><|im_end|>"}, nil},
		{"reasoning reaches the template", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning":"because"}],"add_generation_prompt":false}`,
			[]string{"<think>\nbecause\n</think>\n\na<|im_end|>"}, nil},
		{"tools dumped as vLLM's model_dump", `{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"ls","parameters":{"type":"object","properties":{"path":{"type":"string"}}},"x-extra":1},"cache":true}]}`,
			[]string{`{"type": "function", "function": {"name": "ls", "description": null, "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}, "x-extra": 1}, "cache": true}`}, nil},
		{"chat_template_kwargs", `{"messages":[{"role":"user","content":"q"}],"chat_template_kwargs":{"enable_thinking":false}}`,
			[]string{"<|im_start|>assistant\n<think>\n\n</think>\n\n"}, nil},
		{"no generation prompt", `{"messages":[{"role":"user","content":"q"}],"add_generation_prompt":false}`,
			[]string{"q<|im_end|>\n"}, []string{"<|im_start|>assistant"}},
		{"continue_final_message cuts after the last content", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"partial answer "}],"add_generation_prompt":false,"continue_final_message":true}`,
			[]string{"<|im_start|>assistant\npartial answer"}, []string{"partial answer <|im_end|>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, err := c.Render([]byte(tc.body))
			require.NoError(t, err)
			at := 0
			for _, w := range tc.want {
				i := strings.Index(text[at:], w)
				require.GreaterOrEqual(t, i, 0, "want %q after byte %d in\n%s", w, at, text)
				at += i + len(w)
			}
			for _, n := range tc.not {
				require.NotContains(t, text, n)
			}
			if strings.Contains(tc.body, "continue_final_message") {
				require.True(t, strings.HasSuffix(text, "partial answer"), "%q", text)
			}
			ids, err := c.TokenizeChat([]byte(tc.body))
			require.NoError(t, err)
			require.Equal(t, c.Tokenizer().Encode(nil, text), ids)
		})
	}
}

func TestChatErrors(t *testing.T) {
	c := testChat(t, "parts.jinja", ChatConfig{})
	for _, tc := range []struct{ name, body, want string }{
		{"not JSON", `{"messages":`, "invalid JSON"},
		{"not an object", `[1]`, "not a JSON object"},
		{"no messages", `{"messages":[]}`, "no messages"},
		{"no role", `{"messages":[{"content":"x"}]}`, "has no role"},
		{"bad content", `{"messages":[{"role":"user","content":7}]}`, "neither a string nor a list"},
		{"image", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "not supported in process"},
		{"both flags", `{"messages":[{"role":"user","content":"x"}],"add_generation_prompt":true,"continue_final_message":true}`, "cannot both"},
		{"raise_exception", `{"messages":[{"role":"wizard","content":"x"}]}`, "unknown role wizard"},
		{"deep", strings.Repeat("[", 600) + strings.Repeat("]", 600), "nesting too deep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.TokenizeChat([]byte(tc.body))
			require.ErrorContains(t, err, tc.want)
			require.True(t, strings.HasPrefix(err.Error(), "hftok: ") || strings.HasPrefix(err.Error(), "message "), err.Error())
			if tc.name == "image" {
				require.True(t, errors.Is(err, ErrUnsupported))
			}
		})
	}
	_, err := NewChat(c.tok, []byte(`{}`), ChatConfig{})
	require.ErrorContains(t, err, "no chat template")
	_, err = NewChat(c.tok, []byte(`{"chat_template":"x"}`), ChatConfig{ContentFormat: "xml"})
	require.ErrorContains(t, err, "unknown content format")
	_, err = NewChat(c.tok, []byte(`{"chat_template":"{% if %}"}`), ChatConfig{})
	require.ErrorContains(t, err, "chat template")
	named, err := NewChat(c.tok, []byte(`{"chat_template":[{"name":"tool_use","template":"T"},{"name":"default","template":"D{{ eos_token }}"}],"eos_token":"<|im_end|>"}`), ChatConfig{})
	require.NoError(t, err)
	text, err := named.Render([]byte(`{"messages":[{"role":"user","content":"x"}]}`))
	require.NoError(t, err)
	require.Equal(t, "D<|im_end|>", text)
}

// TestChatContentFormat: the parts template loops over content, so auto
// detection gives the openai format (a tool message's parts are joined
// whatever the format), and "string" overrides it.
func TestChatContentFormat(t *testing.T) {
	body := []byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"tool","tool_call_id":"7","content":[{"type":"text","text":"c"},{"type":"text","text":"d"}]}]}`)
	auto := testChat(t, "parts.jinja", ChatConfig{})
	require.True(t, auto.openai)
	text, err := auto.Render(body)
	require.NoError(t, err)
	require.Contains(t, text, "<|user|>[text] a[text] b<|im_end|>")
	require.Contains(t, text, "<|tool|>c\nd (answers 7)")
	str := testChat(t, "parts.jinja", ChatConfig{ContentFormat: "string"})
	text, err = str.Render(body)
	require.NoError(t, err)
	require.Contains(t, text, "<|user|>a\nb<|im_end|>")
}

// TestChatMatchesPythonJinja renders a generated corpus of requests with
// Python's jinja2 in transformers' environment fed vLLM's conversation
// (testdata/chat/render.py, written from their code's behaviour), and
// requires the same text, byte for byte, from Chat.Render, on the test
// templates and on every model directory in AGENTKV_HF_MODEL_DIRS
// (colon-separated; .ci/tokenizer-ref.sh sets it to Qwen3's).
func TestChatMatchesPythonJinja(t *testing.T) {
	py := pythonWithJinja(t)
	type target struct {
		name string
		chat *Chat
		src  string
	}
	var targets []target
	for _, tmpl := range []string{"tools.jinja", "parts.jinja"} {
		for _, strict := range []bool{false, true} {
			c := testChat(t, tmpl, ChatConfig{ToolStrict: strict})
			src, _ := os.ReadFile(filepath.Join("testdata/chat", tmpl))
			targets = append(targets, target{fmt.Sprintf("%s strict=%v", tmpl, strict), c, string(src)})
		}
	}
	for _, dir := range filepath.SplitList(os.Getenv("AGENTKV_HF_MODEL_DIRS")) {
		if dir == "" {
			continue
		}
		c, err := LoadChat(dir, ChatConfig{})
		require.NoError(t, err)
		var tc tokenizerConfig
		b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &tc))
		src, err := configTemplate(tc.ChatTemplate)
		require.NoError(t, err)
		targets = append(targets, target{dir, c, src})
	}
	bodies := chatCorpus(400)
	for _, tg := range targets {
		var in bytes.Buffer
		special := map[string]string{}
		for k, v := range tg.chat.globals {
			if v.IsString() {
				special[k] = v.AsString()
			}
		}
		for _, b := range bodies {
			line, err := json.Marshal(map[string]any{"template": tg.src, "special": special, "body": json.RawMessage(b),
				"strict": tg.chat.strict, "openai": tg.chat.openai})
			require.NoError(t, err)
			in.Write(line)
			in.WriteByte('\n')
		}
		cmd := exec.Command(py, "testdata/chat/render.py")
		cmd.Stdin = &in
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		require.NoError(t, cmd.Run(), stderr.String())
		sc := bufio.NewScanner(&out)
		sc.Buffer(nil, 64<<20)
		n, errs := 0, 0
		for i := 0; sc.Scan(); i++ {
			var ref struct{ Text, Error string }
			require.NoError(t, json.Unmarshal(sc.Bytes(), &ref))
			got, err := tg.chat.Render(bodies[i])
			if ref.Error != "" {
				require.Error(t, err, "%s: request %d: python failed (%s), Go rendered %q", tg.name, i, ref.Error, got)
				errs++
				continue
			}
			require.NoError(t, err, "%s: request %d: %s", tg.name, i, bodies[i])
			if got != ref.Text {
				k := 0
				for k < len(got) && k < len(ref.Text) && got[k] == ref.Text[k] {
					k++
				}
				t.Fatalf("%s: request %d differs at byte %d:\ngo:     %q\npython: %q\nbody: %s", tg.name, i, k,
					got[max(0, k-40):min(len(got), k+40)], ref.Text[max(0, k-40):min(len(ref.Text), k+40)], bodies[i])
			}
			n++
		}
		require.Equal(t, len(bodies), n+errs)
		require.Less(t, errs, len(bodies)/4, "%s: most requests must render", tg.name)
		t.Logf("%s: %d requests rendered identically, %d refused by both", tg.name, n, errs)
		turns := sessionRendersMatch(t, tg.name, tg.chat, bodies)
		t.Logf("%s: %d session turns rendered from the last turn's memos as whole", tg.name, turns)
	}
}

// sessionRendersMatch renders growing conversations made of the corpus's
// messages (each turn appends the next body's messages) as a session does
// (the previous turn's parse, conversion and loop memos) and checks each
// turn against a whole render; it returns the turns compared.
func sessionRendersMatch(t *testing.T, name string, c *Chat, bodies [][]byte) int {
	turns := 0
	for s := 0; s < 20; s++ {
		var msgs []any
		var memo *parseMemo
		for j := 0; j < 10; j++ {
			var b map[string]any
			require.NoError(t, json.Unmarshal(bodies[(s*10+j)%len(bodies)], &b))
			msgs = append(msgs, b["messages"].([]any)...)
			body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
			require.NoError(t, err)
			want, wantErr := c.Render(body)
			got, next, err := c.render(body, memo, true)
			require.Equal(t, wantErr != nil, err != nil, "%s: session %d turn %d: %v / %v", name, s, j, err, wantErr)
			require.Equal(t, want, got, "%s: session %d turn %d", name, s, j)
			if err == nil {
				memo = next
			}
			turns++
		}
	}
	return turns
}

// pythonWithJinja finds a Python with jinja2 (Debian's python3-jinja2,
// which .ci/run installs, or the first python3 on PATH).
func pythonWithJinja(t *testing.T) string {
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import jinja2").Run() == nil {
			return py
		}
	}
	t.Skip("no python3 with jinja2 (apt-get install python3-jinja2; .ci/run installs it)")
	return ""
}

// chatCorpus generates n chat completions bodies of the shapes coding
// agents send: system prompts, multi-turn tool use with arguments as
// text (some invalid), tool results as text or parts, reasoning, names,
// tools with and without descriptions, template kwargs, continuation.
func chatCorpus(n int) [][]byte {
	rng := rand.New(rand.NewPCG(7, 9))
	words := []string{"read", "the", "file", "main.go", "fix", "tests", "👍", "naïve", "日本語", "x\ty", "a\nb", "  indent", "\"quoted\"",
		"<tag>", "</think>", "<think>", "don't", "<|im_end|>", "100", "é", "\\path"}
	text := func(k int) string {
		var b strings.Builder
		for i := range k {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.String()
	}
	out := make([][]byte, n)
	for i := range out {
		var msgs []any
		if rng.IntN(4) > 0 {
			msgs = append(msgs, map[string]any{"role": "system", "content": text(1 + rng.IntN(12))})
		}
		if rng.IntN(8) == 0 {
			msgs = append(msgs, map[string]any{"role": "developer", "content": text(3), "tools": []any{}})
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": text(1 + rng.IntN(10))})
		for range rng.IntN(4) {
			a := map[string]any{"role": "assistant", "content": text(rng.IntN(6))}
			switch rng.IntN(5) {
			case 0:
				a["content"] = nil
			case 1:
				a["content"] = "<think>\n" + text(3) + "\n</think>\n\n" + text(2)
			case 2:
				a["reasoning"] = text(3)
			}
			if rng.IntN(2) == 0 {
				args := fmt.Sprintf(`{"path": %q, "n": %d, "flags": [true, null]}`, text(1), rng.IntN(100))
				if rng.IntN(6) == 0 {
					args = "{not json"
				}
				a["tool_calls"] = []any{map[string]any{"id": fmt.Sprint("call_", i), "type": "function",
					"function": map[string]any{"name": "read_file", "arguments": args}}}
				msgs = append(msgs, a)
				res := any(text(1 + rng.IntN(8)))
				if rng.IntN(3) == 0 {
					res = []any{map[string]any{"type": "text", "text": text(2)}, map[string]any{"type": "text", "text": text(2)}}
				}
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": fmt.Sprint("call_", i), "content": res})
			} else {
				msgs = append(msgs, a)
				u := map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": text(3)}, text(1)}}
				if rng.IntN(6) == 0 {
					u["content"] = append(u["content"].([]any), map[string]any{"type": "refusal", "refusal": text(2)},
						map[string]any{"type": "text", "text": nil})
				}
				if rng.IntN(3) == 0 {
					u["name"] = "dev"
				}
				msgs = append(msgs, u)
			}
		}
		body := map[string]any{"model": "m", "messages": msgs}
		if rng.IntN(2) == 0 {
			fn := map[string]any{"name": "read_file", "parameters": map[string]any{"type": "object",
				"properties": map[string]any{"path": map[string]any{"type": "string", "description": text(2)}}, "required": []any{"path"}}}
			if rng.IntN(2) == 0 {
				fn["description"] = text(4)
			}
			if rng.IntN(4) == 0 {
				fn["strict"] = rng.IntN(2) == 0
			}
			body["tools"] = []any{map[string]any{"type": "function", "function": fn}}
		}
		if rng.IntN(5) == 0 {
			body["chat_template_kwargs"] = map[string]any{"enable_thinking": false}
		}
		if last, ok := msgs[len(msgs)-1].(map[string]any); ok && last["role"] == "assistant" && rng.IntN(3) == 0 {
			if s, ok := last["content"].(string); ok && strings.TrimSpace(s) != "" {
				body["add_generation_prompt"] = false
				body["continue_final_message"] = true
			}
		}
		out[i], _ = json.Marshal(body)
	}
	return out
}

// TestParseJSONMatchesEncodingJSON: the order-keeping parser accepts what
// encoding/json accepts and yields the same values.
func TestParseJSONMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{`{"b":1,"a":{"y":[1,2.5,-3e2,true,false,null],"x":"\u00e9\n"}}`, `"\ud83d\ude00"`, `[]`, `{}`, ` 1 `,
		`-0`, `1e400`, `"\ud83d"`, `"\ud83dx"`, `"\ud83d\u0041"`, `"\uDE00\uD83D"`, `"\ud83d\ud83d\ude00"`, `"a\/b\b\f\r\t"`, `"\x"`, `"\u12"`, `"\u12zz"`,
		"\"caf\xc3\xa9 \xe2\x82\"", "\"tab\there\"", `9223372036854775808`, `"\ud800"`, "\"\xff\"", `{"a":1,"a":2}`, `[1,]`, `{"a" 1}`, `01`, `1.`, `-`, `"\x01"`, `nul`, `[1] 2`} {
		checkParseJSON(t, []byte(s))
	}
}

func checkParseJSON(t *testing.T, b []byte) {
	v, err := parseJSON(b)
	var ref any
	refErr := json.Unmarshal(b, &ref)
	if refErr != nil {
		require.Error(t, err, "%q: encoding/json refuses it (%v)", b, refErr)
		return
	}
	if err != nil {
		// The one refusal encoding/json does not share: numbers beyond float64.
		require.ErrorContains(t, err, "invalid number", "%q", b)
		return
	}
	got, err := json.Marshal(toGo(v))
	require.NoError(t, err)
	want, err := json.Marshal(ref)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got), "%q", b)
}

func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"messages":[{"role":"user","content":"hi"}]}`, `[1,2,{"a":null}]`, `"\u00e9"`, `-1.5e3`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkParseJSON(t, b)
	})
}

// FuzzChat: any body gets ids or an error, never a panic, and the ids are
// the encoding of the rendered text; as a session's second turn it gets
// the same.
func FuzzChat(f *testing.F) {
	for _, b := range chatCorpus(16) {
		f.Add(b)
	}
	c := testChat(f, "tools.jinja", ChatConfig{})
	var session atomic.Int64
	f.Fuzz(func(t *testing.T, b []byte) {
		// The same body as a session's turn after a corpus body (its
		// memos: parse, conversion, loop, ids) gets the same answer.
		s := fmt.Sprint("fuzz", session.Add(1))
		_, _ = c.TokenizeChatSession(s, chatCorpus(1)[0])
		sids, serr := c.TokenizeChatSession(s, b)
		ids, err := c.TokenizeChat(b)
		require.Equal(t, err != nil, serr != nil, "whole: %v, session: %v", err, serr)
		if err != nil {
			return
		}
		require.Equal(t, ids, sids)
		text, err := c.Render(b)
		require.NoError(t, err)
		require.Equal(t, c.Tokenizer().Encode(nil, text), ids)
	})
}

// toGo converts a template value back to encoding/json's shapes.
func toGo(v jinja.Value) any {
	switch {
	case v.IsNone():
		return nil
	case v.IsBool():
		return v.AsBool()
	case v.IsInt():
		return float64(v.AsInt())
	case v.IsFloat():
		return v.AsFloat()
	case v.IsString():
		return v.AsString()
	case v.IsList():
		out := []any{}
		for _, e := range v.AsList().Items {
			out = append(out, toGo(e))
		}
		return out
	case v.IsDict():
		out := map[string]any{}
		d := v.AsDict()
		for _, k := range d.Keys {
			out[k] = toGo(d.Data[k])
		}
		return out
	}
	return "undefined"
}
