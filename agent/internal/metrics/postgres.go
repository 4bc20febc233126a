package metrics

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
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

	"github.com/configsync/configsync/libs/agentconfig"
)

// postgresCheck opens a PostgreSQL session with the startup-message handshake (trust, cleartext, MD5 or
// SCRAM-SHA-256 authentication), waits for ReadyForQuery and terminates. It proves the server accepts
// this collector's credentials without pulling a driver into the agent.
type postgresCheck struct {
	name, addr, user, password, database string
}

func newPostgresCheck(s agentconfig.Collector) (Collector, error) {
	addr, err := hostPort(s, 5432)
	if err != nil {
		return nil, err
	}
	c := &postgresCheck{name: s.Name, addr: addr, user: s.Username, password: s.Password, database: s.Database}
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
	version, err := c.handshake(ctx)
	var extra map[string]string
	if version != "" {
		extra = map[string]string{"server_version": version}
	}
	return checkSamples("postgres", c.name, err == nil, time.Since(start), extra), err
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

func (c *postgresCheck) handshake(ctx context.Context) (string, error) {
	nc, err := dial(ctx, c.addr)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	p := &pgConn{Conn: nc, r: bufio.NewReader(nc)}

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
