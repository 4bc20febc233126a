package httpapi

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/fault"
)

func errInvalid(msg string) error { return fault.Invalidf("%s", msg) }

type tokenRequest struct {
	Name     string     `json:"name"`
	ClientID *uuid.UUID `json:"client_id"`
}

type nameRequest struct {
	Name string `json:"name"`
}

func (a *API) createToken(w http.ResponseWriter, r *http.Request, p principal) error {
	var req tokenRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	var client uuid.NullUUID
	if req.ClientID != nil {
		client = uuid.NullUUID{UUID: *req.ClientID, Valid: true}
	}
	issued, err := a.svc.Tokens.Issue(r.Context(), p, req.Name, client)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusCreated, tokenView{ID: issued.ID, Name: issued.Name, ClientID: req.ClientID, Token: issued.Secret})
}

func (a *API) revokeToken(w http.ResponseWriter, r *http.Request, p principal) error {
	id, err := pathID(r, "tokenID")
	if err != nil {
		return err
	}
	if err := a.svc.Tokens.Revoke(r.Context(), p, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) createClient(w http.ResponseWriter, r *http.Request, p principal) error {
	var req nameRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	c, err := a.svc.Tenants.CreateClient(r.Context(), p, req.Name)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusCreated, viewClient(c))
}

func (a *API) listClients(w http.ResponseWriter, r *http.Request, p principal) error {
	cs, err := a.svc.Tenants.Clients(r.Context(), p)
	if err != nil {
		return err
	}
	out := make([]clientView, len(cs))
	for i, c := range cs {
		out[i] = viewClient(c)
	}
	return writeData(w, http.StatusOK, out)
}

func (a *API) getClient(w http.ResponseWriter, r *http.Request, p principal) error {
	id, err := pathID(r, "clientID")
	if err != nil {
		return err
	}
	c, err := a.svc.Tenants.Client(r.Context(), p, id)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, viewClient(c))
}

func (a *API) createEnvironment(w http.ResponseWriter, r *http.Request, p principal) error {
	id, err := pathID(r, "clientID")
	if err != nil {
		return err
	}
	var req nameRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	e, err := a.svc.Tenants.CreateEnvironment(r.Context(), p, id, req.Name)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusCreated, viewEnvironment(e))
}

func (a *API) listEnvironments(w http.ResponseWriter, r *http.Request, p principal) error {
	id, err := pathID(r, "clientID")
	if err != nil {
		return err
	}
	es, err := a.svc.Tenants.Environments(r.Context(), p, id)
	if err != nil {
		return err
	}
	out := make([]environmentView, len(es))
	for i, e := range es {
		out[i] = viewEnvironment(e)
	}
	return writeData(w, http.StatusOK, out)
}

func (a *API) getEnvironment(w http.ResponseWriter, r *http.Request, p principal) error {
	id, err := pathID(r, "envID")
	if err != nil {
		return err
	}
	e, err := a.svc.Tenants.Environment(r.Context(), p, id)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, viewEnvironment(e))
}
