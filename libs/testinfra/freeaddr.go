package testinfra

import (
	"net"
	"sync"
	"testing"
)

// handedOut holds every port FreeAddr returned in this test process. A port closed a moment ago may be
// the kernel's next answer to a bind on port 0, and two processes of one stack given the same port race
// for it: the loser exits with "address already in use" (CI saw an e2e stack's resolver and credential
// get one metrics port).
var handedOut sync.Map

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago and that no earlier call in
// this test process returned.
func FreeAddr(t testing.TB) string {
	return (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: FreePort(t)}).String()
}

// FreePort is FreeAddr's port.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testinfra: free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, dup := handedOut.LoadOrStore(port, true); !dup {
			return port
		}
	}
	t.Fatal("testinfra: free port: 100 ports in a row were handed out before")
	return 0
}
