package vllm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// DefaultMaxMessageBytes bounds one ZeroMQ message (all its frames) that a
// Subscriber, its replay requests or a Mooncake store subscriber accepts
// from an engine: 64 MiB, far above any event batch.
const DefaultMaxMessageBytes = 64 << 20

// ErrMessageTooLarge reports a ZeroMQ peer that announced a frame past the
// message cap (or too many frames, or an oversized command). The
// connection is dropped before the frame is allocated, and the
// subscriber reconnects.
var ErrMessageTooLarge = errors.New("vllm: zeromq message too large")

// The zmq4 library allocates each frame at the size its header announces
// (up to 2^63 bytes) before reading it, so one hostile or corrupt header
// from an engine endpoint would take the router down. Sockets dialled
// through LimitEndpoint run over a transport that parses ZMTP 3 framing as
// the bytes arrive and fails the read that would deliver an oversized
// header.
const (
	limitedPrefix        = "agentkv-"
	maxFramesPerMessage  = 64
	maxCommandFrameBytes = 64 << 10
	zmtpGreetingBytes    = 64
)

func init() {
	for _, n := range [...]struct{ name, network string }{{"tcp", "tcp"}, {"ipc", "unix"}} {
		if err := zmq4.RegisterTransport(limitedPrefix+n.name, limitedTransport{transport.New(n.network)}); err != nil {
			panic(err) // unreachable: the names are ours
		}
	}
}

type limitKey struct{}

// LimitZMQ returns a context for zmq4 sockets whose connections, dialled
// to endpoints rewritten by LimitEndpoint, accept messages of at most max
// bytes (0 means DefaultMaxMessageBytes).
func LimitZMQ(ctx context.Context, max int64) context.Context {
	if max <= 0 {
		max = DefaultMaxMessageBytes
	}
	return context.WithValue(ctx, limitKey{}, max)
}

// LimitEndpoint rewrites a tcp:// or ipc:// endpoint to the size-capped
// transport; other endpoints are returned unchanged.
func LimitEndpoint(ep string) string {
	for _, s := range [...]string{"tcp://", "ipc://"} {
		if strings.HasPrefix(ep, s) {
			return limitedPrefix + ep
		}
	}
	return ep
}

type limitedTransport struct{ transport.Transport }

func (t limitedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := t.Transport.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	max, _ := ctx.Value(limitKey{}).(int64)
	if max <= 0 {
		max = DefaultMaxMessageBytes
	}
	return &limitedConn{Conn: c, zmtp: zmtpLimiter{max: max}}, nil
}

// limitedConn checks every byte it reads against ZMTP framing.
type limitedConn struct {
	net.Conn
	zmtp zmtpLimiter
}

func (c *limitedConn) Read(p []byte) (int, error) {
	if c.zmtp.err != nil {
		return 0, c.zmtp.err
	}
	n, err := c.Conn.Read(p)
	if c.zmtp.scan(p[:n]) != nil {
		c.Conn.Close()
		return 0, c.zmtp.err
	}
	return n, err
}

// zmtpLimiter follows ZMTP 3 framing (a 64-byte greeting, then frames of
// a flags byte, a 1- or 8-byte big-endian size and the body) and records
// an error at the first header that breaks the caps.
type zmtpLimiter struct {
	max    int64
	greet  int    // greeting bytes seen
	state  uint8  // 0: flags next, 1: size bytes next, 2: body
	flags  byte   // of the frame being read
	size   uint64 // accumulated size
	need   int    // size bytes still to read
	body   uint64 // body bytes still to skip
	msg    int64  // data bytes of the current message
	frames int    // frames of the current message
	err    error
}

func (z *zmtpLimiter) scan(b []byte) error {
	for len(b) > 0 && z.err == nil {
		if z.greet < zmtpGreetingBytes {
			k := min(len(b), zmtpGreetingBytes-z.greet)
			z.greet += k
			b = b[k:]
			continue
		}
		switch z.state {
		case 0:
			z.flags, b = b[0], b[1:]
			z.size, z.need, z.state = 0, 1, 1
			if z.flags&0x02 != 0 {
				z.need = 8
			}
		case 1:
			z.size = z.size<<8 | uint64(b[0])
			b = b[1:]
			if z.need--; z.need == 0 {
				z.header()
				z.body, z.state = z.size, 2
				if z.body == 0 {
					z.state = 0
				}
			}
		case 2:
			k := uint64(len(b))
			if k > z.body {
				k = z.body
			}
			z.body -= k
			b = b[k:]
			if z.body == 0 {
				z.state = 0
			}
		}
	}
	return z.err
}

// header checks a complete frame header.
func (z *zmtpLimiter) header() {
	if z.flags&0x04 != 0 { // command (READY, ERROR, ...)
		if z.size > maxCommandFrameBytes {
			z.err = fmt.Errorf("%w: %d-byte command frame (cap %d)", ErrMessageTooLarge, z.size, maxCommandFrameBytes)
		}
		return
	}
	z.frames++
	if z.size > uint64(z.max) || z.msg+int64(z.size) > z.max {
		z.err = fmt.Errorf("%w: %d-byte frame in a message of %d bytes so far (cap %d)", ErrMessageTooLarge, z.size, z.msg, z.max)
		return
	}
	if z.frames > maxFramesPerMessage {
		z.err = fmt.Errorf("%w: more than %d frames", ErrMessageTooLarge, maxFramesPerMessage)
		return
	}
	z.msg += int64(z.size)
	if z.flags&0x01 == 0 { // last frame of the message
		z.msg, z.frames = 0, 0
	}
}
