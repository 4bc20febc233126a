package tlsgen_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/natsauth/tlsgen"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// handshake runs a TLS handshake between a server using f's certificate (and, when clientCA is set,
// requiring a client certificate signed by it) and a client trusting f's CA for serverName.
func handshake(t *testing.T, f tlsgen.Files, serverName string, clientCert *tls.Certificate) error {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA file holds no certificate")
	}
	// Loopback TCP, not net.Pipe: a refused handshake writes an alert while the peer is still writing.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	srvCfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	if clientCert != nil {
		srvCfg.ClientAuth, srvCfg.ClientCAs = tls.RequireAndVerifyClientCert, pool
	}
	srv := tls.Server(sc, srvCfg)
	done := make(chan error, 1)
	go func() { done <- srv.Handshake(); sc.Close() }()
	cliCfg := &tls.Config{RootCAs: pool, ServerName: serverName}
	if clientCert != nil {
		cliCfg.Certificates = []tls.Certificate{*clientCert}
	}
	cli := tls.Client(cc, cliCfg)
	err = cli.Handshake()
	if err == nil {
		// TLS 1.3: the server's verdict on a client certificate arrives after the client's handshake.
		return <-done
	}
	cc.Close()
	<-done
	return err
}

func TestEnsureCreatesThenReuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	f, err := tlsgen.Ensure(dir, "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, f, "127.0.0.1", nil); err != nil {
		t.Fatalf("handshake for 127.0.0.1: %v", err)
	}
	if err := handshake(t, f, "elsewhere.example", nil); err == nil {
		t.Fatal("the certificate verified for a host it was not issued for")
	}
	if st, err := os.Stat(f.ServerKey); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("server key mode %v, %v", st.Mode(), err)
	}
	ca1, _ := os.ReadFile(f.CA)
	cert1, _ := os.ReadFile(f.ServerCert)

	// A second start reuses both.
	if _, err := tlsgen.Ensure(dir, "localhost", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(f.CA)
	cert2, _ := os.ReadFile(f.ServerCert)
	if !bytes.Equal(ca1, ca2) || !bytes.Equal(cert1, cert2) {
		t.Fatal("Ensure replaced valid files")
	}
	// A new host: a new server certificate from the same CA.
	f3, err := tlsgen.Ensure(dir, "localhost", "127.0.0.1", "nats.internal")
	if err != nil {
		t.Fatal(err)
	}
	ca3, _ := os.ReadFile(f.CA)
	cert3, _ := os.ReadFile(f.ServerCert)
	if !bytes.Equal(ca1, ca3) || bytes.Equal(cert1, cert3) {
		t.Fatal("a new host should re-issue the server certificate and keep the CA")
	}
	if err := handshake(t, f3, "nats.internal", nil); err != nil {
		t.Fatalf("handshake for the new host: %v", err)
	}
}

func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	f, err := tlsgen.Ensure(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := tlsgen.LoadAuthority(dir)
	if err != nil {
		t.Fatal(err)
	}
	cc := clientCert(t, ca, dir, "agent")
	if err := handshake(t, f, "127.0.0.1", &cc); err != nil {
		t.Fatalf("client certificate refused: %v", err)
	}
	other, err := tlsgen.NewAuthority("someone else")
	if err != nil {
		t.Fatal(err)
	}
	intruder := clientCert(t, other, t.TempDir(), "intruder")
	if err := handshake(t, f, "127.0.0.1", &intruder); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}
}

// clientCert has ca write a client certificate for name into dir and loads it back.
func clientCert(t *testing.T, ca *tlsgen.Authority, dir, name string) tls.Certificate {
	t.Helper()
	certFile, keyFile, err := ca.WriteClientCert(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
