package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/natsauth/tlsgen"
	"github.com/configsync/configsync/libs/testinfra"
)

// TestNATSRunsInItsOwnProcess: devstack's nats-server is a child process that serves TLS on the address
// given, records its pid for tools that account its cost, and exits by itself once devstack closes its
// stdin. It collects at the GC target percent devstack gives it.
func TestNATSRunsInItsOwnProcess(t *testing.T) {
	dataDir := t.TempDir()
	if _, err := loadOrCreateAuthority(filepath.Join(dataDir, "nats-authority.json"), zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	tlsFiles, err := tlsgen.Ensure(filepath.Join(dataDir, "tls"), "127.0.0.1", "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	addr := testinfra.FreeAddr(t)
	p, err := startNATSProcess(addr, dataDir, 250, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = p.stop(10 * time.Second)
		}
	}()
	if p.pid == os.Getpid() {
		t.Fatalf("nats-server pid %d is devstack's own", p.pid)
	}
	if p.gcPercent != 250 {
		t.Errorf("nats-server process runs at GOGC %d, want the 250 it was given", p.gcPercent)
	}
	b, err := os.ReadFile(filepath.Join(dataDir, NATSPIDFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(p.pid) {
		t.Errorf("%s holds %q, want the child's pid %d", NATSPIDFile, got, p.pid)
	}

	// The server greets with INFO, then speaks TLS only, with a certificate of devstack's CA.
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	info, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info, "INFO ") || !strings.Contains(info, `"server_name":"configsync-devstack"`) || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("greeting %q: want devstack's server, TLS required", info)
	}
	caPEM, err := os.ReadFile(tlsFiles.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	tc := tls.Client(conn, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake with devstack's CA: %v", err)
	}

	stopped = true
	if err := p.stop(30 * time.Second); err != nil {
		t.Fatalf("nats-server process after its stdin closed: %v (want a clean exit)", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after the nats-server process stopped", addr)
	}
}
