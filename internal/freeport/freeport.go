// Package freeport hands tests loopback TCP ports nothing listens on, for
// servers a test starts later (a worker that comes up after the proxy, a
// ZeroMQ endpoint) or never (a worker that is down).
package freeport

import (
	"net"
	"strconv"
	"sync"
	"testing"
)

// handedOut is every port Port has returned in this process.
var handedOut = struct {
	sync.Mutex // guards ports
	ports      map[int]bool
}{ports: map[int]bool{}}

// Port returns a loopback TCP port that was free a moment ago and that it
// has not returned before in this process. The OS may give a closed port
// out again, and a port handed out earlier may be free again (its server
// not started yet, or stopped): without the second rule a proxy under
// test was once handed its own worker's port and read its own /metrics.
func Port(tb testing.TB) int {
	tb.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
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

// Addr is Port as a host:port address.
func Addr(tb testing.TB) string {
	tb.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(tb)))
}
