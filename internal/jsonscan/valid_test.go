package jsonscan

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

var validCases = []string{
	``, ` `, `{}`, `[]`, `{"a":1}`, ` {"a" : [1, 2.5e-3, -0, true, false, null, "x\"y\\z\/\b\f\n\r\t\u00e9"]} `,
	`{"a":1,}`, `[1,]`, `[,1]`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`, `[1 2]`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `-01`,
	`"abc`, `"a\x"`, `"\u12"`, `"\u12G4"`, "\"a\x01b\"", "\"\xff\xfe\"", `tru`, `nul`, `truex`, `"a"b`, `{}{}`, `1 2`,
	`{"a":{"b":[{"c":[]}]}}`, `[[[[]]]]`, `[[[[]]]`, `]`, `}`, `{"a":1]`, `[1}`, "\t\n\r[ ]\r\n", `"` + strings.Repeat(`\\`, 9) + `"`,
	`"` + strings.Repeat("abcdefgh", 5) + `\n` + strings.Repeat("x", 13) + `"`, `"` + strings.Repeat("abcdefg\"", 3),
	`1E5`, `-1.5E-5`, `123abc`, `[1.5e3,-0.0,0e0]`, `"\"`, `"\\"`, "\"\x7f\x80\"",
	strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
	strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth),
	strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1),
}

// TestValid: Valid agrees with encoding/json.Valid on hand-picked cases,
// and on every prefix of some of them (truncated bodies).
func TestValid(t *testing.T) {
	for _, c := range validCases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%.60q) = %v, json.Valid %v", c, got, want)
		}
	}
	body := agentBody(4 << 10)
	for n := range len(body) + 1 {
		if got, want := Valid(body[:n]), json.Valid(body[:n]); got != want {
			t.Fatalf("prefix %d: Valid %v, json.Valid %v", n, got, want)
		}
	}
	if !Valid(body) {
		t.Fatal("an agent body is not valid")
	}
}

// FuzzValid: Valid agrees with encoding/json.Valid on any input.
func FuzzValid(f *testing.F) {
	for _, c := range validCases[:len(validCases)-4] {
		f.Add([]byte(c))
	}
	f.Add(agentBody(600))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid %v", b, got, want)
		}
	})
}

// agentBody is a chat request of about n bytes whose messages carry
// source code, as an agent's do.
func agentBody(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","stream":true,"max_tokens":64,"messages":[{"role":"system","content":"You are a coding agent."}`)
	for i := 0; sb.Len() < n; i++ {
		c, _ := json.Marshal(strings.Repeat(fmt.Sprintf("func handler%d(w http.ResponseWriter, r *http.Request) {\n\tif err := check(r, \"x\"); err != nil {\n\t\treturn\n\t}\n}\n", i), 3))
		fmt.Fprintf(&sb, `,{"role":"tool","tool_call_id":"call_%d","content":%s}`, i, c)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

// BenchmarkValid: Valid against encoding/json.Valid on agent bodies.
func BenchmarkValid(b *testing.B) {
	for _, n := range []int{10 << 10, 500 << 10} {
		body := agentBody(n)
		b.Run(fmt.Sprintf("bytes=%dK/jsonscan", n>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for range b.N {
				Valid(body)
			}
		})
		b.Run(fmt.Sprintf("bytes=%dK/encoding-json", n>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for range b.N {
				json.Valid(body)
			}
		})
	}
}
