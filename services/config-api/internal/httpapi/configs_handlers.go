package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/applystatus"
	"github.com/configsync/configsync/services/config-api/internal/configs"
)

// scope says which level a config route addresses.
type scope struct {
	name  string // protocol.ScopeEnvironment or protocol.ScopeHost
	param string // the path variable holding the environment or host id
}

var (
	scopeEnvironment = scope{name: protocol.ScopeEnvironment, param: "envID"}
	scopeHost        = scope{name: protocol.ScopeHost, param: "hostID"}
)

func (s scope) ref(w http.ResponseWriter, r *http.Request, _ principal) (configs.Ref, error) {
	id, err := pathID(r, s.param)
	if err != nil {
		return configs.Ref{}, err
	}
	return configs.Ref{Scope: s.name, ID: id, ConfigType: mux.Vars(r)["configType"]}, nil
}

// refLimit is a config ref and the ?limit= of a list route.
type refLimit struct {
	configs.Ref
	Limit int
}

// withLimit reads the ref, then ?limit=.
func (s scope) withLimit(w http.ResponseWriter, r *http.Request, p principal) (refLimit, error) {
	ref, err := s.ref(w, r, p)
	if err != nil {
		return refLimit{}, err
	}
	limit, err := queryInt(r, "limit")
	return refLimit{Ref: ref, Limit: limit}, err
}

type putConfigRequest struct {
	ConfigData json.RawMessage `json:"config_data"`
}

type rollbackRequest struct {
	Revision int64 `json:"revision"`
}

func (a *API) putConfig(s scope) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p principal) error {
		ref, err := s.ref(w, r, p)
		if err != nil {
			return err
		}
		dryRun, err := queryBool(r, "dry_run")
		if err != nil {
			return err
		}
		var req putConfigRequest
		if err := decode(w, r, &req); err != nil {
			return err
		}
		if dryRun {
			out, err := a.svc.Configs.DryRunPut(r.Context(), p, ref, req.ConfigData)
			if err != nil {
				return err
			}
			return writeData(w, http.StatusOK, viewDryRun(out))
		}
		cond, err := ifMatch(r)
		if err != nil {
			return err
		}
		rec, err := a.svc.Configs.Put(r.Context(), p, ref, req.ConfigData, cond)
		if err != nil {
			return err
		}
		return writeData(w, http.StatusOK, viewConfig(rec))
	}
}

func (a *API) deleteConfig(s scope) handlerFunc {
	return answer(ifMatched(s.ref), func(ctx context.Context, p principal, in matched[configs.Ref]) (configs.Record, error) {
		return a.svc.Configs.Delete(ctx, p, in.In, in.Cond)
	}, http.StatusOK, viewConfig)
}

func (a *API) revisions(s scope) handlerFunc {
	return answer(s.withLimit, func(ctx context.Context, p principal, in refLimit) ([]configs.Revision, error) {
		return a.svc.Configs.Revisions(ctx, p, in.Ref, in.Limit)
	}, http.StatusOK, each(viewRevision))
}

// rollbackInput reads a rollback: the ref, a positive revision, then If-Match.
func (s scope) rollbackInput(w http.ResponseWriter, r *http.Request, p principal) (idBody[configs.Ref, rollbackRequest], error) {
	in, err := withBody[rollbackRequest](s.ref)(w, r, p)
	if err == nil && in.Req.Revision <= 0 {
		err = errInvalid("revision must be a positive revision number")
	}
	return in, err
}

func (a *API) rollback(s scope) handlerFunc {
	return answer(ifMatched(s.rollbackInput), func(ctx context.Context, p principal, in matched[idBody[configs.Ref, rollbackRequest]]) (configs.Record, error) {
		return a.svc.Configs.Rollback(ctx, p, in.In.ID, in.In.Req.Revision, in.Cond)
	}, http.StatusOK, viewConfig)
}

func (a *API) getEnvironmentConfig() handlerFunc {
	return answer(scopeEnvironment.ref, func(ctx context.Context, p principal, ref configs.Ref) (configs.Record, error) {
		return a.svc.Configs.EnvironmentConfig(ctx, p, ref.ID, ref.ConfigType)
	}, http.StatusOK, viewConfig)
}

func (a *API) listEnvironmentConfigs() handlerFunc {
	return answer(pathUUID("envID"), a.svc.Configs.EnvironmentConfigs, http.StatusOK, each(viewConfig))
}

func (a *API) getHostConfig(w http.ResponseWriter, r *http.Request, p principal) error {
	ref, err := scopeHost.ref(w, r, p)
	if err != nil {
		return err
	}
	explain, err := queryBool(r, "explain")
	if err != nil {
		return err
	}
	ec, err := a.svc.Configs.Effective(r.Context(), p, ref.ID, ref.ConfigType, explain)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, viewEffective(ec, explain))
}

func (a *API) listHostConfigs() handlerFunc {
	return answer(pathUUID("hostID"), a.svc.Configs.EffectiveAll, http.StatusOK, each(func(ec protocol.EffectiveConfig) effectiveView {
		return viewEffective(ec, false)
	}))
}

func (a *API) configTypes(w http.ResponseWriter, _ *http.Request, _ principal) error {
	return writeData(w, http.StatusOK, each(func(t agentconfig.TypeInfo) configTypeView {
		return configTypeView{Name: t.Name, MergeStrategy: t.MergeStrategy, Description: t.Description, Schema: t.Schema}
	})(agentconfig.Types()))
}

// applyStatus answers how far the current version of a config type has been applied at one level.
func (a *API) applyStatus(s scope) handlerFunc {
	level := a.svc.ApplyStatus.Environment
	if s == scopeHost {
		level = a.svc.ApplyStatus.Host
	}
	return answer(s.ref, func(ctx context.Context, p principal, ref configs.Ref) (applystatus.Status, error) {
		return level(ctx, p, ref.ID, ref.ConfigType)
	}, http.StatusOK, viewApplyStatus)
}
