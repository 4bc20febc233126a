package httpapi

import (
	"context"
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

func (a *API) registerHost() handlerFunc {
	return answer(withBody[registerHostRequest](pathUUID("envID")), func(ctx context.Context, p principal, in idBody[uuid.UUID, registerHostRequest]) (hosts.Host, error) {
		return a.svc.Hosts.Register(ctx, p, in.ID, in.Req.registration())
	}, http.StatusCreated, viewRegisteredHost)
}

func (req registerHostRequest) registration() hosts.Registration {
	return hosts.Registration{Hostname: req.Hostname, AgentID: req.AgentID, Labels: req.Labels}
}

func (a *API) registerHosts() handlerFunc {
	return answer(withBody[registerHostsRequest](a.visibleEnvironment), func(ctx context.Context, p principal, in idBody[uuid.UUID, registerHostsRequest]) ([]hosts.Host, error) {
		return a.svc.Hosts.RegisterBatch(ctx, p, in.ID, each(registerHostRequest.registration)(in.Req.Hosts))
	}, http.StatusCreated, each(viewRegisteredHost))
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
	writeJSON(w, http.StatusOK, hostPage{Data: each(a.viewHost)(page.Hosts), NextAfter: page.NextAfter})
	return nil
}

func (a *API) getHost() handlerFunc {
	return answer(pathUUID("hostID"), a.svc.Hosts.Get, http.StatusOK, a.viewHost)
}

func (a *API) revokeHost() handlerFunc {
	return answer(pathUUID("hostID"), a.svc.Hosts.Revoke, http.StatusOK, a.viewHost)
}

// revokeHostsRequest is a batch revocation: 1 to hosts.MaxBatchRevoke host ids of one environment.
type revokeHostsRequest struct {
	HostIDs []uuid.UUID `json:"host_ids"`
}

type revokedHostsView struct {
	Revoked int `json:"revoked"`
}

func (a *API) revokeHosts() handlerFunc {
	return answer(withBody[revokeHostsRequest](a.visibleEnvironment), func(ctx context.Context, p principal, in idBody[uuid.UUID, revokeHostsRequest]) (revokedHostsView, error) {
		n, err := a.svc.Hosts.RevokeBatch(ctx, p, in.ID, in.Req.HostIDs)
		return revokedHostsView{Revoked: n}, err
	}, http.StatusOK, asIs)
}

func (a *API) reissueCredentials() handlerFunc {
	return answer(pathUUID("hostID"), a.svc.Hosts.ReissueCredentials, http.StatusOK, viewRegisteredHost)
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

func (a *API) patchHost() handlerFunc {
	return answer(withBody[patchHostRequest](pathUUID("hostID")), func(ctx context.Context, p principal, in idBody[uuid.UUID, patchHostRequest]) (hosts.Host, error) {
		return a.svc.Hosts.SetLabels(ctx, p, in.ID, in.Req.Labels.patch())
	}, http.StatusOK, a.viewHost)
}

// labelHostsRequest changes the inventory labels of 1 to hosts.MaxBatchLabel hosts of one environment.
type labelHostsRequest struct {
	HostIDs []uuid.UUID `json:"host_ids"`
	Labels  labelPatch  `json:"labels"`
}

type labeledHostsView struct {
	Updated int `json:"updated"`
}

func (a *API) labelHosts() handlerFunc {
	return answer(withBody[labelHostsRequest](a.visibleEnvironment), func(ctx context.Context, p principal, in idBody[uuid.UUID, labelHostsRequest]) (labeledHostsView, error) {
		n, err := a.svc.Hosts.SetLabelsBatch(ctx, p, in.ID, in.Req.HostIDs, in.Req.Labels.patch())
		return labeledHostsView{Updated: n}, err
	}, http.StatusOK, asIs)
}
