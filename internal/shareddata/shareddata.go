// Package shareddata locates the public traces tests and benchmarks read
// from ../shared/data (relative to the project root), and skips the caller
// with a clear message when they are absent, as in a fresh clone.
package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the absolute path of the shared data folder, found by walking
// up from the working directory (a package directory under go test), or
// skips tb when there is none.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		tb.Skipf("shared data: %v", err)
	}
	for {
		p := filepath.Join(dir, "..", "shared", "data")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return filepath.Clean(p)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Skip("../shared/data (the public Mooncake and Claude Code traces) not found, as in a fresh clone: skipping")
		}
		dir = parent
	}
}

// Path returns a file under the shared data folder, skipping tb when the
// folder or the file is absent.
func Path(tb testing.TB, elem ...string) string {
	tb.Helper()
	p := filepath.Join(append([]string{Dir(tb)}, elem...)...)
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("shared data file missing: %v", err)
	}
	return p
}
