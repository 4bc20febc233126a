// Package credentials lets operators manage a client's credentials (secrets referenced by collector
// configs through credential_id). The secret material goes straight to the credential service over
// NATS; config-api never stores, logs or returns it, and answers with metadata only. When a secret is
// replaced or a credential deleted, the configs that reference it are re-announced so agents get the
// change. A credential that configs still reference is deleted only when the caller forces it.
package credentials

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// reannounceTimeout bounds the re-announce that follows a rotation or a deletion. It is not cancelled
// with the request: once the credential has changed, a caller that goes away must not leave agents on
// the old secret.
const reannounceTimeout = 30 * time.Second

// CodeAgentsNotUpdated is the error code of a rotation or deletion that the credential service made but
// whose re-announce failed; retrying the same request is safe and finishes it.
const CodeAgentsNotUpdated = "agents_not_updated"

// CodeCredentialInUse is the error code of a deletion refused because live configs still reference the
// credential.
const CodeCredentialInUse = "credential_in_use"

// maxListedReferences bounds how many referencing configs an in-use refusal names.
const maxListedReferences = 10

// Reasons recorded in the actor of re-announced configs.
const (
	reasonRotation = "credential rotation"
	reasonDeletion = "credential deletion"
)

// Backend is the credential service.
type Backend interface {
	Create(ctx context.Context, req protocol.CredentialCreateRequest) (protocol.CredentialMeta, error)
	Rotate(ctx context.Context, req protocol.CredentialRotateRequest) (protocol.CredentialMeta, error)
	Delete(ctx context.Context, ref protocol.CredentialRef) error
	Get(ctx context.Context, ref protocol.CredentialRef) (protocol.CredentialMeta, error)
	List(ctx context.Context, req protocol.CredentialListRequest) ([]protocol.CredentialMeta, error)
}

// Announcer finds the configs of a client that reference a credential, and re-announces them (new
// versions, same data) so agents, which ignore pushes that are not newer than what they hold, receive
// what the credential now injects (configs.Service). ReannounceCredential returns how many configs it
// re-announced.
type Announcer interface {
	CredentialUse(ctx context.Context, p tenancy.Principal, clientID, credentialID uuid.UUID) (configs.CredentialUse, error)
	ReannounceCredential(ctx context.Context, p tenancy.Principal, clientID, credentialID uuid.UUID, reason string) (int, error)
}

// Tenants finds clients and environments the caller can see (auditing cross-tenant attempts).
type Tenants interface {
	Client(ctx context.Context, p tenancy.Principal, id uuid.UUID) (tenants.Client, error)
	Environment(ctx context.Context, p tenancy.Principal, id uuid.UUID) (tenants.Environment, error)
}

// Service is the credential use cases.
type Service struct {
	backend   Backend
	announcer Announcer
	tenants   Tenants
	guard     *tenancy.Guard
}

// NewService returns a Service.
func NewService(backend Backend, announcer Announcer, tenants Tenants, guard *tenancy.Guard) *Service {
	return &Service{backend: backend, announcer: announcer, tenants: tenants, guard: guard}
}

// CreateInput is a new credential. Secret maps field names (e.g. "password") to values.
// AllowedTargets are host:port patterns binding the credential to the collectors' targets it may be
// injected for (empty: any); the credential service validates them.
type CreateInput struct {
	Name           string
	EnvironmentID  uuid.NullUUID
	Secret         map[string]string
	AllowedTargets []string
}

// RotateInput changes a credential: a new Secret (none: re-encrypt the stored one under the newest key)
// and, when AllowedTargets is not nil, new allowed targets (an empty list clears them).
type RotateInput struct {
	Secret         map[string]string
	AllowedTargets *[]string
}

// Create stores a credential for a client, optionally scoped to one of its environments.
func (s *Service) Create(ctx context.Context, p tenancy.Principal, clientID uuid.UUID, in CreateInput) (protocol.CredentialMeta, error) {
	name := strings.TrimSpace(in.Name)
	if name == "" || len(name) > 200 {
		return protocol.CredentialMeta{}, fault.Invalidf("name must be 1 to 200 characters")
	}
	if err := validSecret(in.Secret, true); err != nil {
		return protocol.CredentialMeta{}, err
	}
	if _, err := s.tenants.Client(ctx, p, clientID); err != nil {
		return protocol.CredentialMeta{}, err
	}
	if err := validTargets(in.AllowedTargets); err != nil {
		return protocol.CredentialMeta{}, err
	}
	req := protocol.CredentialCreateRequest{ClientID: clientID.String(), Name: name, Secret: in.Secret, AllowedTargets: in.AllowedTargets}
	if in.EnvironmentID.Valid {
		env, err := s.tenants.Environment(ctx, p, in.EnvironmentID.UUID)
		if err != nil {
			return protocol.CredentialMeta{}, err
		}
		if env.ClientID != clientID {
			return protocol.CredentialMeta{}, fault.Invalidf("environment_id belongs to another client")
		}
		req.EnvironmentID = env.ID.String()
	}
	meta, err := s.backend.Create(ctx, req)
	if err != nil {
		return protocol.CredentialMeta{}, fmt.Errorf("credentials: create: %w", err)
	}
	s.audit(ctx, p, tenancy.ActionCredentialCreate, clientID, meta, nil)
	return meta, nil
}

// List lists a client's credentials.
func (s *Service) List(ctx context.Context, p tenancy.Principal, clientID uuid.UUID) ([]protocol.CredentialMeta, error) {
	if _, err := s.tenants.Client(ctx, p, clientID); err != nil {
		return nil, err
	}
	metas, err := s.backend.List(ctx, protocol.CredentialListRequest{ClientID: clientID.String()})
	if err != nil {
		return nil, fmt.Errorf("credentials: list: %w", err)
	}
	if metas == nil {
		metas = []protocol.CredentialMeta{}
	}
	return metas, nil
}

// Get returns one credential's metadata.
func (s *Service) Get(ctx context.Context, p tenancy.Principal, clientID, id uuid.UUID) (protocol.CredentialMeta, error) {
	if _, err := s.tenants.Client(ctx, p, clientID); err != nil {
		return protocol.CredentialMeta{}, err
	}
	meta, err := s.backend.Get(ctx, ref(clientID, id))
	if err != nil {
		return protocol.CredentialMeta{}, s.miss(ctx, p, id, fmt.Errorf("credentials: get: %w", err))
	}
	return meta, nil
}

// Delete deletes a credential. While live configs of the client (environment defaults, overrides of
// active hosts) still reference it, it refuses with a Conflict (code credential_in_use) naming them and
// deletes nothing, unless force is set: agents would otherwise keep the old secret without being told.
//
// Once deleted, the client's configs that reference it are re-announced, so their collectors stop being
// delivered with the old secret (the credential service fails them from then on, all-or-nothing): with
// force these are the referencing configs; without it, only configs written to reference it between the
// check and the deletion. A credential that is already gone is a NotFound (never in use), but its
// references are still re-announced: that makes retrying a delete whose re-announce failed safe.
func (s *Service) Delete(ctx context.Context, p tenancy.Principal, clientID, id uuid.UUID, force bool) error {
	if _, err := s.tenants.Client(ctx, p, clientID); err != nil {
		return err
	}
	if !force {
		if err := s.checkUnused(ctx, p, clientID, id); err != nil {
			return err
		}
	}
	err := s.backend.Delete(ctx, ref(clientID, id))
	if err != nil && !fault.Is(err, fault.NotFound) {
		return fmt.Errorf("credentials: delete: %w", err)
	}
	n, announceErr := s.reannounce(ctx, p, clientID, id, reasonDeletion)
	if err != nil {
		err = s.miss(ctx, p, id, fmt.Errorf("credentials: delete: %w", err))
	} else {
		detail := announced(n, announceErr)
		if force {
			detail["forced"] = true
		}
		s.audit(ctx, p, tenancy.ActionCredentialDelete, clientID, protocol.CredentialMeta{ID: id.String()}, detail)
	}
	if announceErr != nil {
		return notUpdated("the credential is deleted but agents were not yet updated; retry the DELETE", announceErr)
	}
	return err
}

// checkUnused fails with a Conflict when live configs of the client reference credential id. A
// credential the client does not have is not in use, whatever references it: Delete then answers
// NotFound and re-announces those references, as a retried forced delete does.
func (s *Service) checkUnused(ctx context.Context, p tenancy.Principal, clientID, id uuid.UUID) error {
	use, err := s.announcer.CredentialUse(ctx, p, clientID, id)
	if err != nil {
		return fmt.Errorf("credentials: delete: %w", err)
	}
	if use.Count() == 0 {
		return nil
	}
	if _, err := s.backend.Get(ctx, ref(clientID, id)); err != nil {
		if fault.Is(err, fault.NotFound) {
			return nil
		}
		return fmt.Errorf("credentials: delete: %w", err)
	}
	return &fault.Error{Kind: fault.Conflict, Code: CodeCredentialInUse, Message: inUseMessage(id, use)}
}

// inUseMessage says how many configs reference credential id and where, naming at most
// maxListedReferences of them (environments first, then hosts, each in id order).
func inUseMessage(id uuid.UUID, use configs.CredentialUse) string {
	places := make([]string, 0, min(use.Count(), maxListedReferences))
	for _, e := range use.Environments {
		if len(places) == maxListedReferences {
			break
		}
		places = append(places, "environment "+e.String())
	}
	for _, h := range use.Hosts {
		if len(places) == maxListedReferences {
			break
		}
		places = append(places, "host "+h.String())
	}
	where := strings.Join(places, ", ")
	if more := use.Count() - len(places); more > 0 {
		where += fmt.Sprintf(" and %d more", more)
	}
	noun := "configs reference"
	if use.Count() == 1 {
		noun = "config references"
	}
	return fmt.Sprintf("credential %s is in use: %d live %s %s it (%s); remove the credential_id from them first, "+
		"or delete with ?force=true (their pushes then fail until the references are removed)",
		id, use.Count(), use.ConfigType, noun, where)
}

// Rotate replaces a credential's secret and re-announces the client's configs that reference it, so
// agents receive the new secret. With no secret it re-encrypts the stored one under the newest key;
// agents would receive the same plaintext, so nothing is re-announced, unless the allowed targets
// change too (collectors aimed elsewhere are then withheld, or delivered again). Rotating again with the
// same secret re-encrypts it and re-announces, which is how a rotation whose re-announce failed is
// retried.
func (s *Service) Rotate(ctx context.Context, p tenancy.Principal, clientID, id uuid.UUID, in RotateInput) (protocol.CredentialMeta, error) {
	secret := in.Secret
	if err := validSecret(secret, false); err != nil {
		return protocol.CredentialMeta{}, err
	}
	if in.AllowedTargets != nil {
		if err := validTargets(*in.AllowedTargets); err != nil {
			return protocol.CredentialMeta{}, err
		}
	}
	if _, err := s.tenants.Client(ctx, p, clientID); err != nil {
		return protocol.CredentialMeta{}, err
	}
	meta, err := s.backend.Rotate(ctx, protocol.CredentialRotateRequest{ClientID: clientID.String(), ID: id.String(), Secret: secret,
		AllowedTargets: in.AllowedTargets})
	if err != nil {
		return protocol.CredentialMeta{}, s.miss(ctx, p, id, fmt.Errorf("credentials: rotate: %w", err))
	}
	if len(secret) == 0 && in.AllowedTargets == nil {
		s.audit(ctx, p, tenancy.ActionCredentialRotate, clientID, meta, nil)
		return meta, nil
	}
	n, err := s.reannounce(ctx, p, clientID, id, reasonRotation)
	s.audit(ctx, p, tenancy.ActionCredentialRotate, clientID, meta, announced(n, err))
	if err != nil {
		return protocol.CredentialMeta{}, notUpdated("the secret was rotated but agents were not yet updated; retry the rotation with the same secret", err)
	}
	return meta, nil
}

// reannounce re-announces the configs referencing credential id once the credential service has
// changed it, detached from the request's cancellation and bounded by reannounceTimeout.
func (s *Service) reannounce(ctx context.Context, p tenancy.Principal, clientID, id uuid.UUID, reason string) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reannounceTimeout)
	defer cancel()
	n, err := s.announcer.ReannounceCredential(ctx, p, clientID, id, reason)
	if err != nil {
		return 0, fmt.Errorf("credentials: re-announce: %w", err)
	}
	return n, nil
}

// notUpdated is the failure of a re-announce after the credential service made its change.
func notUpdated(message string, err error) error {
	return &fault.Error{Kind: fault.Unavailable, Code: CodeAgentsNotUpdated, Message: message, Err: err}
}

// announced is the audit detail of a re-announce.
func announced(n int, err error) map[string]any {
	if err != nil {
		return map[string]any{"agents_updated": false}
	}
	return map[string]any{"agents_updated": true, "reannounced_configs": n}
}

// miss turns the credential service's not-found into an audited miss (the credential may belong to
// another client).
func (s *Service) miss(ctx context.Context, p tenancy.Principal, id uuid.UUID, err error) error {
	if fault.Is(err, fault.NotFound) {
		return s.guard.Missing(ctx, p, tenancy.KindCredential, id)
	}
	return err
}

func (s *Service) audit(ctx context.Context, p tenancy.Principal, action string, clientID uuid.UUID, meta protocol.CredentialMeta, extra map[string]any) {
	id, _ := uuid.Parse(meta.ID)
	detail := map[string]any{}
	for k, v := range extra {
		detail[k] = v
	}
	if meta.Name != "" {
		detail["name"] = meta.Name
	}
	if meta.Fields != nil {
		detail["fields"] = meta.Fields // field names only, never values
	}
	if meta.AllowedTargets != nil {
		detail["allowed_targets"] = meta.AllowedTargets
	}
	s.guard.Record(ctx, p, action, uuid.NullUUID{UUID: clientID, Valid: true}, tenancy.KindCredential, id, detail)
}

func ref(clientID, id uuid.UUID) protocol.CredentialRef {
	return protocol.CredentialRef{ClientID: clientID.String(), ID: id.String()}
}

// MaxAllowedTargets bounds a credential's allowed targets (the credential service enforces the same).
const MaxAllowedTargets = 32

// validTargets checks what config-api can check of allowed targets before asking the credential
// service, which validates each pattern's syntax and answers 400 naming it.
func validTargets(targets []string) error {
	if len(targets) > MaxAllowedTargets {
		return fault.Invalidf("allowed_targets has %d entries, at most %d are allowed", len(targets), MaxAllowedTargets)
	}
	return nil
}

// validSecret applies agentconfig.ValidateSecret, the rule the credential service applies too; values are
// never echoed in messages. An empty secret is refused unless it is optional (a rotation without one
// re-encrypts the stored secret).
func validSecret(secret map[string]string, required bool) error {
	if len(secret) == 0 && !required {
		return nil
	}
	if _, err := agentconfig.ValidateSecret(secret); err != nil {
		return fault.Invalidf("%s", err.Error())
	}
	return nil
}
