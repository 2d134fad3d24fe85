package failover

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestRetryableStatus(t *testing.T) {
	for code := 100; code < 600; code++ {
		want := code == 408 || code == 429 || code == 500 || code == 502 || code == 503 || code == 504
		if got := RetryableStatus(code); got != want {
			t.Errorf("RetryableStatus(%d) = %v, want %v", code, got, want)
		}
		if got, want := CountsAsFailure(code), code >= 500; got != want {
			t.Errorf("CountsAsFailure(%d) = %v, want %v", code, got, want)
		}
	}
}

// do sends a GET to url with the client and classifies what came back,
// reading the whole body (started once a body byte arrived).
func do(ctx context.Context, c *http.Client, url string) Outcome {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return Classify(ctx, err, 0, false)
	}
	defer resp.Body.Close()
	var buf [1]byte
	n, err := resp.Body.Read(buf[:])
	started := n > 0
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	} else if err == io.EOF {
		err = nil
	}
	return Classify(ctx, err, resp.StatusCode, started)
}

// cutServer writes a chunked 200 with one chunk, then closes the
// connection without the terminating chunk.
func cutServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = http.ReadRequest(bufio.NewReader(c))
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// resetServer reads the request and closes the connection without a reply.
func resetServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = http.ReadRequest(bufio.NewReader(c))
				c.Close()
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

func TestClassifyAgainstLoopback(t *testing.T) {
	stall := stallServer(t)
	timeoutClient := &http.Client{Timeout: 200 * time.Millisecond}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name      string
		ctx       context.Context
		client    *http.Client
		url       string
		kind      Kind
		retryable bool
		failure   bool
	}{
		{"closed port", context.Background(), http.DefaultClient, "http://" + closedPort(t), Connect, true, true},
		{"503", context.Background(), http.DefaultClient, statusServer(t, 503).URL, Status, true, true},
		{"429", context.Background(), http.DefaultClient, statusServer(t, 429).URL, Status, true, false},
		{"501", context.Background(), http.DefaultClient, statusServer(t, 501).URL, Status, false, true},
		{"404", context.Background(), http.DefaultClient, statusServer(t, 404).URL, OK, false, false},
		{"200", context.Background(), http.DefaultClient, statusServer(t, 200).URL, OK, false, false},
		{"stall", context.Background(), timeoutClient, stall.URL, Timeout, true, true},
		{"reset before reply", context.Background(), http.DefaultClient, resetServer(t), Connect, true, true},
		{"cut mid-body", context.Background(), http.DefaultClient, cutServer(t), Cut, false, true},
		{"client gone", gone, http.DefaultClient, stall.URL, ClientGone, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := do(c.ctx, c.client, c.url)
			if o.Kind != c.kind || o.Retryable() != c.retryable || o.WorkerFailure() != c.failure {
				t.Fatalf("got kind %v retryable %v failure %v (err %v, status %d); want %v %v %v",
					o.Kind, o.Retryable(), o.WorkerFailure(), o.Err, o.Status, c.kind, c.retryable, c.failure)
			}
		})
	}
}

func TestClassifyStartedIsNeverRetryable(t *testing.T) {
	for _, err := range []error{nil, io.ErrUnexpectedEOF, context.DeadlineExceeded, errors.New("x")} {
		for _, st := range []int{0, 200, 503} {
			o := Classify(context.Background(), err, st, true)
			if o.Retryable() {
				t.Errorf("Classify(%v, %d, started) = %v: retryable", err, st, o.Kind)
			}
			if err != nil && o.Kind != Cut {
				t.Errorf("Classify(%v, %d, started) = %v, want cut", err, st, o.Kind)
			}
		}
	}
	if k := Kind(200).String(); k != "kind(200)" {
		t.Errorf("Kind(200) = %q", k)
	}
}
