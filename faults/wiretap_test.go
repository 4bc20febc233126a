package faults_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/configsync/configsync/libs/natsauth/tlsgen"
)

// wireTap is a nats.CustomDialer that watches one client's NATS protocol stream: every message the
// client publishes (PUB/HPUB) and every message it receives (MSG/HMSG). The tests use it on real
// agents to count, from outside the agent, every acknowledgement it sent and every command it got,
// across reconnects, with nothing lost in a subscriber of their own that may itself be reconnecting.
type wireTap struct {
	onPublish func(subject string, payload []byte)
	onReceive func(subject string, payload []byte)
	// lose, when set, is asked about every message the client publishes. When it answers true, the
	// bytes being written are accepted and silently lost and the connection is cut right after, as
	// when the server dies before reading what sits in its socket buffer.
	lose func(subject string, payload []byte) bool
	// tls, when its CA is set, is the test server's TLS material: the server serves TLS only and the
	// tap terminates TLS (terminateTLS) to read the protocol.
	tls tlsgen.Files
}

func (w *wireTap) Dial(network, address string) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, 2*time.Second)
	if err != nil {
		return nil, err
	}
	if w.tls.CA != "" {
		return w.terminateTLS(c)
	}
	return w.tapped(c), nil
}

func (w *wireTap) tapped(c net.Conn) *tappedConn {
	tc := &tappedConn{Conn: c, in: &protoParser{fn: w.onReceive}}
	tc.out = &protoParser{fn: func(subject string, payload []byte) {
		if w.lose != nil && w.lose(subject, payload) {
			tc.losing = true
		}
		if w.onPublish != nil {
			w.onPublish(subject, payload)
		}
	}}
	return tc
}

// terminateTLS puts the tap above TLS, for a server that serves TLS only: the client gets the server's
// INFO line as is, then completes its TLS handshake with the tap (which presents the test server's own
// certificate, so the client verifies it against the same CA); the tap opens its own TLS connection to
// the server and relays the plaintext protocol between the two through the parser, so it sees every
// message as without TLS. raw is the TCP connection to the server.
func (w *wireTap) terminateTLS(raw net.Conn) (net.Conn, error) {
	cert, err := tls.LoadX509KeyPair(w.tls.ServerCert, w.tls.ServerKey)
	if err != nil {
		raw.Close()
		return nil, err
	}
	caPEM, err := os.ReadFile(w.tls.CA)
	if err != nil {
		raw.Close()
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(raw)
	info, err := br.ReadString('\n')
	if err != nil {
		raw.Close()
		return nil, err
	}
	_ = raw.SetReadDeadline(time.Time{})
	host, _, _ := net.SplitHostPort(raw.RemoteAddr().String())
	upstream := tls.Client(&bufferedConn{Conn: raw, r: br}, &tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12})
	clientSide, tapSide := net.Pipe()
	go func() {
		defer clientSide.Close()
		defer upstream.Close()
		if _, err := tapSide.Write([]byte(info)); err != nil {
			return
		}
		down := tls.Server(tapSide, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		defer down.Close()
		upErr := make(chan error, 1)
		go func() { upErr <- upstream.Handshake() }()
		if down.Handshake() != nil || <-upErr != nil {
			return
		}
		tc := w.tapped(upstream)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = io.Copy(down, readerOf(tc)) // server -> tap (parsed as received) -> client
			down.Close()
		}()
		_, _ = io.Copy(writerOf(tc), down) // client -> tap (parsed as published) -> server
		upstream.Close()
		<-done
	}()
	return clientSide, nil
}

// bufferedConn reads first what a bufio.Reader already took from the connection.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// readerOf and writerOf hide tappedConn's other methods from io.Copy (no ReaderFrom/WriterTo shortcuts).
func readerOf(c *tappedConn) io.Reader { return readerFunc(c.Read) }
func writerOf(c *tappedConn) io.Writer { return writerFunc(c.Write) }

type tappedConn struct {
	net.Conn
	out, in *protoParser
	losing  bool // only touched by the writer, under the client's write lock
}

func (c *tappedConn) Write(p []byte) (int, error) {
	if c.losing {
		return 0, net.ErrClosed
	}
	c.out.feed(p)
	if c.losing {
		go c.Conn.Close()
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *tappedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.feed(p[:n])
	return n, err
}

// protoParser splits one direction of the NATS client protocol into messages. Control lines without a
// payload (CONNECT, INFO, PING, SUB, ...) are skipped.
type protoParser struct {
	fn func(subject string, payload []byte)

	mu      sync.Mutex
	buf     []byte
	need    int // bytes of payload plus CRLF still expected; 0 while reading a control line
	subject string
	hdr     int
}

var crlf = []byte("\r\n")

func (p *protoParser) feed(b []byte) {
	if len(b) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		if p.need > 0 {
			if len(p.buf) < p.need {
				return
			}
			payload := p.buf[:p.need-2]
			if p.fn != nil && p.hdr <= len(payload) {
				p.fn(p.subject, bytes.Clone(payload[p.hdr:]))
			}
			p.buf = p.buf[p.need:]
			p.need = 0
			continue
		}
		i := bytes.Index(p.buf, crlf)
		if i < 0 {
			return
		}
		fields := strings.Fields(string(p.buf[:i]))
		p.buf = p.buf[i+2:]
		if len(fields) < 3 {
			continue
		}
		atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
		last := atoi(fields[len(fields)-1])
		switch strings.ToUpper(fields[0]) {
		case "PUB", "MSG": // PUB subject [reply] size | MSG subject sid [reply] size
			p.subject, p.hdr, p.need = fields[1], 0, last+2
		case "HPUB", "HMSG": // ... header-size total-size
			if len(fields) < 4 {
				continue
			}
			p.subject, p.hdr, p.need = fields[1], atoi(fields[len(fields)-2]), last+2
		}
	}
}
