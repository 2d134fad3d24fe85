package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
)

// runCLI runs the command line in-process and returns status, stdout, stderr.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(&cmdEnv{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb}, args)
	return code, out.String(), errb.String()
}

func TestHashMatchesLibrary(t *testing.T) {
	h, err := flashindex.NewHasher(4, "ad")
	require.NoError(t, err)
	toks := []uint32{10, 20, 30, 40, 50, 60, 70, 80, 90}
	wantL, wantS := h.AppendHashes(nil, nil, toks, 0, false)

	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"args", "", []string{"hash", "--block-size", "4", "--lora", "ad", "10", "20", "30", "40", "50", "60", "70", "80", "90"}},
		{"comma", "", []string{"hash", "--block-size=4", "--lora=ad", "10,20,30,40", "50,60,70,80,90"}},
		{"stdin", "[10,20,30,40,50,60,70,80,90]", []string{"hash", "--block-size", "4", "--lora", "ad"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.stdin, tc.args...)
			require.Equal(t, 0, code, stderr)
			var out hashOutput
			require.NoError(t, json.Unmarshal([]byte(stdout), &out))
			require.Equal(t, 9, out.Tokens)
			require.Equal(t, 1, out.TailLen)
			require.Len(t, out.Blocks, 2)
			for i, b := range out.Blocks {
				require.Equal(t, wantL[i], b.Local)
				require.Equal(t, wantS[i], b.Sequence)
			}
		})
	}
	code, stdout, _ := runCLI(t, "", "hash", "--block-size", "4", "--lora", "ad", "--seq", "10,20,30,40,50,60,70,80,90")
	require.Equal(t, 0, code)
	lines := strings.Fields(stdout)
	require.Len(t, lines, 2)
}

func TestHashBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, stdin, want string
		args              []string
	}{
		{"non-numeric", "", `"abc"`, []string{"hash", "--block-size", "4", "1", "abc"}},
		{"too-big", "", `"4294967296"`, []string{"hash", "--block-size", "4", "4294967296"}},
		{"negative", "", `"-1"`, []string{"hash", "--block-size", "4", "1,-1"}},
		{"block-size-0", "", "got 0", []string{"hash", "--block-size", "0", "1"}},
		{"no-block-size", "", "got 0", []string{"hash", "1"}},
		{"bad-json", "[1,", "JSON array", []string{"hash", "--block-size", "4"}},
		{"json-float", "[1.5]", `"1.5"`, []string{"hash", "--block-size", "4"}},
		{"unknown-flag", "", "flag provided but not defined", []string{"hash", "--nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.stdin, tc.args...)
			require.Equal(t, 2, code)
			require.Contains(t, stderr, tc.want)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one-line error: %q", stderr)
		})
	}
}

func TestDispatcher(t *testing.T) {
	code, _, stderr := runCLI(t, "")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "hash")

	code, stdout, _ := runCLI(t, "", "help")
	require.Equal(t, 0, code)
	for name := range commands {
		require.Contains(t, stdout, name)
	}

	code, _, stderr = runCLI(t, "", "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "unknown command")

	for name := range commands {
		code, stdout, _ := runCLI(t, "", name, "--help")
		require.Equal(t, 0, code, name)
		require.Contains(t, stdout, "usage: agentkv "+name, name)
	}
}

// TestProxyBadTokenizer: a --tokenizer directory the proxy cannot use is a
// one-line usage error at start, naming the flag and the reason.
func TestProxyBadTokenizer(t *testing.T) {
	dir := t.TempDir()
	// A SentencePiece-style model: not byte-level BPE.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"),
		[]byte(`{"model":{"type":"Unigram","vocab":[]},"added_tokens":[]}`), 0o644))
	for _, tc := range []struct{ name, dir, want string }{
		{"missing", filepath.Join(dir, "nope"), "no such file"},
		{"unsupported", dir, "hftok:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, "", "proxy", "--listen", "127.0.0.1:0", "--block-size", "16",
				"--worker", "http://127.0.0.1:1", "--tokenizer", tc.dir)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, "--tokenizer")
			require.Contains(t, stderr, tc.want)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one-line error: %q", stderr)
		})
	}
}
