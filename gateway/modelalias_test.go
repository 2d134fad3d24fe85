package gateway

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestModelAlias(t *testing.T) {
	for _, tc := range []struct {
		in, err string
		want    ModelAlias
	}{
		{in: "claude-*=Qwen/Qwen3-8B", want: ModelAlias{Pattern: "claude-*", Model: "Qwen/Qwen3-8B"}},
		{in: " gpt-4o = m ", want: ModelAlias{Pattern: "gpt-4o", Model: "m"}},
		{in: "claude-*", err: "want PATTERN=MODEL"},
		{in: "=m", err: "want PATTERN=MODEL"},
		{in: "p=", err: "want PATTERN=MODEL"},
		{in: "claude-[=m", err: "pattern"},
	} {
		a, err := ParseModelAlias(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, a, tc.in)
	}
	aliases := []ModelAlias{{"claude-haiku-*", "small"}, {"claude-*", "big"}}
	for name, want := range map[string]string{"claude-haiku-4-5": "small", "claude-sonnet-4-5": "big", "gpt-4o": "gpt-4o", "": ""} {
		got, _ := aliasModel(aliases, name)
		require.Equal(t, want, got, name)
	}

	body, err := withModel([]byte(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`), "big")
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	require.Equal(t, "big", m["model"])
	require.Equal(t, 8.0, m["max_tokens"])

	list, err := aliasModels([]byte(`{"object":"list","data":[{"id":"big","object":"model"}]}`), aliases)
	require.NoError(t, err)
	var l struct {
		Object string `json:"object"`
		Data   []struct{ ID, Root string }
	}
	require.NoError(t, json.Unmarshal(list, &l))
	require.Equal(t, "list", l.Object)
	require.Len(t, l.Data, 3)
	require.Equal(t, "big", l.Data[0].ID)
	require.Equal(t, "claude-haiku-*", l.Data[1].ID)
	require.Equal(t, "small", l.Data[1].Root)
	require.Equal(t, "claude-*", l.Data[2].ID)
}

// FuzzModelAlias: any --model-alias value parses or is refused with an
// error, never a panic; a parsed alias matches its own pattern's literal
// names and rewrites a request body's model.
func FuzzModelAlias(f *testing.F) {
	for _, s := range []string{"claude-*=Qwen/Qwen3-8B", "a=b", "[=x", "=", "*=*", "claude-\\*=m"} {
		f.Add(s, "claude-sonnet-4-5")
	}
	f.Fuzz(func(t *testing.T, spec, name string) {
		a, err := ParseModelAlias(spec)
		if err != nil {
			return
		}
		got, ok := aliasModel([]ModelAlias{a}, name)
		if ok {
			require.Equal(t, a.Model, got)
			body, err := withModel([]byte(`{"model":"x"}`), got)
			require.NoError(t, err)
			var m map[string]string
			require.NoError(t, json.Unmarshal(body, &m))
			if utf8.ValidString(got) { // JSON carries invalid UTF-8 as U+FFFD
				require.Equal(t, got, m["model"])
			}
		} else {
			require.Equal(t, name, got)
		}
	})
}
