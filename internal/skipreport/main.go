// Command skipreport reads `go test -json` output on stdin, passes the
// test output through as go test would print it without -json, and then
// prints one line per package that skipped tests, naming them and why
// (the first line of each skip message). It exits 1 when a test failed
// (mirroring go test's status) and, with -fail-on-skip, when any skipped.
// .ci/run pipes `go test -json ./...` through it, so skips are visible in
// CI where plain `go test ./...` would hide them behind "ok".
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type skip struct{ test, why string }

func main() {
	failOnSkip := flag.Bool("fail-on-skip", false, "exit 1 when a test was skipped")
	flag.Parse()
	os.Exit(run(os.Stdin, os.Stdout, *failOnSkip))
}

func run(in io.Reader, out io.Writer, failOnSkip bool) int {
	skips := map[string][]skip{}
	lastOut := map[string]string{}    // package/test → last output line
	buffered := map[string][]string{} // package/test → its output, printed if it fails
	failed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(out, sc.Text()) // not JSON (a build error): pass it on
			continue
		}
		key := e.Package + "/" + e.Test
		switch e.Action {
		case "output":
			if e.Test == "" && e.Output != "PASS\n" {
				fmt.Fprint(out, e.Output) // the package lines go test prints
			} else {
				buffered[key] = append(buffered[key], e.Output)
			}
			if t := strings.TrimSpace(e.Output); t != "" && !strings.HasPrefix(t, "---") && !strings.HasPrefix(t, "===") {
				lastOut[key] = t
			}
		case "skip":
			if e.Test != "" {
				skips[e.Package] = append(skips[e.Package], skip{e.Test, lastOut[key]})
			}
			delete(buffered, key)
		case "pass":
			delete(buffered, key)
		case "fail":
			failed = true
			fmt.Fprint(out, strings.Join(buffered[key], "")) // as go test shows a failure
			delete(buffered, key)
		}
	}
	pkgs := make([]string, 0, len(skips))
	for p := range skips {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		var parts []string
		for _, s := range skips[p] {
			parts = append(parts, fmt.Sprintf("%s (%s)", s.test, s.why))
		}
		fmt.Fprintf(out, "skipped in %s: %s\n", p, strings.Join(parts, "; "))
	}
	if failed || (failOnSkip && len(pkgs) > 0) {
		return 1
	}
	return 0
}
