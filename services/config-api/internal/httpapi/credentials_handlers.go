package httpapi

import (
	"net/http"

	"github.com/google/uuid"

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

func (a *API) createCredential(w http.ResponseWriter, r *http.Request, p principal) error {
	clientID, err := pathID(r, "clientID")
	if err != nil {
		return err
	}
	var req createCredentialRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	in := credentials.CreateInput{Name: req.Name, Secret: req.Secret, AllowedTargets: req.AllowedTargets}
	if req.EnvironmentID != nil {
		in.EnvironmentID = uuid.NullUUID{UUID: *req.EnvironmentID, Valid: true}
	}
	meta, err := a.svc.Credentials.Create(r.Context(), p, clientID, in)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusCreated, meta)
}

func (a *API) listCredentials(w http.ResponseWriter, r *http.Request, p principal) error {
	clientID, err := pathID(r, "clientID")
	if err != nil {
		return err
	}
	metas, err := a.svc.Credentials.List(r.Context(), p, clientID)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, metas)
}

func (a *API) getCredential(w http.ResponseWriter, r *http.Request, p principal) error {
	clientID, credID, err := credentialPath(r)
	if err != nil {
		return err
	}
	meta, err := a.svc.Credentials.Get(r.Context(), p, clientID, credID)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, meta)
}

func (a *API) deleteCredential(w http.ResponseWriter, r *http.Request, p principal) error {
	clientID, credID, err := credentialPath(r)
	if err != nil {
		return err
	}
	// force deletes a credential that configs still reference (their pushes then fail).
	force, err := queryBool(r, "force")
	if err != nil {
		return err
	}
	if err := a.svc.Credentials.Delete(r.Context(), p, clientID, credID, force); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) rotateCredential(w http.ResponseWriter, r *http.Request, p principal) error {
	clientID, credID, err := credentialPath(r)
	if err != nil {
		return err
	}
	var req rotateCredentialRequest
	// The body is optional: without a secret the credential is re-encrypted under the newest key.
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	meta, err := a.svc.Credentials.Rotate(r.Context(), p, clientID, credID,
		credentials.RotateInput{Secret: req.Secret, AllowedTargets: req.AllowedTargets})
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, meta)
}

func credentialPath(r *http.Request) (uuid.UUID, uuid.UUID, error) {
	clientID, err := pathID(r, "clientID")
	if err != nil {
		return uuid.Nil, uuid.Nil, err
	}
	credID, err := pathID(r, "credID")
	if err != nil {
		return uuid.Nil, uuid.Nil, err
	}
	return clientID, credID, nil
}
