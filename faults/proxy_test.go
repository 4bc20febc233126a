package faults_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/testinfra"
)

// tcpProxy forwards a fixed 127.0.0.1 port to a target. down makes the target unreachable (new
// connections are refused, open ones cut), as when the server behind it dies; up serves again on the
// same port.
type tcpProxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
}

func newTCPProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{target: target, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	go p.accept(ln)
	t.Cleanup(p.down)
	return p
}

// up listens again on the proxy's port.
func (p *tcpProxy) up(t testing.TB) {
	t.Helper()
	var ln net.Listener
	testinfra.EventuallyNoError(t, 10*time.Second, func() error {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		if err != nil {
			return err
		}
		return nil
	}, "the proxy port to be free again")
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go p.accept(ln)
}

// down closes the listener and every open connection.
func (p *tcpProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *tcpProxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *tcpProxy) serve(c net.Conn) {
	u, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // went down meanwhile
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	wg.Go(func() { pipe(u, c) })
	wg.Go(func() { pipe(c, u) })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}
