// Package httpapi is config-api's REST edge: gorilla/mux routes under /api/v1, bearer-token
// authentication, request decoding (bodies capped at 1 MiB, unknown envelope fields rejected), the
// {"data": ...} envelope, ETag/If-Match, the access log, and the one place where use-case errors become
// HTTP statuses and {"error":{"code","message"}} bodies. Handlers are thin: decode, call a use case,
// encode.
package httpapi

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/configsync/configsync/services/config-api/internal/applystatus"
	"github.com/configsync/configsync/services/config-api/internal/audit"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/credentials"
	"github.com/configsync/configsync/services/config-api/internal/drift"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/rollouts"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
	"github.com/configsync/configsync/services/config-api/internal/tokens"
)

// Prefix is the path prefix of every route.
const Prefix = "/api/v1"

// MaxBodyBytes caps request bodies (413 beyond).
const MaxBodyBytes = 1 << 20

// Services are the use cases the API exposes.
type Services struct {
	Tokens      *tokens.Service
	Tenants     *tenants.Service
	Hosts       *hosts.Service
	Configs     *configs.Service
	Credentials *credentials.Service
	Drift       *drift.Detector
	Audit       *audit.Service
	ApplyStatus *applystatus.Service
	Rollouts    *rollouts.Service
}

// Options tune the API. There are none today: a host's "online" flag is the hosts service's
// (Hosts.Online), decided by the deployment's online window there.
type Options struct{}

// API serves config-api's routes.
type API struct {
	svc Services
	log *zap.Logger
}

// New returns an API over svc.
func New(svc Services, log *zap.Logger, _ Options) *API {
	return &API{svc: svc, log: log}
}

// route is one entry of the routes table.
type route struct {
	method, path string
	public       bool
	h            handlerFunc
}

func (a *API) routes() []route {
	const (
		env       = "/environments/{envID}"
		host      = "/hosts/{hostID}"
		client    = "/clients/{clientID}"
		envConfig = env + "/agent-configs/{configType}"
		hostCfg   = host + "/agent-configs/{configType}"
		cred      = client + "/credentials/{credID}"
		rollout   = envConfig + "/rollouts/{rolloutID}"
	)
	return []route{
		{method: http.MethodGet, path: "/openapi.json", public: true, h: a.openAPI},
		{method: http.MethodGet, path: "/agent-config-types", h: a.configTypes},

		{method: http.MethodPost, path: "/tokens", h: a.createToken()},
		{method: http.MethodDelete, path: "/tokens/{tokenID}", h: a.revokeToken},

		{method: http.MethodGet, path: "/audit", h: a.listAudit},

		{method: http.MethodPost, path: "/clients", h: a.createClient()},
		{method: http.MethodGet, path: "/clients", h: a.listClients},
		{method: http.MethodGet, path: client, h: a.getClient()},
		{method: http.MethodPost, path: client + "/environments", h: a.createEnvironment()},
		{method: http.MethodGet, path: client + "/environments", h: a.listEnvironments()},

		{method: http.MethodPost, path: client + "/credentials", h: a.createCredential()},
		{method: http.MethodGet, path: client + "/credentials", h: a.listCredentials()},
		{method: http.MethodGet, path: cred, h: a.getCredential()},
		{method: http.MethodDelete, path: cred, h: a.deleteCredential},
		{method: http.MethodPost, path: cred + "/rotate", h: a.rotateCredential},

		{method: http.MethodGet, path: env, h: a.getEnvironment()},
		{method: http.MethodPost, path: env + "/hosts", h: a.registerHost()},
		{method: http.MethodPost, path: env + "/hosts/batch", h: a.registerHosts()},
		{method: http.MethodPost, path: env + "/hosts/revoke", h: a.revokeHosts()},
		{method: http.MethodPost, path: env + "/hosts/labels", h: a.labelHosts()},
		{method: http.MethodGet, path: env + "/hosts", h: a.listHosts},
		{method: http.MethodGet, path: env + "/drift", h: a.drift},
		{method: http.MethodGet, path: env + "/agent-configs", h: a.listEnvironmentConfigs()},
		{method: http.MethodGet, path: envConfig, h: a.getEnvironmentConfig()},
		{method: http.MethodPut, path: envConfig, h: a.putConfig(scopeEnvironment)},
		{method: http.MethodDelete, path: envConfig, h: a.deleteConfig(scopeEnvironment)},
		{method: http.MethodGet, path: envConfig + "/revisions", h: a.revisions(scopeEnvironment)},
		{method: http.MethodPost, path: envConfig + "/rollback", h: a.rollback(scopeEnvironment)},
		{method: http.MethodGet, path: envConfig + "/status", h: a.applyStatus(scopeEnvironment)},
		{method: http.MethodPost, path: envConfig + "/rollouts", h: a.startRollout()},
		{method: http.MethodGet, path: envConfig + "/rollouts", h: a.listRollouts()},
		{method: http.MethodGet, path: rollout, h: rolloutRoute(a.svc.Rollouts.Get)},
		{method: http.MethodPost, path: rollout + "/pause", h: rolloutRoute(a.svc.Rollouts.Pause)},
		{method: http.MethodPost, path: rollout + "/resume", h: rolloutRoute(a.svc.Rollouts.Resume)},
		{method: http.MethodPost, path: rollout + "/promote", h: rolloutRoute(a.svc.Rollouts.Promote)},
		{method: http.MethodPost, path: rollout + "/abort", h: rolloutRoute(a.svc.Rollouts.Abort)},

		{method: http.MethodGet, path: host, h: a.getHost()},
		{method: http.MethodDelete, path: host, h: a.revokeHost()},
		{method: http.MethodPatch, path: host, h: a.patchHost()},
		{method: http.MethodPost, path: host + "/credentials", h: a.reissueCredentials()},
		{method: http.MethodGet, path: host + "/agent-configs", h: a.listHostConfigs()},
		{method: http.MethodGet, path: hostCfg, h: a.getHostConfig},
		{method: http.MethodPut, path: hostCfg, h: a.putConfig(scopeHost)},
		{method: http.MethodDelete, path: hostCfg, h: a.deleteConfig(scopeHost)},
		{method: http.MethodGet, path: hostCfg + "/revisions", h: a.revisions(scopeHost)},
		{method: http.MethodPost, path: hostCfg + "/rollback", h: a.rollback(scopeHost)},
		{method: http.MethodGet, path: hostCfg + "/status", h: a.applyStatus(scopeHost)},
	}
}

// Register adds every route to r under Prefix. Unknown paths and methods under the prefix answer
// with the JSON error body too.
func (a *API) Register(r *mux.Router) {
	sub := r.PathPrefix(Prefix).Subrouter()
	allowed := map[string][]string{}
	var paths []string
	for _, rt := range a.routes() {
		sub.Handle(rt.path, a.handle(rt.public, rt.h)).Methods(rt.method)
		if _, seen := allowed[rt.path]; !seen {
			paths = append(paths, rt.path)
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
	}
	// One method-less fallback per path answers 405 (mux's own MethodNotAllowedHandler is not reached
	// when other routes share a path prefix).
	for _, path := range paths {
		allow := strings.Join(allowed[path], ", ")
		sub.Handle(path, a.handle(true, func(w http.ResponseWriter, _ *http.Request, _ principal) error {
			w.Header().Set("Allow", allow)
			return errMethodNotAllowed
		}))
	}
	sub.NotFoundHandler = a.handle(true, func(http.ResponseWriter, *http.Request, principal) error {
		return errRouteNotFound
	})
}
