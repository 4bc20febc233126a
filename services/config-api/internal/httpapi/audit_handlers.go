package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/audit"
)

// auditEventView is one audit event as the API shows it.
type auditEventView struct {
	ID        int64           `json:"id"`
	Actor     string          `json:"actor"`
	ClientID  *uuid.UUID      `json:"client_id,omitempty"`
	Action    string          `json:"action"`
	Object    string          `json:"object"`
	Detail    json.RawMessage `json:"detail,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
}

// auditPage is {"data": [...], "next_before": id}.
type auditPage struct {
	Data       []auditEventView `json:"data"`
	NextBefore int64            `json:"next_before,omitempty"`
}

// listAudit reads the audit log: newest first, filtered by actor, object and time, paged by ?before.
func (a *API) listAudit(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	limit, err := queryInt(r, "limit")
	if err != nil {
		return err
	}
	f := audit.Filter{Actor: q.Get("actor"), Object: q.Get("object"), Limit: limit}
	for name, dst := range map[string]**time.Time{"since": &f.Since, "until": &f.Until} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return errInvalid("query parameter " + name + " must be an RFC 3339 time")
			}
			*dst = &t
		}
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return errInvalid("query parameter before must be a positive event id")
		}
		f.Before = n
	}
	page, err := a.svc.Audit.List(r.Context(), p, f)
	if err != nil {
		return err
	}
	out := auditPage{Data: make([]auditEventView, len(page.Events)), NextBefore: page.NextBefore}
	for i, ev := range page.Events {
		v := auditEventView{ID: ev.ID, Actor: ev.Actor, Action: ev.Action, Object: ev.Object, Detail: ev.Detail, CreatedAt: ev.CreatedAt}
		if ev.ClientID.Valid {
			id := ev.ClientID.UUID
			v.ClientID = &id
		}
		out.Data[i] = v
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
