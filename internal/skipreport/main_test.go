package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestReportsSkipsPerPackage(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"a","Test":"TestX"}`,
		`{"Action":"output","Package":"a","Test":"TestX","Output":"=== RUN   TestX\n"}`,
		`{"Action":"output","Package":"a","Test":"TestX","Output":"    x_test.go:9: no data here\n"}`,
		`{"Action":"output","Package":"a","Test":"TestX","Output":"--- SKIP: TestX (0.00s)\n"}`,
		`{"Action":"skip","Package":"a","Test":"TestX"}`,
		`{"Action":"output","Package":"a","Output":"ok  \ta\t0.01s\n"}`,
		`{"Action":"pass","Package":"a"}`,
		`{"Action":"output","Package":"b","Output":"ok  \tb\t0.01s\n"}`,
		`{"Action":"pass","Package":"b"}`,
	}, "\n")
	var out bytes.Buffer
	if rc := run(strings.NewReader(in), &out, false); rc != 0 {
		t.Fatalf("rc %d", rc)
	}
	want := "ok  \ta\t0.01s\nok  \tb\t0.01s\nskipped in a: TestX (x_test.go:9: no data here)\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
	if rc := run(strings.NewReader(in), &bytes.Buffer{}, true); rc != 1 {
		t.Fatalf("-fail-on-skip: rc %d, want 1", rc)
	}
	fail := `{"Action":"output","Package":"c","Test":"TestY","Output":"    y_test.go:3: boom\n"}` + "\n" +
		`{"Action":"fail","Package":"c","Test":"TestY"}`
	out.Reset()
	if rc := run(strings.NewReader(fail), &out, false); rc != 1 {
		t.Fatalf("a failure: rc %d, want 1", rc)
	}
	if !strings.Contains(out.String(), "boom") {
		t.Fatalf("a failing test's output is shown: got %q", out.String())
	}
}
