package testinfra

import (
	"net"
	"testing"
)

// FreeAddr never returns one port twice in a process, and what it returns can be listened on.
func TestFreeAddrNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		addr := FreeAddr(t)
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
	}
	addr := FreeAddr(t)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	l.Close()
	if port := FreePort(t); seen[(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}).String()] || port == 0 {
		t.Fatalf("FreePort returned %d, handed out before", port)
	}
}
