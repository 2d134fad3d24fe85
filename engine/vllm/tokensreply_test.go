package vllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

var tokensReplies = []string{
	`{"count":3,"max_model_len":32768,"tokens":[1,22,333],"token_strs":null}`,
	` {"tokens" : [ 0 , 4294967295 ] } `, `{"tokens":[]}`, `{"tokens":null}`, `{}`, `{"count":1}`,
	`{"tokens":[4294967296]}`, `{"tokens":[-1]}`, `{"tokens":[-0]}`, `{"tokens":[1.0]}`, `{"tokens":[1e2]}`, `{"tokens":["1"]}`,
	`{"tokens":[1,2],"tokens":[3]}`, `{"Tokens":[5]}`, `{"tok\u0065ns":[6]}`, `{"tokens":[1],"TOKENS":[2]}`,
	`{"tokens":[1]} trailing`, `{"tokens":[1]}{}`, `{"tokens":[1,]}`, `{"tokens":[1`, `[1,2]`, `null`, ``, `{"tokens":{"a":1}}`,
	`{"x":{"tokens":[9]},"tokens":[7,8]}`,
	// Checked in the one pass: leading zeros, missing commas, bad
	// scalars and keys, a cut or trailing object.
	`{"tokens":[0,10]}`, `{"tokens":[01]}`, `{"tokens":[00]}`, `{"tokens":[1 2]}`, `{"tokens":[1,,2]}`, `{"tokens":nul}`,
	`{"tokens":nullx}`, `{"a":01,"tokens":[1]}`, `{"a":-0.5e3,"tokens":[1]}`, `{"a":"x\u00","tokens":[1]}`,
	`{"a" "b","tokens":[1]}`, `{"tokens":[1],}`, `{,"tokens":[1]}`, `{"tokens":[1]`, `{"tokens":[1]}}`,
	"{\"a\":\"\x01\",\"tokens\":[1]}", "{\"tokens\"\t:\n[ 1\r,2 ]\t}", `{"a":[1],"tokens":[2]}`,
	`{"a":true,"b":false,"c":null,"tokens":[3]}`, `{"a":tru,"tokens":[3]}`, `{"tokens":[4294967295,0]}`,
}

// checkTokens compares decodeTokens with encoding/json's decoder.
func checkTokens(t *testing.T, reply []byte) {
	t.Helper()
	var want struct {
		Tokens []uint32 `json:"tokens"`
	}
	werr := json.NewDecoder(bytes.NewReader(reply)).Decode(&want)
	got, gerr := decodeTokens(reply)
	if (werr == nil) != (gerr == nil) || werr == nil && (!slices.Equal(got, want.Tokens) || (got == nil) != (want.Tokens == nil)) {
		t.Fatalf("decodeTokens(%q) = %v, %v; encoding/json %v, %v", reply, got, gerr, want.Tokens, werr)
	}
}

// TestDecodeTokens: decodeTokens reads /tokenize replies as encoding/json
// does, the usual one without it.
func TestDecodeTokens(t *testing.T) {
	for _, r := range tokensReplies {
		checkTokens(t, []byte(r))
	}
	for _, r := range []string{tokensReplies[0], `{"a":true,"b":false,"c":null,"tokens":[3]}`, "{\"tokens\"\t:\n[ 1\r,2 ]\t}"} {
		if _, ok := fastTokens([]byte(r)); !ok {
			t.Fatalf("%q took the slow path", r)
		}
	}
}

// FuzzDecodeTokens: on any reply, decodeTokens agrees with encoding/json.
func FuzzDecodeTokens(f *testing.F) {
	for _, r := range tokensReplies {
		f.Add([]byte(r))
	}
	f.Fuzz(func(t *testing.T, reply []byte) { checkTokens(t, reply) })
}

// BenchmarkDecodeTokens: a 2,000-token reply, decodeTokens against
// encoding/json.
func BenchmarkDecodeTokens(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"count":2000,"max_model_len":32768,"tokens":[`)
	for i := range 2000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprint(&sb, (i*7919)%151000)
	}
	sb.WriteString(`],"token_strs":null}`)
	reply := []byte(sb.String())
	b.Run("fast", func(b *testing.B) {
		for range b.N {
			if _, err := decodeTokens(reply); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for range b.N {
			var out struct {
				Tokens []uint32 `json:"tokens"`
			}
			if err := json.NewDecoder(bytes.NewReader(reply)).Decode(&out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
