package hftok

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotCached is returned by CachedModelDir when the model is not in the
// Hugging Face hub cache (or its snapshot lacks the tokenizer files).
var ErrNotCached = errors.New("not in the Hugging Face cache")

// HubCacheDir is the Hugging Face hub cache this process would read, as
// huggingface_hub resolves it: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE,
// else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
func HubCacheDir() string {
	for _, env := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := os.Getenv(env); d != "" {
			return d
		}
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface", "hub")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// CachedModelDir finds the directory LoadChat reads for a served model:
// the model name itself when it is a local directory holding
// tokenizer.json (vLLM serves a path as its model name), else the model's
// snapshot in the hub cache at hub (HubCacheDir when ""): the snapshot
// refs/main names, or the only snapshot there is. It returns ErrNotCached
// (wrapped, saying where it looked) when there is none.
func CachedModelDir(hub, model string) (string, error) {
	if model == "" {
		return "", fmt.Errorf("no model name: %w", ErrNotCached)
	}
	if filepath.IsAbs(model) || strings.HasPrefix(model, ".") {
		if hasTokenizer(model) {
			return model, nil
		}
		return "", fmt.Errorf("%s holds no tokenizer.json and tokenizer_config.json: %w", model, ErrNotCached)
	}
	if hub == "" {
		hub = HubCacheDir()
	}
	org, name, ok := strings.Cut(model, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") || strings.Contains(model, "..") {
		return "", fmt.Errorf("%q is not a hub model id (org/name): %w", model, ErrNotCached)
	}
	repo := filepath.Join(hub, "models--"+org+"--"+name)
	snaps := filepath.Join(repo, "snapshots")
	if ref, err := os.ReadFile(filepath.Join(repo, "refs", "main")); err == nil {
		rev := strings.TrimSpace(string(ref))
		if dir := filepath.Join(snaps, rev); rev != "" && !strings.ContainsAny(rev, `/\`) && hasTokenizer(dir) {
			return dir, nil
		}
	}
	ents, err := os.ReadDir(snaps)
	if err != nil {
		return "", fmt.Errorf("no snapshot of %s in %s: %w", model, hub, ErrNotCached)
	}
	var found []string
	for _, e := range ents {
		if dir := filepath.Join(snaps, e.Name()); e.IsDir() && hasTokenizer(dir) {
			found = append(found, dir)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("no snapshot of %s in %s holds tokenizer.json and tokenizer_config.json: %w", model, hub, ErrNotCached)
	}
	return "", fmt.Errorf("%d snapshots of %s in %s and no refs/main naming one: %w", len(found), model, hub, ErrNotCached)
}

func hasTokenizer(dir string) bool {
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}
