package httpapi

import (
	"net/http"

	"github.com/google/uuid"
)

type registerHostRequest struct {
	Hostname string `json:"hostname"`
	AgentID  string `json:"agent_id"`
}

// hostPage is the host list response: the page in "data" and, when more hosts follow, the cursor to
// pass as ?after= for the next page.
type hostPage struct {
	Data      []hostView `json:"data"`
	NextAfter *uuid.UUID `json:"next_after,omitempty"`
}

func (a *API) registerHost(w http.ResponseWriter, r *http.Request, p principal) error {
	envID, err := pathID(r, "envID")
	if err != nil {
		return err
	}
	var req registerHostRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	h, err := a.svc.Hosts.Register(r.Context(), p, envID, req.Hostname, req.AgentID)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusCreated, registeredHostView{
		ID: h.ID, AgentID: h.AgentID, EnvironmentID: h.EnvironmentID, ClientID: h.ClientID,
		Hostname: h.Hostname, CreatedAt: h.CreatedAt, NATSCredentials: h.NATSCredentials,
	})
}

func (a *API) listHosts(w http.ResponseWriter, r *http.Request, p principal) error {
	envID, err := pathID(r, "envID")
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit")
	if err != nil {
		return err
	}
	var after uuid.NullUUID
	if v := r.URL.Query().Get("after"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return errInvalid("query parameter after must be a host id")
		}
		after = uuid.NullUUID{UUID: id, Valid: true}
	}
	page, err := a.svc.Hosts.List(r.Context(), p, envID, after, limit)
	if err != nil {
		return err
	}
	out := hostPage{Data: make([]hostView, len(page.Hosts)), NextAfter: page.NextAfter}
	for i, h := range page.Hosts {
		out.Data[i] = a.viewHost(h)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) getHost(w http.ResponseWriter, r *http.Request, p principal) error {
	id, err := pathID(r, "hostID")
	if err != nil {
		return err
	}
	h, err := a.svc.Hosts.Get(r.Context(), p, id)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, a.viewHost(h))
}

func (a *API) revokeHost(w http.ResponseWriter, r *http.Request, p principal) error {
	id, err := pathID(r, "hostID")
	if err != nil {
		return err
	}
	h, err := a.svc.Hosts.Revoke(r.Context(), p, id)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, a.viewHost(h))
}

func (a *API) drift(w http.ResponseWriter, r *http.Request, p principal) error {
	envID, err := pathID(r, "envID")
	if err != nil {
		return err
	}
	report, err := a.svc.Drift.Environment(r.Context(), p, envID)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, viewDrift(report))
}
