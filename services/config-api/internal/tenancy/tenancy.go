// Package tenancy holds who is calling (the Principal behind an API token) and the rule that every
// object belongs to one client: a caller sees only its own client's objects, an admin sees all, and an
// attempt to reach another client's object is answered as "not found" and audited.
package tenancy

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/configsync/configsync/services/config-api/internal/fault"
)

// Principal is the authenticated caller: one API token, scoped to a client or admin. Admin is an
// explicit property: the zero value (what a public route holds) is no one — not an admin, and bound to
// no client, so every client-filtered lookup it makes finds nothing.
type Principal struct {
	TokenID uuid.UUID
	Name    string
	// ClientID is the token's client; not Valid for an admin token.
	ClientID uuid.NullUUID
	// IsAdmin is set only for an admin token (one bound to no client).
	IsAdmin bool
}

// Admin reports whether the caller is an admin (not bound to a client).
func (p Principal) Admin() bool { return p.IsAdmin && !p.ClientID.Valid }

// noClient is a client filter that matches no row: no client has the nil UUID.
var noClient = uuid.NullUUID{UUID: uuid.Nil, Valid: true}

// Filter is the client every lookup of this caller is restricted to; not Valid for an admin. A caller
// that is neither an admin nor bound to a client gets a filter that matches nothing.
func (p Principal) Filter() uuid.NullUUID {
	switch {
	case p.Admin():
		return uuid.NullUUID{}
	case p.ClientID.Valid:
		return p.ClientID
	default:
		return noClient
	}
}

// CanAccess reports whether the caller may see objects of clientID.
func (p Principal) CanAccess(clientID uuid.UUID) bool {
	return p.Admin() || (p.ClientID.Valid && p.ClientID.UUID == clientID)
}

// RequireAdmin fails unless the caller is an admin.
func (p Principal) RequireAdmin() error {
	if !p.Admin() {
		return fault.Forbiddenf("this operation needs an admin token")
	}
	return nil
}

// Kind names a kind of tenant-owned object.
type Kind string

// Kinds of tenant-owned objects.
const (
	KindClient      Kind = "client"
	KindEnvironment Kind = "environment"
	KindHost        Kind = "host"
	KindCredential  Kind = "credential"
	KindToken       Kind = "token"
)

// Owners finds the client an object belongs to, unfiltered. It is used only to tell a cross-tenant
// attempt from a plain miss; nothing it returns reaches the caller.
type Owners interface {
	OwnerOf(ctx context.Context, kind Kind, id uuid.UUID) (clientID uuid.UUID, found bool, err error)
}

// AuditEvent is one security-relevant event.
type AuditEvent struct {
	Actor    string
	ClientID uuid.NullUUID
	Action   string
	Object   string
	Detail   map[string]any
}

// AuditLog stores audit events.
type AuditLog interface {
	RecordAudit(ctx context.Context, ev AuditEvent) error
}

// Audit actions.
const (
	ActionCrossTenant     = "cross_tenant_access"
	ActionTokenIssued     = "token_issued"
	ActionTokenRevoked    = "token_revoked"
	ActionHostRegistered  = "host_registered"
	ActionHostRevoked     = "host_revoked"
	ActionHostsRegistered = "hosts_registered"
	ActionHostsRevoked    = "hosts_revoked"
	// ActionHostLabelsSet: an operator changed hosts' inventory labels (one host, or a batch).
	ActionHostLabelsSet = "host_labels_set"
	// ActionHostCredsReissued: a host got new NATS credentials (its old key revoked).
	ActionHostCredsReissued = "host_credentials_reissued"
	ActionCredentialCreate  = "credential_created"
	ActionCredentialRotate  = "credential_rotated"
	ActionCredentialDelete  = "credential_deleted"
)

// Guard answers client-filtered misses and records audit events.
type Guard struct {
	owners Owners
	audit  AuditLog
	log    *zap.Logger
}

// NewGuard returns a Guard.
func NewGuard(owners Owners, audit AuditLog, log *zap.Logger) *Guard {
	return &Guard{owners: owners, audit: audit, log: log}
}

// Visible reads the object (kind, id) with read, filtered to what p may see. What read does not find
// is answered by Missing (a NotFound fault, audited when it is another client's); another failure is
// wrapped with what.
func Visible[T any](ctx context.Context, g *Guard, p Principal, kind Kind, id uuid.UUID, what string,
	read func(ctx context.Context, filter uuid.NullUUID, id uuid.UUID) (T, error)) (T, error) {
	var none T
	v, err := read(ctx, p.Filter(), id)
	if fault.Is(err, fault.NotFound) {
		return none, g.Missing(ctx, p, kind, id)
	}
	if err != nil {
		return none, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

// Missing is called when a client-filtered lookup of (kind, id) found nothing. It always returns a
// NotFound fault; when the object exists under another client it also logs and audits the attempt.
func (g *Guard) Missing(ctx context.Context, p Principal, kind Kind, id uuid.UUID) error {
	notFound := fault.NotFoundf("%s %s not found", kind, id)
	if p.Admin() {
		return notFound
	}
	owner, found, err := g.owners.OwnerOf(ctx, kind, id)
	if err != nil {
		g.log.Error("owner probe failed", zap.String("kind", string(kind)), zap.Stringer("object_id", id), zap.Error(err))
		return notFound
	}
	if !found || owner == p.ClientID.UUID {
		return notFound
	}
	g.log.Warn("cross-tenant access denied",
		zap.Stringer("token_id", p.TokenID),
		zap.Stringer("caller_client_id", p.ClientID.UUID),
		zap.Stringer("owner_client_id", owner),
		zap.String("kind", string(kind)),
		zap.Stringer("object_id", id))
	g.Record(ctx, p, ActionCrossTenant, uuid.NullUUID{UUID: owner, Valid: true}, kind, id, nil)
	return notFound
}

// Record stores an audit event about (kind, id) in clientID's scope. A failure to store it is logged,
// never returned: the caller's request has already been decided.
func (g *Guard) Record(ctx context.Context, p Principal, action string, clientID uuid.NullUUID, kind Kind, id uuid.UUID, detail map[string]any) {
	d := map[string]any{"token_id": p.TokenID.String()}
	if p.ClientID.Valid {
		d["caller_client_id"] = p.ClientID.UUID.String()
	}
	for k, v := range detail {
		d[k] = v
	}
	ev := AuditEvent{
		Actor:    p.Name,
		ClientID: clientID,
		Action:   action,
		Object:   string(kind) + ":" + id.String(),
		Detail:   d,
	}
	// The request may be cancelled right after its answer; the audit row must still be written.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := g.audit.RecordAudit(ctx, ev); err != nil {
		g.log.Error("audit write failed", zap.String("action", action), zap.String("object", ev.Object), zap.Error(err))
	}
}
