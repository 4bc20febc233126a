package metrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/httpserver"
)

// Config is the metrics listener's configuration.
type Config struct {
	// Addr is where /metrics is served, never on a service's public port; empty serves nothing (the
	// deploy manifests set ":9090").
	Addr string `env:"METRICS_ADDR"`
}

// Listener serves a registry's /metrics on its own address.
type Listener struct {
	addr string
	log  *zap.Logger
	srv  *http.Server

	mu   sync.Mutex
	ln   net.Listener
	done <-chan struct{}
}

// NewListener returns a listener for m on addr; it listens only on Start.
func NewListener(addr string, m *Metrics, log *zap.Logger) *Listener {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	return &Listener{addr: addr, log: log.Named("metrics"), srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(log.Named("metrics.stdlib")),
	}}
}

// Start listens on the address and serves in the background.
func (l *Listener) Start() error {
	ln, done, err := httpserver.ServeInBackground(l.srv, l.addr, l.log, "metrics listening", "metrics listener stopped")
	if err != nil {
		return fmt.Errorf("metrics: listen %s: %w", l.addr, err)
	}
	l.mu.Lock()
	l.ln, l.done = ln, done
	l.mu.Unlock()
	return nil
}

// Addr is the bound address once Start returned (useful with ":0"), else the configured one.
func (l *Listener) Addr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		return l.ln.Addr().String()
	}
	return l.addr
}

// URL is the scrape URL (http://host:port/metrics) once Start returned; an unspecified host is shown as
// 127.0.0.1.
func (l *Listener) URL() string {
	host, port, err := net.SplitHostPort(l.Addr())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/metrics"
}

// Shutdown stops the listener, waiting for scrapes in progress until ctx is done.
func (l *Listener) Shutdown(ctx context.Context) error {
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	if done == nil {
		return nil
	}
	err := l.srv.Shutdown(ctx)
	if err != nil {
		_ = l.srv.Close()
	}
	<-done
	if err != nil {
		return fmt.Errorf("metrics: shutdown: %w", err)
	}
	return nil
}
