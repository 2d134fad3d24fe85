package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFindsOrSkips(t *testing.T) {
	d := Dir(t) // skips in a fresh clone
	if !filepath.IsAbs(d) {
		t.Fatalf("not absolute: %s", d)
	}
	if _, err := os.Stat(filepath.Join(d, "README.md")); err != nil {
		t.Fatalf("the shared data folder has no README: %v", err)
	}
	p := Path(t, "README.md")
	if filepath.Dir(p) != d {
		t.Fatalf("Path %s not under %s", p, d)
	}
}
