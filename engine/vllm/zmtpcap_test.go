package vllm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// zmtpFrame encodes one ZMTP 3 frame.
func zmtpFrame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		b := []byte{flags | 0x02, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint64(b[1:], uint64(len(body)))
		return append(b, body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// TestZMTPLimiter: framing is followed across any split of the stream;
// messages up to the cap pass, and a header past it, too many frames or
// an oversized command fail before their body.
func TestZMTPLimiter(t *testing.T) {
	greeting := make([]byte, zmtpGreetingBytes)
	ok := bytes.Join([][]byte{greeting,
		zmtpFrame(0x04, []byte("\x05READY")),
		zmtpFrame(0x01, []byte("kv")), zmtpFrame(0x01, make([]byte, 8)), zmtpFrame(0x00, make([]byte, 900)),
		zmtpFrame(0x00, make([]byte, 1000)),
	}, nil)
	longHeader := []byte{0x02, 0, 0, 1, 0, 0, 0, 0, 0} // 2^40 bytes
	for _, tc := range []struct {
		name   string
		stream []byte
		fails  bool
	}{
		{"messages within the cap", ok, false},
		{"a 2^40-byte frame", append(append([]byte{}, ok...), longHeader...), true},
		{"frames adding up past the cap", append(append([]byte{}, greeting...), bytes.Repeat(zmtpFrame(0x01, make([]byte, 200)), 6)...), true},
		{"too many frames", append(append([]byte{}, greeting...), bytes.Repeat(zmtpFrame(0x01, nil), maxFramesPerMessage+1)...), true},
		{"huge command", append(append([]byte{}, greeting...), 0x06, 0, 0, 0, 0, 1, 0, 0, 0), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, chunk := range []int{1, 3, 64, 1 << 20} {
				z := zmtpLimiter{max: 1024}
				var err error
				for b := tc.stream; len(b) > 0 && err == nil; {
					k := min(chunk, len(b))
					err = z.scan(b[:k])
					b = b[k:]
				}
				if tc.fails != errors.Is(err, ErrMessageTooLarge) {
					t.Fatalf("chunk %d: err %v, want failure %v", chunk, err, tc.fails)
				}
			}
		})
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// evilRelay sits between a real PUB socket and the subscriber: it relays
// the handshake and the first data message, then announces a 2^40-byte
// frame, which the zmq4 library would allocate before reading it.
func evilRelay(t *testing.T, pubEP string) string {
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
				u, err := net.Dial("tcp", strings.TrimPrefix(pubEP, "tcp://"))
				if err != nil {
					return
				}
				defer u.Close()
				go io.Copy(u, c)
				g := make([]byte, zmtpGreetingBytes)
				if _, err := io.ReadFull(u, g); err != nil {
					return
				}
				c.Write(g)
				for {
					var h [9]byte
					if _, err := io.ReadFull(u, h[:1]); err != nil {
						return
					}
					n := 1
					if h[0]&0x02 != 0 {
						n = 8
					}
					if _, err := io.ReadFull(u, h[1:1+n]); err != nil {
						return
					}
					size := uint64(h[1])
					if n == 8 {
						size = binary.BigEndian.Uint64(h[1:9])
					}
					body := make([]byte, size)
					if _, err := io.ReadFull(u, body); err != nil {
						return
					}
					c.Write(h[:1+n])
					c.Write(body)
					if h[0]&0x05 == 0 { // the last frame of a data message
						c.Write([]byte{0x02, 0, 0, 1, 0, 0, 0, 0, 0})
						io.Copy(io.Discard, u) // hold the connection until the publisher goes
						return
					}
				}
			}()
		}
	}()
	return "tcp://" + ln.Addr().String()
}

// TestSubscriberDropsHugeFrame: a frame header announcing 2^40 bytes from
// the engine endpoint drops the connection (ErrMessageTooLarge, logged,
// reconnect) instead of an out-of-memory crash, and ordinary messages
// still flow through the capped transport.
func TestSubscriberDropsHugeFrame(t *testing.T) {
	pubEP := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	pub := goPub(t, pubEP)
	defer pub.Close()
	var logs syncBuffer
	col := newCollector()
	sub, err := NewSubscriber(Config{WorkerID: 1, Endpoint: evilRelay(t, pubEP), Topic: "kv", Sink: col,
		ReconnectMin: 5 * time.Millisecond, ReconnectMax: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	publishUntilSeen(t, pub, col, 0, 0, 1000)
	deadline := time.Now().Add(waitBound)
	for !strings.Contains(logs.String(), "zeromq message too large") || sub.Stats()[0].Reconnects < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no drop: reconnects %d, logs %s", sub.Stats()[0].Reconnects, logs.String())
		}
		send(t, pub, 1<<20, stored(1))
		time.Sleep(10 * time.Millisecond)
	}
}

// endlessTokens is a /tokenize reply that never ends: {"tokens":[1,1,1,...
type endlessTokens struct{ started bool }

func (e *endlessTokens) Read(p []byte) (int, error) {
	n := 0
	if !e.started {
		n = copy(p, `{"tokens":[1`)
		e.started = true
	}
	for n+2 <= len(p) {
		p[n], p[n+1] = ',', '1'
		n += 2
	}
	return n, nil
}

// TestTokenizeReplyBounded: an engine whose /tokenize reply never ends
// gets ErrReplyTooLarge after MaxTokenizeReplyBytes, not unbounded memory.
func TestTokenizeReplyBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, io.LimitReader(&endlessTokens{}, MaxTokenizeReplyBytes+4<<20))
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL, nil)
	_, err := c.Tokenize(context.Background(), CompletionPath, []byte(`{"model":"m","prompt":"hello"}`))
	if !errors.Is(err, ErrReplyTooLarge) {
		t.Fatalf("err %v, want ErrReplyTooLarge", err)
	}
}
