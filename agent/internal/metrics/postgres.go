package metrics

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/libs/agentconfig"
)

// postgresCheck opens a PostgreSQL session with the startup-message handshake (trust, cleartext, MD5 or
// SCRAM-SHA-256 authentication), waits for ReadyForQuery and terminates. It proves the server accepts
// this collector's credentials without pulling a driver into the agent.
//
// TLS follows libpq's sslmode (see negotiateTLS). Over TLS, SCRAM stays plain SCRAM-SHA-256: no
// SCRAM-SHA-256-PLUS channel binding, as libpq's channel_binding=prefer does when the server offers none.
type postgresCheck struct {
	name, addr, host, user, password, database string
	sslMode                                    string
	dial                                       dialFunc
	// rootCAs verifies the server under verify-full; nil means the system roots. Only tests set it.
	rootCAs *x509.CertPool
}

func newPostgresCheck(s agentconfig.Collector, pol *policy.Policy) (Collector, error) {
	addr, err := hostPort(s, 5432)
	if err != nil {
		return nil, err
	}
	c := &postgresCheck{name: s.Name, addr: addr, host: s.Host, user: s.Username, password: s.Password,
		database: s.Database, sslMode: s.SSLMode, dial: pol.DialContext}
	switch c.sslMode {
	case "":
		c.sslMode = agentconfig.SSLModePrefer
	case agentconfig.SSLModeDisable, agentconfig.SSLModePrefer, agentconfig.SSLModeRequire, agentconfig.SSLModeVerifyFull:
	default:
		return nil, fmt.Errorf("sslmode must be one of: disable, prefer, require, verify-full")
	}
	if c.user == "" {
		c.user = "postgres"
	}
	if c.database == "" {
		c.database = c.user
	}
	return c, nil
}

func (c *postgresCheck) Name() string { return "postgres/" + c.name }

func (c *postgresCheck) Collect(ctx context.Context) ([]Sample, error) {
	start := time.Now()
	version, _, err := c.handshake(ctx)
	var extra map[string]string
	if version != "" {
		extra = map[string]string{"server_version": version}
	}
	return checkSamples("postgres", c.name, err == nil, time.Since(start), extra), err
}

// sslRequestCode is the SSLRequest message's protocol code (1234 << 16 | 5679).
const sslRequestCode = 80877103

// connect dials the server and negotiates TLS as sslmode asks. It reports whether the session is
// encrypted.
func (c *postgresCheck) connect(ctx context.Context) (net.Conn, bool, error) {
	nc, err := dial(ctx, c.dial, c.addr)
	if err != nil {
		return nil, false, err
	}
	if c.sslMode == agentconfig.SSLModeDisable {
		return nc, false, nil
	}
	conn, encrypted, err := c.negotiateTLS(ctx, nc)
	if err != nil {
		_ = nc.Close()
		return nil, false, err
	}
	if conn == nil {
		// The server refused the SSLRequest with an error and hung up (servers before 7.0 do): under
		// prefer, start over in plaintext.
		_ = nc.Close()
		nc, err = dial(ctx, c.dial, c.addr)
		return nc, false, err
	}
	return conn, encrypted, nil
}

// negotiateTLS sends an SSLRequest and, when the server answers 'S', wraps nc in TLS: prefer and require
// encrypt without verifying the certificate (libpq's meaning), verify-full checks it against rootCAs
// and the host name. A 'N' is plaintext under prefer and a failure otherwise. A nil conn with a nil
// error means "redial in plaintext".
func (c *postgresCheck) negotiateTLS(ctx context.Context, nc net.Conn) (net.Conn, bool, error) {
	var req [8]byte
	binary.BigEndian.PutUint32(req[0:], 8)
	binary.BigEndian.PutUint32(req[4:], sslRequestCode)
	if _, err := nc.Write(req[:]); err != nil {
		return nil, false, fmt.Errorf("postgres: send SSL request: %w", err)
	}
	// Exactly one byte, read unbuffered: bytes a server (or a man in the middle) pushes after 'S' must
	// not be taken as protocol messages from the encrypted session (CVE-2021-23222).
	var answer [1]byte
	if _, err := io.ReadFull(nc, answer[:]); err != nil {
		return nil, false, fmt.Errorf("postgres: read SSL response: %w", err)
	}
	switch answer[0] {
	case 'S':
	case 'N':
		if c.sslMode == agentconfig.SSLModePrefer {
			return nc, false, nil
		}
		return nil, false, fmt.Errorf("postgres: server does not support SSL, but sslmode is %s", c.sslMode)
	case 'E':
		// The message itself is unauthenticated and unencrypted: not worth reporting.
		if c.sslMode == agentconfig.SSLModePrefer {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("postgres: server rejected the SSL request, but sslmode is %s", c.sslMode)
	default:
		return nil, false, fmt.Errorf("postgres: unexpected response %q to SSL request", answer[0])
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.sslMode == agentconfig.SSLModeVerifyFull {
		cfg.ServerName = c.host
		cfg.RootCAs = c.rootCAs
	} else {
		cfg.InsecureSkipVerify = true // prefer and require encrypt only, as in libpq
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, false, fmt.Errorf("postgres: TLS handshake: %w", err)
	}
	return tc, true, nil
}

type pgConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *pgConn) send(typ byte, body []byte) error {
	buf := make([]byte, 0, 5+len(body))
	if typ != 0 {
		buf = append(buf, typ)
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(4+len(body)))
	buf = append(buf, body...)
	_, err := p.Write(buf)
	return err
}

func (p *pgConn) recv() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(p.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	if n < 4 || n > 1<<20 {
		return 0, nil, fmt.Errorf("postgres: bad message length %d", n)
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(p.r, body); err != nil {
		return 0, nil, err
	}
	return hdr[0], body, nil
}

func cstr(s string) []byte { return append([]byte(s), 0) }

// handshake runs the session and returns the server version and whether the session was encrypted.
func (c *postgresCheck) handshake(ctx context.Context) (version string, encrypted bool, err error) {
	conn, encrypted, err := c.connect(ctx)
	if err != nil {
		return "", false, err
	}
	defer conn.Close()
	version, err = c.startup(&pgConn{Conn: conn, r: bufio.NewReader(conn)})
	return version, encrypted, err
}

// startup sends the startup message, answers the authentication exchange and waits for ReadyForQuery.
func (c *postgresCheck) startup(p *pgConn) (string, error) {
	var startup []byte
	startup = binary.BigEndian.AppendUint32(startup, 196608) // protocol 3.0
	startup = append(startup, cstr("user")...)
	startup = append(startup, cstr(c.user)...)
	startup = append(startup, cstr("database")...)
	startup = append(startup, cstr(c.database)...)
	startup = append(startup, cstr("application_name")...)
	startup = append(startup, cstr("configsync-agent")...)
	startup = append(startup, 0)
	if err := p.send(0, startup); err != nil {
		return "", fmt.Errorf("postgres: send startup: %w", err)
	}

	var scram *scramClient
	version := ""
	for {
		typ, body, err := p.recv()
		if err != nil {
			return version, fmt.Errorf("postgres: %w", err)
		}
		switch typ {
		case 'E':
			return version, pgError(body)
		case 'S':
			parts := strings.SplitN(string(body), "\x00", 3)
			if len(parts) >= 2 && parts[0] == "server_version" {
				version = parts[1]
			}
		case 'Z':
			_ = p.send('X', nil)
			return version, nil
		case 'R':
			if len(body) < 4 {
				return version, errors.New("postgres: short authentication message")
			}
			code := binary.BigEndian.Uint32(body)
			rest := body[4:]
			switch code {
			case 0: // AuthenticationOk
			case 3: // cleartext
				if err := p.send('p', cstr(c.password)); err != nil {
					return version, err
				}
			case 5: // MD5
				if len(rest) < 4 {
					return version, errors.New("postgres: short md5 salt")
				}
				if err := p.send('p', cstr(md5Password(c.user, c.password, rest[:4]))); err != nil {
					return version, err
				}
			case 10: // SASL
				if !strings.Contains(string(rest), "SCRAM-SHA-256\x00") {
					return version, errors.New("postgres: server offers no SCRAM-SHA-256")
				}
				nonce := make([]byte, 18)
				_, _ = rand.Read(nonce)
				scram = newSCRAM(c.password, base64.RawStdEncoding.EncodeToString(nonce))
				first := scram.clientFirst()
				msg := append(cstr("SCRAM-SHA-256"), binary.BigEndian.AppendUint32(nil, uint32(len(first)))...)
				msg = append(msg, first...)
				if err := p.send('p', msg); err != nil {
					return version, err
				}
			case 11: // SASLContinue
				if scram == nil {
					return version, errors.New("postgres: unexpected SASL continue")
				}
				final, err := scram.clientFinal(string(rest))
				if err != nil {
					return version, err
				}
				if err := p.send('p', []byte(final)); err != nil {
					return version, err
				}
			case 12: // SASLFinal
				if scram == nil || !scram.verifyServer(string(rest)) {
					return version, errors.New("postgres: server SCRAM signature mismatch")
				}
			default:
				return version, fmt.Errorf("postgres: unsupported authentication method %d", code)
			}
		default:
			// NoticeResponse, BackendKeyData and friends: not needed for a liveness check.
		}
	}
}

func pgError(body []byte) error {
	var code, msg string
	for _, f := range strings.Split(string(body), "\x00") {
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case 'C':
			code = f[1:]
		case 'M':
			msg = f[1:]
		}
	}
	return fmt.Errorf("postgres: %s (SQLSTATE %s)", msg, code)
}

func md5Password(user, password string, salt []byte) string {
	inner := md5.Sum([]byte(password + user))
	h := md5.New()
	h.Write([]byte(hex.EncodeToString(inner[:])))
	h.Write(salt)
	return "md5" + hex.EncodeToString(h.Sum(nil))
}

// scramClient implements the client side of SCRAM-SHA-256 (RFC 5802/7677) as PostgreSQL uses it: the
// user name travels in the startup message, so the SCRAM user is empty.
type scramClient struct {
	password, nonce, user string
	firstBare, authMsg    string
	salted                []byte
}

func newSCRAM(password, nonce string) *scramClient {
	return &scramClient{password: password, nonce: nonce}
}

func (s *scramClient) clientFirst() string {
	s.firstBare = "n=" + s.user + ",r=" + s.nonce
	return "n,," + s.firstBare
}

func (s *scramClient) clientFinal(serverFirst string) (string, error) {
	var nonce, salt string
	iter := 0
	for _, kv := range strings.Split(serverFirst, ",") {
		if len(kv) < 2 || kv[1] != '=' {
			continue
		}
		switch kv[0] {
		case 'r':
			nonce = kv[2:]
		case 's':
			salt = kv[2:]
		case 'i':
			iter, _ = strconv.Atoi(kv[2:])
		}
	}
	if !strings.HasPrefix(nonce, s.nonce) || iter <= 0 {
		return "", errors.New("postgres: malformed SCRAM server-first message")
	}
	saltBytes, err := base64.StdEncoding.DecodeString(salt)
	if err != nil {
		return "", errors.New("postgres: malformed SCRAM salt")
	}
	s.salted, err = pbkdf2.Key(sha256.New, s.password, saltBytes, iter, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("postgres: scram: %w", err)
	}
	withoutProof := "c=biws,r=" + nonce
	s.authMsg = s.firstBare + "," + serverFirst + "," + withoutProof
	clientKey := hmacSum(s.salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	sig := hmacSum(stored[:], s.authMsg)
	proof := make([]byte, len(clientKey))
	for i := range clientKey {
		proof[i] = clientKey[i] ^ sig[i]
	}
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}

func (s *scramClient) verifyServer(serverFinal string) bool {
	v, ok := strings.CutPrefix(serverFinal, "v=")
	if !ok {
		return false
	}
	got, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return false
	}
	want := hmacSum(hmacSum(s.salted, "Server Key"), s.authMsg)
	return hmac.Equal(got, want)
}

func hmacSum(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}
