package webui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/audit"
	"github.com/configsync/configsync/services/config-api/internal/credentials"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

type credentialsData struct {
	Clients      []tenants.Client
	Client       *tenants.Client
	Environments []tenants.Environment
	Credentials  []protocol.CredentialMeta
	Fields       []string
	Error        string
	Done         string
}

func (c *Console) credentialsFor(r *http.Request, req *request, clientID uuid.UUID) (credentialsData, error) {
	clients, err := c.svc.Tenants.Clients(r.Context(), req.p)
	if err != nil {
		return credentialsData{}, err
	}
	d := credentialsData{Clients: clients, Fields: agentconfig.SecretFields()}
	if clientID == uuid.Nil {
		if len(clients) == 0 {
			return d, nil
		}
		clientID = clients[0].ID
	}
	cl, err := c.svc.Tenants.Client(r.Context(), req.p, clientID)
	if err != nil {
		return credentialsData{}, err
	}
	d.Client = &cl
	if d.Environments, err = c.svc.Tenants.Environments(r.Context(), req.p, cl.ID); err != nil {
		return credentialsData{}, err
	}
	if d.Credentials, err = c.svc.Credentials.List(r.Context(), req.p, cl.ID); err != nil {
		return credentialsData{}, err
	}
	return d, nil
}

func (c *Console) credentialList(w http.ResponseWriter, r *http.Request, req *request) error {
	var clientID uuid.UUID
	if v := r.URL.Query().Get("client"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return fault.NotFoundf("no such client")
		}
		clientID = id
	}
	d, err := c.credentialsFor(r, req, clientID)
	if err != nil {
		return err
	}
	switch r.URL.Query().Get("done") {
	case "created":
		d.Done = "Credential created. Its secret is stored encrypted and will not be shown again."
	case "rotated":
		d.Done = "Credential rotated; configs that use it were re-announced to the agents."
	case "targets":
		d.Done = "Allowed targets saved; configs that use the credential were re-announced to the agents."
	case "deleted":
		d.Done = "Credential deleted."
	}
	c.render(w, http.StatusOK, "credentials", req, "Credentials", d)
	return nil
}

// secretFrom reads the secret fields of a credential form; empty fields are left out.
func secretFrom(r *http.Request) map[string]string {
	out := map[string]string{}
	for _, f := range agentconfig.SecretFields() {
		if v := r.PostForm.Get("secret_" + f); v != "" {
			out[f] = v
		}
	}
	return out
}

// targetsFrom reads the allowed targets of a credential form: host:port patterns, one a line (commas
// separate too), blanks dropped. set is false when the form has no allowed_targets field at all (a
// rotation that leaves them alone); an empty field clears them. The credential service validates each
// pattern and names the one it refuses.
func targetsFrom(r *http.Request) (targets []string, set bool) {
	raw, ok := r.PostForm["allowed_targets"]
	if !ok {
		return nil, false
	}
	targets = []string{}
	for _, v := range raw {
		for _, t := range strings.FieldsFunc(v, func(c rune) bool { return c == '\n' || c == '\r' || c == ',' }) {
			if t = strings.TrimSpace(t); t != "" {
				targets = append(targets, t)
			}
		}
	}
	return targets, true
}

// credentialAction runs a credential change and answers with the list page: a redirect on success (so
// reloading never repeats it, and the secret never sits in a page), the page with the error otherwise.
func (c *Console) credentialAction(w http.ResponseWriter, r *http.Request, req *request, done string, fn func(clientID uuid.UUID) error) error {
	clientID, err := pathID(r, "clientID")
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	if err := fn(clientID); err != nil {
		if statusOf(err) >= 500 && !fault.Is(err, fault.Unavailable) {
			return err
		}
		d, lerr := c.credentialsFor(r, req, clientID)
		if lerr != nil {
			return lerr
		}
		d.Error = message(err)
		c.render(w, statusOf(err), "credentials", req, "Credentials", d)
		return nil
	}
	http.Redirect(w, r, Prefix+"/credentials?"+url.Values{"client": {clientID.String()}, "done": {done}}.Encode(), http.StatusSeeOther)
	return nil
}

func (c *Console) createCredential(w http.ResponseWriter, r *http.Request, req *request) error {
	return c.credentialAction(w, r, req, "created", func(clientID uuid.UUID) error {
		in := credentials.CreateInput{Name: r.PostForm.Get("name"), Secret: secretFrom(r)}
		if targets, set := targetsFrom(r); set && len(targets) > 0 {
			in.AllowedTargets = targets
		}
		if v := r.PostForm.Get("environment_id"); v != "" {
			id, err := uuid.Parse(v)
			if err != nil {
				return fault.Invalidf("environment_id must be an environment id")
			}
			in.EnvironmentID = uuid.NullUUID{UUID: id, Valid: true}
		}
		_, err := c.svc.Credentials.Create(r.Context(), req.p, clientID, in)
		return err
	})
}

func (c *Console) rotateCredential(w http.ResponseWriter, r *http.Request, req *request) error {
	return c.oneCredentialAction(w, r, req, "rotated", func(clientID, id uuid.UUID) error {
		_, err := c.svc.Credentials.Rotate(r.Context(), req.p, clientID, id, credentials.RotateInput{Secret: secretFrom(r)})
		return err
	})
}

// setCredentialTargets replaces a credential's allowed targets (a rotation without a new secret, as
// the API's rotation request with only allowed_targets).
func (c *Console) setCredentialTargets(w http.ResponseWriter, r *http.Request, req *request) error {
	return c.oneCredentialAction(w, r, req, "targets", func(clientID, id uuid.UUID) error {
		targets, set := targetsFrom(r)
		if !set {
			return fault.Invalidf("allowed_targets is required (empty: any target)")
		}
		_, err := c.svc.Credentials.Rotate(r.Context(), req.p, clientID, id, credentials.RotateInput{AllowedTargets: &targets})
		return err
	})
}

func (c *Console) deleteCredential(w http.ResponseWriter, r *http.Request, req *request) error {
	return c.oneCredentialAction(w, r, req, "deleted", func(clientID, id uuid.UUID) error {
		if r.PostForm.Get("confirm") != "yes" {
			return fault.Invalidf("tick the confirmation box to delete the credential")
		}
		return c.svc.Credentials.Delete(r.Context(), req.p, clientID, id, r.PostForm.Get("force") == "true")
	})
}

// oneCredentialAction is credentialAction on the credential of the credID path variable.
func (c *Console) oneCredentialAction(w http.ResponseWriter, r *http.Request, req *request, done string, fn func(clientID, id uuid.UUID) error) error {
	return c.credentialAction(w, r, req, done, func(clientID uuid.UUID) error {
		id, err := pathID(r, "credID")
		if err != nil {
			return err
		}
		return fn(clientID, id)
	})
}

type auditData struct {
	Actor, Object, Since, Until string
	Events                      []audit.Event
	NextURL                     string
}

// auditTimeLayout is what an <input type="datetime-local"> sends (interpreted as UTC).
const auditTimeLayout = "2006-01-02T15:04"

func parseAuditTime(name, v string) (*time.Time, error) {
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(auditTimeLayout, v)
	if err != nil {
		if t, err = time.Parse(time.RFC3339, v); err != nil {
			return nil, fault.Invalidf("%s must be a time such as 2026-12-01T10:00 (UTC)", name)
		}
	}
	return &t, nil
}

func (c *Console) auditLog(w http.ResponseWriter, r *http.Request, req *request) error {
	q := r.URL.Query()
	d := auditData{Actor: strings.TrimSpace(q.Get("actor")), Object: strings.TrimSpace(q.Get("object")), Since: q.Get("since"), Until: q.Get("until")}
	f := audit.Filter{Actor: d.Actor, Object: d.Object, Limit: 100}
	var err error
	if f.Since, err = parseAuditTime("since", d.Since); err != nil {
		return err
	}
	if f.Until, err = parseAuditTime("until", d.Until); err != nil {
		return err
	}
	if v := q.Get("before"); v != "" {
		if f.Before, err = strconv.ParseInt(v, 10, 64); err != nil {
			return fault.Invalidf("before must be an event id")
		}
	}
	page, err := c.svc.Audit.List(r.Context(), req.p, f)
	if err != nil {
		return err
	}
	d.Events = page.Events
	if page.NextBefore > 0 {
		next := url.Values{}
		for k, v := range map[string]string{"actor": d.Actor, "object": d.Object, "since": d.Since, "until": d.Until} {
			if v != "" {
				next.Set(k, v)
			}
		}
		next.Set("before", strconv.FormatInt(page.NextBefore, 10))
		d.NextURL = Prefix + "/audit?" + next.Encode()
	}
	c.render(w, http.StatusOK, "audit", req, "Audit log", d)
	return nil
}
