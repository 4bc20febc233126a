package httpapi

import (
	"net/http"
	"slices"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
)

type registerHostRequest struct {
	Hostname string            `json:"hostname"`
	AgentID  string            `json:"agent_id"`
	Labels   map[string]string `json:"labels"`
}

// registerHostsRequest is a batch registration: 1 to hosts.MaxBatchHosts entries.
type registerHostsRequest struct {
	Hosts []registerHostRequest `json:"hosts"`
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
	h, err := a.svc.Hosts.Register(r.Context(), p, envID, hosts.Registration{Hostname: req.Hostname, AgentID: req.AgentID, Labels: req.Labels})
	if err != nil {
		return err
	}
	return writeData(w, http.StatusCreated, viewRegisteredHost(h))
}

func (a *API) registerHosts(w http.ResponseWriter, r *http.Request, p principal) error {
	envID, err := pathID(r, "envID")
	if err != nil {
		return err
	}
	// The environment is checked before the body is read, so another client's environment is a 404
	// (audited) whatever the body holds, as on every other route that names an object.
	if _, err := a.svc.Tenants.Environment(r.Context(), p, envID); err != nil {
		return err
	}
	var req registerHostsRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	regs := make([]hosts.Registration, len(req.Hosts))
	for i, h := range req.Hosts {
		regs[i] = hosts.Registration{Hostname: h.Hostname, AgentID: h.AgentID, Labels: h.Labels}
	}
	hs, err := a.svc.Hosts.RegisterBatch(r.Context(), p, envID, regs)
	if err != nil {
		return err
	}
	out := make([]registeredHostView, len(hs))
	for i, h := range hs {
		out[i] = viewRegisteredHost(h)
	}
	return writeData(w, http.StatusCreated, out)
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
	sel, err := querySelector(r)
	if err != nil {
		return err
	}
	page, err := a.svc.Hosts.List(r.Context(), p, envID, sel, after, limit)
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

// revokeHostsRequest is a batch revocation: 1 to hosts.MaxBatchRevoke host ids of one environment.
type revokeHostsRequest struct {
	HostIDs []uuid.UUID `json:"host_ids"`
}

type revokedHostsView struct {
	Revoked int `json:"revoked"`
}

func (a *API) revokeHosts(w http.ResponseWriter, r *http.Request, p principal) error {
	envID, err := pathID(r, "envID")
	if err != nil {
		return err
	}
	if _, err := a.svc.Tenants.Environment(r.Context(), p, envID); err != nil {
		return err
	}
	var req revokeHostsRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	n, err := a.svc.Hosts.RevokeBatch(r.Context(), p, envID, req.HostIDs)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, revokedHostsView{Revoked: n})
}

func (a *API) reissueCredentials(w http.ResponseWriter, r *http.Request, p principal) error {
	id, err := pathID(r, "hostID")
	if err != nil {
		return err
	}
	h, err := a.svc.Hosts.ReissueCredentials(r.Context(), p, id)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, viewRegisteredHost(h))
}

func (a *API) drift(w http.ResponseWriter, r *http.Request, p principal) error {
	envID, err := pathID(r, "envID")
	if err != nil {
		return err
	}
	sel, err := querySelector(r)
	if err != nil {
		return err
	}
	report, err := a.svc.Drift.Environment(r.Context(), p, envID, sel)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, viewDrift(report))
}

// querySelector parses the ?selector= query parameter (inventory labels; empty: every host).
func querySelector(r *http.Request) (selector.Selector, error) {
	sel, err := selector.Parse(r.URL.Query().Get("selector"))
	if err != nil {
		return selector.Selector{}, fault.Invalidf("query parameter selector: %v", err)
	}
	return sel, nil
}

// labelPatch is a JSON merge patch of inventory labels: a string sets the label, null removes it.
type labelPatch map[string]*string

func (lp labelPatch) patch() hosts.LabelPatch {
	out := hosts.LabelPatch{Set: selector.Labels{}}
	for k, v := range lp {
		if v == nil {
			out.Remove = append(out.Remove, k)
		} else {
			out.Set[k] = *v
		}
	}
	slices.Sort(out.Remove)
	return out
}

// patchHostRequest changes a host's operator-owned fields; today its inventory labels.
type patchHostRequest struct {
	Labels labelPatch `json:"labels"`
}

func (a *API) patchHost(w http.ResponseWriter, r *http.Request, p principal) error {
	id, err := pathID(r, "hostID")
	if err != nil {
		return err
	}
	var req patchHostRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	h, err := a.svc.Hosts.SetLabels(r.Context(), p, id, req.Labels.patch())
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, a.viewHost(h))
}

// labelHostsRequest changes the inventory labels of 1 to hosts.MaxBatchLabel hosts of one environment.
type labelHostsRequest struct {
	HostIDs []uuid.UUID `json:"host_ids"`
	Labels  labelPatch  `json:"labels"`
}

type labeledHostsView struct {
	Updated int `json:"updated"`
}

func (a *API) labelHosts(w http.ResponseWriter, r *http.Request, p principal) error {
	envID, err := pathID(r, "envID")
	if err != nil {
		return err
	}
	if _, err := a.svc.Tenants.Environment(r.Context(), p, envID); err != nil {
		return err
	}
	var req labelHostsRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	n, err := a.svc.Hosts.SetLabelsBatch(r.Context(), p, envID, req.HostIDs, req.Labels.patch())
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, labeledHostsView{Updated: n})
}
