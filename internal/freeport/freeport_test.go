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

// TestPortsBelowEphemeral: where the kernel's ephemeral range is known,
// ports come from below it, where no outgoing connection takes them.
func TestPortsBelowEphemeral(t *testing.T) {
	lo, ok := ephemeralLow()
	if !ok || lo-lowest < 1_000 {
		t.Skipf("no usable ephemeral range here (%d, %v)", lo, ok)
	}
	for range 100 {
		if p := Port(t); p < lowest || p >= lo {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, lo)
		}
	}
}
