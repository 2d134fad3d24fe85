package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Ports are never handed out twice, and each could be listened on.
func TestPortsAreDistinctAndFree(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := Port(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	addr := Addr(t)
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("Addr %q: %v", addr, err)
	}
	n, _ := strconv.Atoi(port)
	if seen[n] {
		t.Fatalf("Addr reused port %d", n)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the address is not free: %v", err)
	}
	_ = l.Close()
}
