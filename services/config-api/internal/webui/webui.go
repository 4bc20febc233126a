// Package webui is the operator web console of config-api: server-rendered pages (html/template, so every
// value is escaped for its context) with htmx for partial updates, all assets embedded. It is another
// adapter of the same use cases as the REST API (configs, hosts, credentials, drift, tenancy, staged
// rollouts) and calls them directly; no rule lives here that the API does not share.
//
// Operators sign in with an API token, exchanged for a session (package sessions) held in an HttpOnly,
// SameSite=Strict cookie, Secure when the console is served over TLS (directly or, per the public URL,
// behind a TLS-terminating proxy). Every state-changing request must come from the console's own origin
// (Origin header) and carry the session's CSRF token. A client-scoped session sees only its client's
// objects, exactly like the API: another client's object is a 404.
package webui

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/configsync/configsync/services/config-api/internal/applystatus"
	"github.com/configsync/configsync/services/config-api/internal/audit"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/credentials"
	"github.com/configsync/configsync/services/config-api/internal/drift"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/fleet"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/httpedge"
	"github.com/configsync/configsync/services/config-api/internal/rollouts"
	"github.com/configsync/configsync/services/config-api/internal/sessions"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// Prefix is the path prefix of every console route.
const Prefix = "/ui"

// htmxVersion is the vendored htmx (static/README.md).
const htmxVersion = "4.0.1"

// maxFormBytes caps a form body (a config document is at most the API's 1 MiB).
const maxFormBytes = 1 << 20

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/htmx.min.js static/console.css
var staticFS embed.FS

// Services are the use cases the console drives.
type Services struct {
	Sessions    *sessions.Service
	Tenants     *tenants.Service
	Hosts       *hosts.Service
	Configs     *configs.Service
	Credentials *credentials.Service
	Drift       *drift.Detector
	Fleet       *fleet.Service
	ApplyStatus *applystatus.Service
	Audit       *audit.Service
	Rollouts    *rollouts.Service
}

// Options tune the console.
type Options struct {
	// PublicURL is the console's external URL (scheme and host, e.g. https://configsync.example.com) as
	// browsers see it. It decides the Secure flag of the cookie and the origin state-changing requests
	// must come from. Empty: the request's own scheme and Host.
	PublicURL string
}

// Console serves the web console.
type Console struct {
	svc    Services
	log    *zap.Logger
	origin string // scheme://host of PublicURL, "" when unset
	secure bool   // PublicURL is https
	pages  map[string]*template.Template
	static http.Handler
	now    func() time.Time
}

// New returns a Console over svc.
func New(svc Services, log *zap.Logger, opts Options) (*Console, error) {
	c := &Console{svc: svc, log: log, now: time.Now}
	if opts.PublicURL != "" {
		u, err := url.Parse(opts.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("webui: public URL %q must be an absolute http(s) URL", opts.PublicURL)
		}
		c.origin, c.secure = u.Scheme+"://"+u.Host, u.Scheme == "https"
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	c.pages = pages
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	c.static = http.StripPrefix(Prefix+"/static/", http.FileServerFS(sub))
	return c, nil
}

// Register mounts the console under Prefix on r.
func (c *Console) Register(r *mux.Router) {
	r.Handle(Prefix, http.RedirectHandler(Prefix+"/", http.StatusMovedPermanently))
	r.PathPrefix(Prefix + "/").Handler(c.Handler())
}

// Handler is the console's routes (paths include Prefix).
func (c *Console) Handler() http.Handler {
	m := http.NewServeMux()
	get := func(path string, h handlerFunc) { m.Handle("GET "+Prefix+path, c.page(h)) }
	post := func(path string, h handlerFunc) { m.Handle("POST "+Prefix+path, c.action(h)) }

	m.Handle("GET "+Prefix+"/static/", c.assets())
	m.Handle("GET "+Prefix+"/signin", c.logged(c.signInForm))
	m.Handle("POST "+Prefix+"/signin", c.logged(c.signIn))
	post("/signout", c.signOut)

	get("/{$}", c.overview)
	get("/fragments/overview/{envID}", c.overviewFragment)
	get("/hosts", c.hostList)
	get("/hosts/{hostID}", c.hostDetail)

	for _, s := range []scope{scopeEnvironment, scopeHost} {
		base := s.path + "/configs/{configType}"
		get(base, c.editor(s))
		post(base+"/dry-run", c.dryRun(s))
		post(base+"/save", c.save(s))
		post(base+"/delete", c.deleteConfig(s))
		get(base+"/revisions", c.revisions(s))
		post(base+"/rollback", c.rollback(s))
	}
	get("/environments/{envID}/configs/{configType}/progress", c.progress(scopeEnvironment))
	get("/fragments/progress/{envID}/{configType}", c.progressFragment(scopeEnvironment))
	get("/hosts/{hostID}/configs/{configType}/progress", c.progress(scopeHost))
	get("/fragments/progress/hosts/{hostID}/{configType}", c.progressFragment(scopeHost))

	ro := "/environments/{envID}/configs/{configType}/rollouts"
	get(ro, c.rolloutList)
	post(ro, c.startRollout)
	get(ro+"/{rolloutID}", c.rolloutDetail)
	get("/fragments/rollouts/{envID}/{configType}/{rolloutID}", c.rolloutFragment)
	post(ro+"/{rolloutID}/pause", c.rolloutAct(c.rolloutPause))
	post(ro+"/{rolloutID}/resume", c.rolloutAct(c.rolloutResume))
	post(ro+"/{rolloutID}/promote", c.rolloutAct(c.rolloutPromote))
	post(ro+"/{rolloutID}/abort", c.rolloutAct(c.rolloutAbort))

	get("/credentials", c.credentialList)
	post("/clients/{clientID}/credentials", c.createCredential)
	post("/clients/{clientID}/credentials/{credID}/rotate", c.rotateCredential)
	post("/clients/{clientID}/credentials/{credID}/targets", c.setCredentialTargets)
	post("/clients/{clientID}/credentials/{credID}/delete", c.deleteCredential)

	get("/audit", c.auditLog)

	m.Handle(Prefix+"/", c.page(func(http.ResponseWriter, *http.Request, *request) error {
		return fault.NotFoundf("no such page")
	}))
	return c.secureHeaders(m)
}

func (c *Console) assets() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The assets change only with the binary; an hour of caching keeps pages quick.
		w.Header().Set("Cache-Control", "public, max-age=3600")
		c.static.ServeHTTP(w, r)
	})
}

// secureHeaders sets the headers every console answer carries: no framing, no sniffing, no inline or
// foreign scripts (htmx is served from the console itself).
func (c *Console) secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		if c.isSecure(r) {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

// request is what a console handler knows about the caller.
type request struct {
	session sessions.Session
	p       tenancy.Principal
	htmx    bool // sent by htmx (answer with a fragment)
}

// handlerFunc is a console handler: it writes its answer itself and returns any failure, which the
// wrapper renders as an error page (or fragment).
type handlerFunc func(w http.ResponseWriter, r *http.Request, req *request) error

// page wraps a read-only handler: it needs a session.
func (c *Console) page(h handlerFunc) http.Handler { return c.wrap(h, false) }

// action wraps a state-changing handler: it needs a session, the console's origin and the CSRF token.
func (c *Console) action(h handlerFunc) http.Handler { return c.wrap(h, true) }

func (c *Console) wrap(h handlerFunc, changes bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := c.now()
		rec := &httpedge.Recorder{ResponseWriter: w}
		req := &request{htmx: r.Header.Get("HX-Request") == "true"}
		err := c.authenticate(r, req)
		if err == nil && changes {
			err = c.checkCSRF(r, req)
		}
		if err == nil {
			err = h(rec, r, req)
		}
		if err != nil {
			c.fail(rec, r, req, err)
		}
		c.accessLog(r, rec.Status, start, req)
	})
}

// logged wraps the sign-in handlers (no session yet) with the access log.
func (c *Console) logged(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := c.now()
		rec := &httpedge.Recorder{ResponseWriter: w}
		h(rec, r)
		c.accessLog(r, rec.Status, start, nil)
	})
}

// accessLog writes one line per request: method, route pattern, status, duration and token id — never
// bodies, cookies or tokens.
func (c *Console) accessLog(r *http.Request, status int, start time.Time, req *request) {
	var p tenancy.Principal
	if req != nil {
		p = req.p
	}
	c.log.Info("console request", httpedge.AccessLog(r.Method, routePattern(r), status, time.Since(start), p)...)
}

// routePattern is the matched pattern (never the raw path, which carries ids).
func routePattern(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return "unmatched"
}

const sessionCookie = "configsync_session"

func (c *Console) authenticate(r *http.Request, req *request) error {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return errSignIn
	}
	s, err := c.svc.Sessions.Authenticate(r.Context(), ck.Value)
	if err != nil {
		if fault.Is(err, fault.Unauthenticated) {
			return errSignIn
		}
		return err
	}
	req.session, req.p = s, s.Principal
	return nil
}

var (
	errSignIn = fault.Unauthenticatedf("sign in to continue")
	errCSRF   = fault.Forbiddenf("this request did not come from the console (missing or wrong CSRF token or origin); reload the page and try again")
)

// checkCSRF refuses a state-changing request from another origin or without the session's token.
func (c *Console) checkCSRF(r *http.Request, req *request) error {
	if !c.sameOrigin(r) {
		return errCSRF
	}
	token := r.Header.Get("X-CSRF-Token")
	if token == "" {
		if err := parseForm(r); err != nil {
			return err
		}
		token = r.PostForm.Get("csrf")
	}
	if !req.session.ValidCSRF(token) {
		return errCSRF
	}
	return nil
}

// sameOrigin reports whether the request's Origin (or, lacking one, its Referer) is the console's.
func (c *Console) sameOrigin(r *http.Request) bool {
	want := c.expectedOrigin(r)
	if o := r.Header.Get("Origin"); o != "" {
		return o == want
	}
	ref, err := url.Parse(r.Header.Get("Referer"))
	if err != nil || ref.Host == "" {
		return false
	}
	return ref.Scheme+"://"+ref.Host == want
}

func (c *Console) expectedOrigin(r *http.Request) string {
	if c.origin != "" {
		return c.origin
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (c *Console) isSecure(r *http.Request) bool { return c.secure || r.TLS != nil }

func parseForm(r *http.Request) error {
	if r.PostForm != nil {
		return nil
	}
	r.Body = http.MaxBytesReader(nil, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return fault.Invalidf("the form is larger than %d bytes", maxFormBytes)
		}
		return fault.Invalidf("the form could not be read")
	}
	return nil
}

// statusOf is the HTTP status of a use-case failure, as the API answers it (httpedge.StatusOf).
func statusOf(err error) int {
	status, _ := httpedge.StatusOf(err)
	return status
}

// message is what the operator reads about err: the use case's own message, or a generic one for
// internal failures (whose cause is logged, never shown).
func message(err error) string {
	status := statusOf(err)
	var fe *fault.Error
	switch {
	case status == http.StatusServiceUnavailable && !errors.As(err, &fe):
		return "the database is unavailable; retry in a moment"
	case status >= 500 && fault.KindOf(err) == fault.Internal:
		return "internal error"
	case errors.As(err, &fe):
		return fe.Message
	}
	return "internal error"
}

// fail renders err: a missing session sends the browser to the sign-in page; anything else is an error
// page (or, for htmx, an error fragment) with the mapped status.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, req *request, err error) {
	status := statusOf(err)
	if status >= 500 {
		c.log.Error("console request failed", zap.String("method", r.Method), zap.String("route", routePattern(r)), zap.Error(err))
	}
	if status == http.StatusUnauthorized {
		target := Prefix + "/signin"
		if r.Method == http.MethodGet && !req.htmx {
			target += "?next=" + url.QueryEscape(r.URL.RequestURI())
		}
		if req.htmx {
			w.Header().Set("HX-Redirect", target)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodGet {
			http.Redirect(w, r, target, http.StatusSeeOther)
			return
		}
	}
	data := errorData{Status: status, StatusText: http.StatusText(status), Message: message(err)}
	if req.htmx {
		c.renderFragment(w, status, "error", "error-box", data)
		return
	}
	c.render(w, status, "error", req, "Error", data)
}

type errorData struct {
	Status     int
	StatusText string
	Message    string
}

// seeOther sends the browser on to target after a form post: htmx follows HX-Redirect, a plain form a
// 303.
func seeOther(w http.ResponseWriter, r *http.Request, req *request, target string) {
	if req.htmx {
		w.Header().Set("HX-Redirect", target)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// nextPath keeps a post-sign-in redirect inside the console.
func nextPath(v string) string {
	if !strings.HasPrefix(v, Prefix+"/") || strings.HasPrefix(v, "//") || strings.ContainsAny(v, "\\\r\n") {
		return Prefix + "/"
	}
	return v
}
