package httpapi

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/credentials"
)

// createCredentialRequest carries secret values: it is never logged and never echoed.
type createCredentialRequest struct {
	Name           string            `json:"name"`
	EnvironmentID  *uuid.UUID        `json:"environment_id"`
	Secret         map[string]string `json:"secret"`
	AllowedTargets []string          `json:"allowed_targets"`
}

// rotateCredentialRequest: a present allowed_targets (even []) replaces the targets; absent or null
// keeps them.
type rotateCredentialRequest struct {
	Secret         map[string]string `json:"secret"`
	AllowedTargets *[]string         `json:"allowed_targets"`
}

func (a *API) createCredential() handlerFunc {
	return answer(withBody[createCredentialRequest](pathUUID("clientID")), func(ctx context.Context, p principal, in idBody[uuid.UUID, createCredentialRequest]) (protocol.CredentialMeta, error) {
		req := in.Req
		cin := credentials.CreateInput{Name: req.Name, Secret: req.Secret, AllowedTargets: req.AllowedTargets}
		if req.EnvironmentID != nil {
			cin.EnvironmentID = uuid.NullUUID{UUID: *req.EnvironmentID, Valid: true}
		}
		return a.svc.Credentials.Create(ctx, p, in.ID, cin)
	}, http.StatusCreated, asIs)
}

func (a *API) listCredentials() handlerFunc {
	return answer(pathUUID("clientID"), a.svc.Credentials.List, http.StatusOK, asIs)
}

func (a *API) getCredential() handlerFunc {
	return answer(readCredentialRef, func(ctx context.Context, p principal, in credentialRef) (protocol.CredentialMeta, error) {
		return a.svc.Credentials.Get(ctx, p, in.ClientID, in.CredID)
	}, http.StatusOK, asIs)
}

func (a *API) deleteCredential(w http.ResponseWriter, r *http.Request, p principal) error {
	c, err := readCredentialRef(w, r, p)
	if err != nil {
		return err
	}
	// force deletes a credential that configs still reference (their pushes then fail).
	force, err := queryBool(r, "force")
	if err != nil {
		return err
	}
	if err := a.svc.Credentials.Delete(r.Context(), p, c.ClientID, c.CredID, force); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) rotateCredential(w http.ResponseWriter, r *http.Request, p principal) error {
	c, err := readCredentialRef(w, r, p)
	if err != nil {
		return err
	}
	var req rotateCredentialRequest
	// The body is optional: without a secret the credential is re-encrypted under the newest key.
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	meta, err := a.svc.Credentials.Rotate(r.Context(), p, c.ClientID, c.CredID,
		credentials.RotateInput{Secret: req.Secret, AllowedTargets: req.AllowedTargets})
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, meta)
}

// credentialRef names one credential of a client.
type credentialRef struct {
	ClientID, CredID uuid.UUID
}

func readCredentialRef(_ http.ResponseWriter, r *http.Request, _ principal) (credentialRef, error) {
	clientID, err := pathID(r, "clientID")
	if err != nil {
		return credentialRef{}, err
	}
	credID, err := pathID(r, "credID")
	return credentialRef{ClientID: clientID, CredID: credID}, err
}
