package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var headSeeds = []string{
	`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`,
	`{"messages":[{"content":"\"model\":\"no\",}]"}],"model":"m2","stream_options":{"include_usage":false},"stream":false}`,
	` { "Model" : "a" , "STREAM":true,"stream_options" : null } `,
	`{"model":"a","model":null}`, `{"model":7}`, `{"stream":"yes"}`, `{"m\u006fdel":"x"}`, `{}`, `[]`, `{"a":[1,{"b":"}"}],"model":"z"}`,
	`{"ſtream":true}`, `{"model":"a",}`, `{"model":"a"`, `{"stream":true}x`, `{"n":-1.5e3,"t":true,"f":false,"z":null,"model":"\\"}`,
}

// TestReadHead: on a valid JSON body (readBody checks it before parse),
// readHead reads what json.Unmarshal reads, and fails where it fails.
func TestReadHead(t *testing.T) {
	for _, s := range headSeeds {
		checkHead(t, []byte(s))
	}
}

// TestReadHeadRandom: random objects from fragments that trip scanners
// (keys in other cases, escapes, nesting, strings holding brackets and
// quotes, repeated keys, wrong types) read as json.Unmarshal reads them.
func TestReadHeadRandom(t *testing.T) {
	keys := []string{`"model"`, `"Model"`, `"stream"`, `"STREAM"`, `"stream_options"`, `"messages"`, `"m\u006fdel"`, `"x"`, `"ſtream"`}
	vals := []string{`"m"`, `"a\"b"`, `"}]"`, `true`, `false`, `null`, `7`, `-1.5e3`, `{"include_usage":true}`, `[1,{"a":"]"},[]]`,
		`{"model":"inner"}`, `"\\"`, `""`}
	r := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		b.WriteString("{")
		for j, n := 0, r.IntN(5); j < n; j++ {
			if j > 0 {
				b.WriteString([]string{",", " , ", ",\n"}[r.IntN(3)])
			}
			b.WriteString(keys[r.IntN(len(keys))] + []string{":", " : "}[r.IntN(2)] + vals[r.IntN(len(vals))])
		}
		b.WriteString("}")
		checkHead(t, []byte(b.String()))
	}
}

func checkHead(t *testing.T, b []byte) {
	var want, got requestHead
	if !json.Valid(b) {
		_ = readHead(b, &got) // the gateway checked the body first: only no panic
		return
	}
	werr := json.Unmarshal(b, &want)
	gerr := readHead(b, &got)
	if werr != nil {
		require.Error(t, gerr, "%s", b)
		require.Equal(t, werr.Error(), gerr.Error(), "%s", b)
		return
	}
	require.NoError(t, gerr, "%s", b)
	require.Equal(t, want, got, "%s", b)
}

// FuzzReadHead: for any valid JSON body readHead agrees with
// json.Unmarshal; for any other it does not panic.
func FuzzReadHead(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkHead(t, b) })
}

// chunky is a reader that returns at most 3 bytes a call, and says
// nothing of its end until asked again.
type chunky struct{ b []byte }

func (c *chunky) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 3)], c.b)
	c.b = c.b[n:]
	return n, nil
}

// TestReadAll: a body read into a buffer of its declared length equals
// io.ReadAll's, whatever the declaration says.
func TestReadAll(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello there"}]}`)
	n := int64(len(body))
	for _, tc := range []struct {
		name     string
		declared int64
		wantErr  bool
	}{
		{"exact", n, false},
		{"unknown", -1, false},
		{"zero", 0, false},
		{"declared shorter than sent", n - 5, false},
		{"declared longer than sent", n + 5, true},
		{"declared over the limit", 1 << 40, false},
	} {
		got, err := readAll(&chunky{body}, tc.declared, 1<<20)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: no error for a short body", tc.name)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("%s: %q, %v", tc.name, got, err)
		}
	}
}
