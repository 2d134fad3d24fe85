// Package freeport hands tests loopback TCP ports nothing listens on, for
// servers a test starts later (a worker that comes up after the proxy, a
// ZeroMQ endpoint) or never (a worker that is down).
package freeport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// handedOut is every port Port has returned in this process.
var handedOut = struct {
	sync.Mutex // guards ports
	ports      map[int]bool
}{ports: map[int]bool{}}

// lowest is the lowest port Port hands out.
const lowest = 10_000

// Port returns a loopback TCP port that was free a moment ago and that it
// has not returned before in this process. The OS may give a closed port
// out again, and a port handed out earlier may be free again (its server
// not started yet, or stopped): without the second rule a proxy under
// test was once handed its own worker's port and read its own /metrics.
//
// Ports come from below the kernel's ephemeral range where it is known
// (Linux): a port from that range, handed out for a server a test starts
// seconds later, was taken meanwhile by the local end of some outgoing
// connection ("address already in use" for a mock worker under
// -cpu 1 -count 3). Elsewhere the kernel picks one.
func Port(tb testing.TB) int {
	tb.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if lo, ok := ephemeralLow(); ok && lo-lowest >= 1_000 {
		for range 1_000 {
			port := lowest + rand.IntN(lo-lowest)
			if handedOut.ports[port] || !free(port) {
				continue
			}
			handedOut.ports[port] = true
			return port
		}
	}
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("freeport: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
}

// free reports whether a listener could bind port on loopback just now.
func free(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// ephemeralLow is the lowest port of the kernel's ephemeral range (Linux's
// net.ipv4.ip_local_port_range), from which it picks the local ports of
// outgoing connections and of listeners on port 0.
func ephemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	lo, err := strconv.Atoi(f[0])
	return lo, err == nil && lo > 0
}

// Addr is Port as a host:port address.
func Addr(tb testing.TB) string {
	tb.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(tb)))
}
