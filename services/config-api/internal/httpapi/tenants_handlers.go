package httpapi

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

func errInvalid(msg string) error { return fault.Invalidf("%s", msg) }

type tokenRequest struct {
	Name     string     `json:"name"`
	ClientID *uuid.UUID `json:"client_id"`
}

type nameRequest struct {
	Name string `json:"name"`
}

func (a *API) createToken() handlerFunc {
	return answer(body[tokenRequest], func(ctx context.Context, p principal, req tokenRequest) (tokenView, error) {
		var client uuid.NullUUID
		if req.ClientID != nil {
			client = uuid.NullUUID{UUID: *req.ClientID, Valid: true}
		}
		issued, err := a.svc.Tokens.Issue(ctx, p, req.Name, client)
		return tokenView{ID: issued.ID, Name: issued.Name, ClientID: req.ClientID, Token: issued.Secret}, err
	}, http.StatusCreated, asIs)
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

func (a *API) createClient() handlerFunc {
	return answer(body[nameRequest], func(ctx context.Context, p principal, req nameRequest) (tenants.Client, error) {
		return a.svc.Tenants.CreateClient(ctx, p, req.Name)
	}, http.StatusCreated, viewClient)
}

func (a *API) listClients(w http.ResponseWriter, r *http.Request, p principal) error {
	cs, err := a.svc.Tenants.Clients(r.Context(), p)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, each(viewClient)(cs))
}

func (a *API) getClient() handlerFunc {
	return answer(pathUUID("clientID"), a.svc.Tenants.Client, http.StatusOK, viewClient)
}

func (a *API) createEnvironment() handlerFunc {
	return answer(withBody[nameRequest](pathUUID("clientID")), func(ctx context.Context, p principal, in idBody[uuid.UUID, nameRequest]) (tenants.Environment, error) {
		return a.svc.Tenants.CreateEnvironment(ctx, p, in.ID, in.Req.Name)
	}, http.StatusCreated, viewEnvironment)
}

func (a *API) listEnvironments() handlerFunc {
	return answer(pathUUID("clientID"), a.svc.Tenants.Environments, http.StatusOK, each(viewEnvironment))
}

func (a *API) getEnvironment() handlerFunc {
	return answer(pathUUID("envID"), a.svc.Tenants.Environment, http.StatusOK, viewEnvironment)
}
