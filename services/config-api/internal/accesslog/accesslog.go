// Package accesslog is what config-api's two HTTP edges, the REST API (httpapi) and the web console
// (webui), share about the one access-log line each request writes: the status the handler answered
// and the line's fields — method, route template, status, duration and token id; never bodies, cookies
// or tokens.
package accesslog

import (
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// Recorder remembers the status a handler wrote (200 when it wrote a body without one).
type Recorder struct {
	http.ResponseWriter
	Status int
}

// WriteHeader records the first status written.
func (s *Recorder) WriteHeader(code int) {
	if s.Status == 0 {
		s.Status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write records 200 when no status was written first.
func (s *Recorder) Write(b []byte) (int, error) {
	if s.Status == 0 {
		s.Status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Fields are the access-log line of a request to route (its template, never the raw path, which
// carries ids) answered with status after took, by p (the zero Principal: not authenticated).
func Fields(method, route string, status int, took time.Duration, p tenancy.Principal) []zap.Field {
	fields := []zap.Field{
		zap.String("method", method),
		zap.String("route", route),
		zap.Int("status", status),
		zap.Duration("duration", took),
	}
	if p.Name != "" {
		fields = append(fields, zap.Stringer("token_id", p.TokenID))
	}
	return fields
}
