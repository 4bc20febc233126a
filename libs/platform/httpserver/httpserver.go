// Package httpserver is ConfigSync's HTTP server: a gorilla/mux router that services add routes to,
// liveness (/healthz) and readiness (/readyz) endpoints, hardened timeouts and graceful shutdown.
package httpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/health"
)

// Config is the HTTP server configuration.
type Config struct {
	Addr string `env:"HTTP_ADDR" default:":8080"`
	// ReadHeaderTimeout bounds slow-loris clients.
	ReadHeaderTimeout time.Duration `env:"HTTP_READ_HEADER_TIMEOUT" default:"5s"`
	ReadTimeout       time.Duration `env:"HTTP_READ_TIMEOUT" default:"30s"`
	WriteTimeout      time.Duration `env:"HTTP_WRITE_TIMEOUT" default:"60s"`
	IdleTimeout       time.Duration `env:"HTTP_IDLE_TIMEOUT" default:"120s"`
	MaxHeaderBytes    int           `env:"HTTP_MAX_HEADER_BYTES" default:"65536"`
	// ShutdownTimeout bounds the drain of in-flight requests at stop.
	ShutdownTimeout time.Duration `env:"HTTP_SHUTDOWN_TIMEOUT" default:"20s"`
	// ReadinessTimeout bounds each readiness check run by /readyz.
	ReadinessTimeout time.Duration `env:"HTTP_READINESS_TIMEOUT" default:"2s"`
}

// Server serves a mux.Router with /healthz and /readyz already routed.
type Server struct {
	cfg    Config
	log    *zap.Logger
	router *mux.Router
	checks []health.Check
	srv    *http.Server

	mu       sync.Mutex
	listener net.Listener
	served   <-chan struct{} // closed when Serve returns
	draining atomic.Bool
}

// New builds a server; it listens only on Start. Zero timeouts in cfg take the documented defaults.
func New(cfg Config, log *zap.Logger, checks []health.Check) *Server {
	cfg = withDefaults(cfg)
	s := &Server{
		cfg:    cfg,
		log:    log.Named("http"),
		router: mux.NewRouter(),
		checks: checks,
	}
	s.router.Use(s.recoverPanics)
	s.router.HandleFunc("/healthz", s.healthz).Methods(http.MethodGet, http.MethodHead)
	s.router.HandleFunc("/readyz", s.readyz).Methods(http.MethodGet, http.MethodHead)
	s.srv = &http.Server{
		Addr:              cfg.Addr,
		Handler:           s.router,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(s.log.Named("stdlib")),
	}
	return s
}

func withDefaults(cfg Config) Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if cfg.Addr == "" {
		cfg.Addr = ":8080"
	}
	def(&cfg.ReadHeaderTimeout, 5*time.Second)
	def(&cfg.ReadTimeout, 30*time.Second)
	def(&cfg.WriteTimeout, 60*time.Second)
	def(&cfg.IdleTimeout, 120*time.Second)
	def(&cfg.ShutdownTimeout, 20*time.Second)
	def(&cfg.ReadinessTimeout, 2*time.Second)
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 64 << 10
	}
	return cfg
}

// Router is the router services add their routes to. Put service middleware (authentication, body
// limits) on a subrouter, e.g. Router().PathPrefix("/api/v1").Subrouter().Use(auth): middleware added
// with Router().Use would also wrap /healthz and /readyz, which probes call without credentials.
func (s *Server) Router() *mux.Router { return s.router }

// Handler is the server's full handler (routes, /healthz, /readyz), e.g. for httptest.
func (s *Server) Handler() http.Handler { return s.router }

// Start listens on cfg.Addr and serves in the background. It returns once the listener is bound, so a
// port conflict fails start-up.
func (s *Server) Start() error {
	ln, served, err := ServeInBackground(s.srv, s.cfg.Addr, s.log, "http server listening", "http server stopped")
	if err != nil {
		return fmt.Errorf("httpserver: listen %s: %w", s.cfg.Addr, err)
	}
	s.mu.Lock()
	s.listener, s.served = ln, served
	s.mu.Unlock()
	return nil
}

// ServeInBackground listens on addr and serves srv there in a goroutine, logging listening with the
// bound address; it returns once the listener is bound, so a port conflict fails the caller's start-up.
// served is closed when srv stops serving (Shutdown or Close); any other end is logged as stopped.
func ServeInBackground(srv *http.Server, addr string, log *zap.Logger, listening, stopped string) (ln net.Listener, served <-chan struct{}, err error) {
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	log.Info(listening, zap.String("addr", ln.Addr().String()))
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(stopped, zap.Error(err))
		}
	}()
	return ln, done, nil
}

// Addr is the bound address once Start returned (useful with ":0"), else the configured one.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return s.listener.Addr().String()
	}
	return s.cfg.Addr
}

// Shutdown stops accepting connections, reports not-ready, and waits for in-flight requests to finish,
// at most cfg.ShutdownTimeout (or until ctx is done); connections still open then are closed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.log.Warn("http graceful shutdown incomplete, closing connections", zap.Error(err))
		_ = s.srv.Close()
	}
	s.mu.Lock()
	served := s.served
	s.mu.Unlock()
	if served != nil {
		<-served
	}
	if err != nil {
		return fmt.Errorf("httpserver: shutdown: %w", err)
	}
	s.log.Info("http server stopped")
	return nil
}

// healthz is liveness: the process is up and serving.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

type readiness struct {
	Status string          `json:"status"`
	Checks []health.Result `json:"checks"`
}

// readyz runs every readiness check; 200 only if all pass and the server is not shutting down.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	results, ok := health.Run(r.Context(), s.checks, s.cfg.ReadinessTimeout)
	if results == nil {
		results = []health.Result{}
	}
	body := readiness{Status: "ok", Checks: results}
	status := http.StatusOK
	switch {
	case s.draining.Load():
		body.Status, status = "shutting_down", http.StatusServiceUnavailable
	case !ok:
		body.Status, status = "unavailable", http.StatusServiceUnavailable
		for _, res := range results {
			if !res.OK {
				s.log.Warn("readiness check failed", zap.String("check", res.Name), zap.String("error", res.Error))
			}
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, body)
}

func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("http handler panicked", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Any("panic", p), zap.Stack("stack"))
				writeJSON(w, http.StatusInternalServerError, map[string]any{
					"error": map[string]string{"code": "internal", "message": "internal error"},
				})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
