// Package httpedge is what config-api's two HTTP edges, the REST API (httpapi) and the web console
// (webui), share: the HTTP status of a use-case failure (StatusOf), and the one access-log line each
// request writes — method, route template, status, duration and token id; never bodies, cookies or
// tokens.
package httpedge

import (
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// kindStatus is the HTTP status and default error code of each kind of fault; Internal, the kind of
// anything unclassified, is 500 "internal".
var kindStatus = map[fault.Kind]struct {
	status int
	code   string
}{
	fault.Invalid:            {http.StatusBadRequest, "invalid_request"},
	fault.Unauthenticated:    {http.StatusUnauthorized, "unauthorized"},
	fault.Forbidden:          {http.StatusForbidden, "forbidden"},
	fault.NotFound:           {http.StatusNotFound, "not_found"},
	fault.Conflict:           {http.StatusConflict, "conflict"},
	fault.PreconditionFailed: {http.StatusPreconditionFailed, "precondition_failed"},
	fault.Unavailable:        {http.StatusServiceUnavailable, "unavailable"},
}

// StatusOf maps a use-case failure to its HTTP status and the default error code of that status. A
// database outage no use case classified is 503; an unclassified failure is 500.
func StatusOf(err error) (int, string) {
	if fault.StoreUnavailable(err) {
		return http.StatusServiceUnavailable, "unavailable"
	}
	if s, ok := kindStatus[fault.KindOf(err)]; ok {
		return s.status, s.code
	}
	return http.StatusInternalServerError, "internal"
}

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

// AccessLog is the fields of the access-log line of a request to route (its template, never the raw path, which
// carries ids) answered with status after took, by p (the zero Principal: not authenticated).
func AccessLog(method, route string, status int, took time.Duration, p tenancy.Principal) []zap.Field {
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
