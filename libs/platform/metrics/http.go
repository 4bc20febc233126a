package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
)

// HTTP counts and times HTTP requests by service, route template, method and status code.
type HTTP struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// HTTP returns the process's HTTP request metrics, registering its families on first use.
func (m *Metrics) HTTP() *HTTP {
	if m == nil {
		return nil
	}
	return once(m, &m.http, newHTTP)
}

// newHTTP builds the HTTP families, with the collectors to register.
func newHTTP() (*HTTP, []prometheus.Collector) {
	h := &HTTP{
		requests: counterVec("http", "requests_total",
			"HTTP requests served, by service, route template, method and status code.",
			"service", "route", "method", "code"),
		duration: histogramVec("http", "request_duration_seconds",
			"Time to serve an HTTP request, by service, route template and method.", DurationBuckets,
			"service", "route", "method"),
	}
	return h, []prometheus.Collector{h.requests, h.duration}
}

// Middleware is a gorilla/mux middleware (router.Use) recording each matched request under its route
// template (never its path, which holds ids); requests no route matched are not seen by mux
// middlewares: wrap the router's NotFoundHandler with Unmatched for those.
func (h *HTTP) Middleware(service string) mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h == nil {
				next.ServeHTTP(w, r)
				return
			}
			route := "unmatched"
			if cr := mux.CurrentRoute(r); cr != nil {
				if t, err := cr.GetPathTemplate(); err == nil {
					route = t
				}
			}
			h.serve(service, route, next, w, r)
		})
	}
}

// Unmatched wraps next (a router's NotFoundHandler or MethodNotAllowedHandler) so its requests are
// recorded under the route "unmatched".
func (h *HTTP) Unmatched(service string, next http.Handler) http.Handler {
	if h == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serve(service, "unmatched", next, w, r) })
}

func (h *HTTP) serve(service, route string, next http.Handler, w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	next.ServeHTTP(sw, r)
	method := methodLabel(r.Method)
	h.requests.WithLabelValues(service, route, method, strconv.Itoa(sw.code)).Inc()
	h.duration.WithLabelValues(service, route, method).Observe(time.Since(start).Seconds())
}

// methodLabel keeps the method label bounded: unknown methods are "other".
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

// statusWriter records the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.code, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Flush passes through to the underlying writer when it can flush (server-sent and streamed replies).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
