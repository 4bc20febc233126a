package metrics

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// selfSignedCert makes a certificate for "localhost" only (no IP address), so verify-full against
// 127.0.0.1 fails on the name and against localhost succeeds once the certificate is trusted.
func selfSignedCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "configsync test postgres"},
		DNSNames:              []string{"localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// fakePGSession is what the fake server saw of one completed startup.
type fakePGSession struct {
	tls      bool
	user     string
	password string
}

// fakePG speaks just enough of the server side: it answers an SSLRequest with answer ('S' then a TLS
// handshake, 'N', or 'E' and a hang-up), asks for a cleartext password, and then sends AuthenticationOk,
// a server_version parameter and ReadyForQuery.
type fakePG struct {
	l      net.Listener
	answer byte
	cert   tls.Certificate
	wg     sync.WaitGroup

	mu          sync.Mutex
	sslRequests int
	sessions    []fakePGSession
}

func startFakePG(t *testing.T, answer byte, cert tls.Certificate) *fakePG {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePG{l: l, answer: answer, cert: cert}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				f.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); f.wg.Wait() })
	return f
}

func (f *fakePG) port() string {
	_, port, _ := net.SplitHostPort(f.l.Addr().String())
	return port
}

func (f *fakePG) counts() (sslRequests int, sessions []fakePGSession) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sslRequests, append([]fakePGSession(nil), f.sessions...)
}

// readPacket reads an untyped startup-phase packet (int32 length including itself, then the body).
func readPacket(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 8 || n > 10000 {
		return nil, errors.New("bad packet length")
	}
	body := make([]byte, n-4)
	_, err := io.ReadFull(r, body)
	return body, err
}

func (f *fakePG) serve(nc net.Conn) {
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	var conn net.Conn = nc
	encrypted := false
	body, err := readPacket(conn)
	if err != nil {
		return
	}
	if binary.BigEndian.Uint32(body) == sslRequestCode {
		f.mu.Lock()
		f.sslRequests++
		f.mu.Unlock()
		switch f.answer {
		case 'S':
			_, _ = nc.Write([]byte{'S'})
			tc := tls.Server(nc, &tls.Config{Certificates: []tls.Certificate{f.cert}, MinVersion: tls.VersionTLS12})
			if err := tc.Handshake(); err != nil {
				return
			}
			conn, encrypted = tc, true
		case 'N':
			_, _ = nc.Write([]byte{'N'})
		case 'E':
			p := &pgConn{Conn: nc}
			_ = p.send('E', []byte("SFATAL\x00C0A000\x00Munsupported frontend protocol 1234.5679\x00\x00"))
			return
		}
		if body, err = readPacket(conn); err != nil {
			return
		}
	}
	if binary.BigEndian.Uint32(body) != 196608 {
		return
	}
	params := strings.Split(string(body[4:]), "\x00")
	s := fakePGSession{tls: encrypted}
	for i := 0; i+1 < len(params); i += 2 {
		if params[i] == "user" {
			s.user = params[i+1]
		}
	}
	p := &pgConn{Conn: conn, r: bufio.NewReader(conn)}
	_ = p.send('R', binary.BigEndian.AppendUint32(nil, 3)) // AuthenticationCleartextPassword
	typ, pw, err := p.recv()
	if err != nil || typ != 'p' {
		return
	}
	s.password = strings.TrimSuffix(string(pw), "\x00")
	f.mu.Lock()
	f.sessions = append(f.sessions, s)
	f.mu.Unlock()
	_ = p.send('R', binary.BigEndian.AppendUint32(nil, 0))
	_ = p.send('S', []byte("server_version\x0016.0-fake\x00"))
	_ = p.send('Z', []byte{'I'})
	_, _, _ = p.recv() // Terminate
}

const fakePassword = "pg-s3cret-never-in-errors"

func pgCheck(t *testing.T, host, port, sslmode string, roots *x509.CertPool) *postgresCheck {
	t.Helper()
	cfg := `{"type":"postgres","name":"pg","host":"` + host + `","port":` + port + `,"username":"monitor","password":"` + fakePassword + `"`
	if sslmode != "" {
		cfg += `,"sslmode":"` + sslmode + `"`
	}
	c, err := newPostgresCheck(collector(cfg+`}`), testPol)
	if err != nil {
		t.Fatal(err)
	}
	pc := c.(*postgresCheck)
	pc.rootCAs = roots
	return pc
}

func TestPostgresSSLModesAgainstFakeServer(t *testing.T) {
	cert, roots := selfSignedCert(t)
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	for _, tt := range []struct {
		name      string
		answer    byte   // the fake server's reply to an SSLRequest
		sslmode   string // "" means absent
		host      string
		roots     *x509.CertPool
		wantTLS   bool   // on success: the session ran over TLS
		wantSSLRQ int    // SSLRequests the server saw
		wantErr   string // substring of the error; "" means success
		errAs     any    // a target the error must match with errors.As
	}{
		{name: "disable never asks", answer: 'S', sslmode: "disable", host: "127.0.0.1", wantSSLRQ: 0},
		{name: "absent is prefer and uses TLS", answer: 'S', host: "127.0.0.1", wantTLS: true, wantSSLRQ: 1},
		{name: "prefer uses TLS when offered", answer: 'S', sslmode: "prefer", host: "127.0.0.1", wantTLS: true, wantSSLRQ: 1},
		{name: "prefer falls back on N", answer: 'N', sslmode: "prefer", host: "127.0.0.1", wantSSLRQ: 1},
		{name: "prefer redials on E", answer: 'E', sslmode: "prefer", host: "127.0.0.1", wantSSLRQ: 1},
		{name: "require skips verification", answer: 'S', sslmode: "require", host: "127.0.0.1", wantTLS: true, wantSSLRQ: 1},
		{name: "require fails on N", answer: 'N', sslmode: "require", host: "127.0.0.1", wantSSLRQ: 1,
			wantErr: "server does not support SSL, but sslmode is require"},
		{name: "require fails on E", answer: 'E', sslmode: "require", host: "127.0.0.1", wantSSLRQ: 1,
			wantErr: "server rejected the SSL request, but sslmode is require"},
		{name: "verify-full fails on N", answer: 'N', sslmode: "verify-full", host: "localhost", roots: roots, wantSSLRQ: 1,
			wantErr: "server does not support SSL, but sslmode is verify-full"},
		{name: "verify-full rejects an unknown authority", answer: 'S', sslmode: "verify-full", host: "localhost", wantSSLRQ: 1,
			wantErr: "TLS handshake", errAs: &unknownAuthority},
		{name: "verify-full checks the host name", answer: 'S', sslmode: "verify-full", host: "127.0.0.1", roots: roots, wantSSLRQ: 1,
			wantErr: "TLS handshake", errAs: &hostname},
		{name: "verify-full accepts a trusted certificate", answer: 'S', sslmode: "verify-full", host: "localhost", roots: roots,
			wantTLS: true, wantSSLRQ: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := startFakePG(t, tt.answer, cert)
			c := pgCheck(t, tt.host, srv.port(), tt.sslmode, tt.roots)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			version, encrypted, err := c.handshake(ctx)
			sslRequests, sessions := srv.counts()
			if sslRequests != tt.wantSSLRQ {
				t.Errorf("server saw %d SSL requests, want %d", sslRequests, tt.wantSSLRQ)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), fakePassword) {
					t.Fatalf("error leaks the password: %v", err)
				}
				if tt.errAs != nil && !errors.As(err, tt.errAs) {
					t.Fatalf("err = %v (%T), want %T", err, errors.Unwrap(err), tt.errAs)
				}
				if len(sessions) != 0 {
					t.Fatalf("the password reached the server: %+v", sessions)
				}
				return
			}
			if err != nil || version != "16.0-fake" {
				t.Fatalf("handshake: %q, %v", version, err)
			}
			if encrypted != tt.wantTLS {
				t.Errorf("check reports encrypted=%v, want %v", encrypted, tt.wantTLS)
			}
			if len(sessions) != 1 || sessions[0].tls != tt.wantTLS || sessions[0].user != "monitor" || sessions[0].password != fakePassword {
				t.Fatalf("server sessions %+v, want one with tls=%v", sessions, tt.wantTLS)
			}
		})
	}
}

// Collect reports a failed TLS negotiation as a down check, like any other failure.
func TestPostgresRequireDownWithoutTLS(t *testing.T) {
	cert, _ := selfSignedCert(t)
	srv := startFakePG(t, 'N', cert)
	c := pgCheck(t, "127.0.0.1", srv.port(), "require", nil)
	s, err := c.Collect(context.Background())
	if err == nil || s[0].Name != "postgres.up" || s[0].Value != 0 {
		t.Fatalf("samples %+v, err %v", s, err)
	}
}

func TestPostgresUnknownSSLModeRefused(t *testing.T) {
	_, err := newPostgresCheck(collector(`{"type":"postgres","name":"pg","host":"127.0.0.1","sslmode":"verify-ca"}`), testPol)
	if err == nil || !strings.Contains(err.Error(), "sslmode") {
		t.Fatalf("err = %v", err)
	}
}

// localServerSSL asks the local PostgreSQL whether it serves TLS, the way any client learns it: an
// SSLRequest answered 'S' (yes) or 'N' (no). It needs no client tools.
func localServerSSL(t *testing.T) bool {
	t.Helper()
	conn, err := net.DialTimeout("tcp", "127.0.0.1:5432", 5*time.Second)
	if err != nil {
		t.Fatalf("PostgreSQL on 127.0.0.1:5432: %v", err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	req := make([]byte, 8)
	binary.BigEndian.PutUint32(req[0:4], 8)
	binary.BigEndian.PutUint32(req[4:8], 80877103)
	if _, err := conn.Write(req); err != nil {
		t.Fatal(err)
	}
	answer := make([]byte, 1)
	if _, err := io.ReadFull(conn, answer); err != nil {
		t.Fatalf("SSLRequest answer: %v", err)
	}
	switch answer[0] {
	case 'S':
		return true
	case 'N':
		return false
	default:
		t.Fatalf("SSLRequest answered %q", answer[0])
	}
	return false
}

// Against the real local PostgreSQL: whichever way it is set up, each sslmode does what libpq would.
func TestPostgresSSLModesAgainstLocalServer(t *testing.T) {
	sslOn := localServerSSL(t)
	run := func(sslmode string) (bool, error) {
		c, err := newPostgresCheck(collector(`{"type":"postgres","name":"pg","host":"127.0.0.1","port":5432,"username":"postgres","database":"test","sslmode":"`+sslmode+`"}`), testPol)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		version, encrypted, err := c.(*postgresCheck).handshake(ctx)
		if err == nil && version == "" {
			t.Errorf("%s: no server_version", sslmode)
		}
		return encrypted, err
	}
	if encrypted, err := run("disable"); err != nil || encrypted {
		t.Errorf("disable: encrypted=%v, %v", encrypted, err)
	}
	if encrypted, err := run("prefer"); err != nil || encrypted != sslOn {
		t.Errorf("prefer with ssl=%v: encrypted=%v, %v", sslOn, encrypted, err)
	}
	encrypted, err := run("require")
	if sslOn {
		if err != nil || !encrypted {
			t.Errorf("require with ssl on: encrypted=%v, %v", encrypted, err)
		}
	} else if err == nil || !strings.Contains(err.Error(), "server does not support SSL") {
		t.Errorf("require with ssl off: %v", err)
	}
}
