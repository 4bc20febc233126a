package httpapi

import (
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

func (s scope) ref(r *http.Request) (configs.Ref, error) {
	id, err := pathID(r, s.param)
	if err != nil {
		return configs.Ref{}, err
	}
	return configs.Ref{Scope: s.name, ID: id, ConfigType: mux.Vars(r)["configType"]}, nil
}

type putConfigRequest struct {
	ConfigData json.RawMessage `json:"config_data"`
}

type rollbackRequest struct {
	Revision int64 `json:"revision"`
}

func (a *API) putConfig(s scope) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p principal) error {
		ref, err := s.ref(r)
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
		w.Header().Set("ETag", etag(rec.Version))
		return writeData(w, http.StatusOK, viewConfig(rec))
	}
}

func (a *API) deleteConfig(s scope) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p principal) error {
		ref, err := s.ref(r)
		if err != nil {
			return err
		}
		cond, err := ifMatch(r)
		if err != nil {
			return err
		}
		rec, err := a.svc.Configs.Delete(r.Context(), p, ref, cond)
		if err != nil {
			return err
		}
		w.Header().Set("ETag", etag(rec.Version))
		return writeData(w, http.StatusOK, viewConfig(rec))
	}
}

func (a *API) revisions(s scope) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p principal) error {
		ref, err := s.ref(r)
		if err != nil {
			return err
		}
		limit, err := queryInt(r, "limit")
		if err != nil {
			return err
		}
		revs, err := a.svc.Configs.Revisions(r.Context(), p, ref, limit)
		if err != nil {
			return err
		}
		out := make([]revisionView, len(revs))
		for i, rev := range revs {
			out[i] = viewRevision(rev)
		}
		return writeData(w, http.StatusOK, out)
	}
}

func (a *API) rollback(s scope) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p principal) error {
		ref, err := s.ref(r)
		if err != nil {
			return err
		}
		var req rollbackRequest
		if err := decode(w, r, &req); err != nil {
			return err
		}
		if req.Revision <= 0 {
			return errInvalid("revision must be a positive revision number")
		}
		cond, err := ifMatch(r)
		if err != nil {
			return err
		}
		rec, err := a.svc.Configs.Rollback(r.Context(), p, ref, req.Revision, cond)
		if err != nil {
			return err
		}
		w.Header().Set("ETag", etag(rec.Version))
		return writeData(w, http.StatusOK, viewConfig(rec))
	}
}

func (a *API) getEnvironmentConfig(w http.ResponseWriter, r *http.Request, p principal) error {
	ref, err := scopeEnvironment.ref(r)
	if err != nil {
		return err
	}
	rec, err := a.svc.Configs.EnvironmentConfig(r.Context(), p, ref.ID, ref.ConfigType)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(rec.Version))
	return writeData(w, http.StatusOK, viewConfig(rec))
}

func (a *API) listEnvironmentConfigs(w http.ResponseWriter, r *http.Request, p principal) error {
	id, err := pathID(r, "envID")
	if err != nil {
		return err
	}
	recs, err := a.svc.Configs.EnvironmentConfigs(r.Context(), p, id)
	if err != nil {
		return err
	}
	out := make([]configView, len(recs))
	for i, rec := range recs {
		out[i] = viewConfig(rec)
	}
	return writeData(w, http.StatusOK, out)
}

func (a *API) getHostConfig(w http.ResponseWriter, r *http.Request, p principal) error {
	ref, err := scopeHost.ref(r)
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
	w.Header().Set("ETag", etag(ec.Version))
	return writeData(w, http.StatusOK, viewEffective(ec, explain))
}

func (a *API) listHostConfigs(w http.ResponseWriter, r *http.Request, p principal) error {
	id, err := pathID(r, "hostID")
	if err != nil {
		return err
	}
	ecs, err := a.svc.Configs.EffectiveAll(r.Context(), p, id)
	if err != nil {
		return err
	}
	out := make([]effectiveView, len(ecs))
	for i, ec := range ecs {
		out[i] = viewEffective(ec, false)
	}
	return writeData(w, http.StatusOK, out)
}

func (a *API) configTypes(w http.ResponseWriter, _ *http.Request, _ principal) error {
	types := agentconfig.Types()
	out := make([]configTypeView, len(types))
	for i, t := range types {
		out[i] = configTypeView{Name: t.Name, MergeStrategy: t.MergeStrategy, Description: t.Description, Schema: t.Schema}
	}
	return writeData(w, http.StatusOK, out)
}

// applyStatus answers how far the current version of a config type has been applied at one level.
func (a *API) applyStatus(s scope) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p principal) error {
		ref, err := s.ref(r)
		if err != nil {
			return err
		}
		var st applystatus.Status
		if s == scopeHost {
			st, err = a.svc.ApplyStatus.Host(r.Context(), p, ref.ID, ref.ConfigType)
		} else {
			st, err = a.svc.ApplyStatus.Environment(r.Context(), p, ref.ID, ref.ConfigType)
		}
		if err != nil {
			return err
		}
		return writeData(w, http.StatusOK, viewApplyStatus(st))
	}
}
