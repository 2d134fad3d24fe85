package hftok

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// snapshot writes a hub-cache snapshot of model at rev (with the
// tokenizer files when full) and returns its directory.
func snapshot(t *testing.T, hub, model, rev string, full bool) string {
	t.Helper()
	dir := filepath.Join(hub, "models--"+strings.ReplaceAll(model, "/", "--"), "snapshots", rev)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	files := []string{"config.json"}
	if full {
		files = append(files, "tokenizer.json", "tokenizer_config.json")
	}
	for _, f := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o644))
	}
	return dir
}

func TestCachedModelDir(t *testing.T) {
	hub := t.TempDir()
	one := snapshot(t, hub, "acme/one", "aaa", true)
	snapshot(t, hub, "acme/two", "aaa", true)
	twoMain := snapshot(t, hub, "acme/two", "bbb", true)
	require.NoError(t, os.MkdirAll(filepath.Join(hub, "models--acme--two", "refs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(hub, "models--acme--two", "refs", "main"), []byte("bbb\n"), 0o644))
	snapshot(t, hub, "acme/three", "aaa", true)
	snapshot(t, hub, "acme/three", "bbb", true)
	snapshot(t, hub, "acme/bare", "aaa", false)
	local := one

	for _, tc := range []struct {
		model, want string
	}{
		{"acme/one", one},     // the only snapshot
		{"acme/two", twoMain}, // refs/main picks among two
		{local, local},        // a local path served as the model name
	} {
		got, err := CachedModelDir(hub, tc.model)
		require.NoError(t, err, tc.model)
		require.Equal(t, tc.want, got, tc.model)
	}
	for _, model := range []string{"", "acme/three", "acme/bare", "acme/none", "agentkv-mock", "a/b/c", "../x", "acme/..", t.TempDir()} {
		_, err := CachedModelDir(hub, model)
		require.Error(t, err, model)
		require.True(t, errors.Is(err, ErrNotCached), "%q: %v", model, err)
	}
}

func TestHubCacheDir(t *testing.T) {
	for _, env := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"} {
		t.Setenv(env, "")
	}
	t.Setenv("HOME", "/h")
	require.Equal(t, "/h/.cache/huggingface/hub", HubCacheDir())
	t.Setenv("XDG_CACHE_HOME", "/x")
	require.Equal(t, "/x/huggingface/hub", HubCacheDir())
	t.Setenv("HF_HOME", "/hf")
	require.Equal(t, "/hf/hub", HubCacheDir())
	t.Setenv("HUGGINGFACE_HUB_CACHE", "/old")
	require.Equal(t, "/old", HubCacheDir())
	t.Setenv("HF_HUB_CACHE", "/new")
	require.Equal(t, "/new", HubCacheDir())
}

// FuzzCachedModelDir: any model name a worker reports stays inside the hub
// cache (or is that local directory itself) and never panics.
func FuzzCachedModelDir(f *testing.F) {
	hub := f.TempDir()
	for _, s := range []string{"acme/one", "../x", "acme/..", "/abs", "a/b/c", "", "./rel", "acme/one\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, model string) {
		dir, err := CachedModelDir(hub, model)
		if err != nil {
			require.ErrorIs(t, err, ErrNotCached)
			return
		}
		if dir != model {
			rel, rerr := filepath.Rel(hub, dir)
			require.NoError(t, rerr)
			require.False(t, strings.HasPrefix(rel, ".."), "%q resolved outside the hub: %s", model, dir)
		}
	})
}
