package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/configsync/configsync/libs/platform/tracing"
	"github.com/configsync/configsync/services/config-api/internal/httpedge"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

type principal = tenancy.Principal

var tracer = tracing.Tracer("github.com/configsync/configsync/services/config-api")

// handlerFunc is a route handler: it writes a success response itself and returns any failure, which
// handle turns into the error response.
type handlerFunc func(w http.ResponseWriter, r *http.Request, p principal) error

// handle authenticates (unless public), runs h, maps its error and writes one access-log line:
// method, route template, status, duration and token id — never bodies, never the token.
func (a *API) handle(public bool, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &httpedge.Recorder{ResponseWriter: w}
		// Every request starts its own trace (a caller's traceparent is not followed: the API decides
		// what it samples). A config write's span context goes on with the outbox row to delivery.
		ctx, span := tracer.Start(r.Context(), r.Method+" "+routeTemplate(r), trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		r = r.WithContext(ctx)
		var (
			p   principal
			err error
		)
		if !public {
			p, err = a.authenticate(r)
		}
		if err == nil {
			err = h(rec, r, p)
		}
		if err != nil {
			a.writeError(rec, r, err)
		}
		span.SetAttributes(attribute.Int("http.response.status_code", rec.Status))
		if rec.Status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(rec.Status))
		}
		a.log.Info("http request", httpedge.AccessLog(r.Method, routeTemplate(r), rec.Status, time.Since(start), p)...)
	})
}

func (a *API) authenticate(r *http.Request) (principal, error) {
	auth := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		token = ""
	}
	return a.svc.Tokens.Authenticate(r.Context(), strings.TrimSpace(token))
}

// routeTemplate is the matched route's template (never the raw path, which may carry ids).
func routeTemplate(r *http.Request) string {
	if cur := mux.CurrentRoute(r); cur != nil {
		if t, err := cur.GetPathTemplate(); err == nil {
			return t
		}
	}
	return "unmatched"
}
