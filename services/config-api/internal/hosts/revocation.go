package hosts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// Issuer signs agents' own NATS users (see libs/natsauth) with the account's scoped agent signing key.
type Issuer interface {
	// Issue creates a NATS user for agentID whose JWT expires at expires: its creds file and public key.
	Issue(agentID string, expires time.Time) (creds []byte, publicKey string, err error)
	// Renew signs a fresh JWT, expiring at expires, for the agent's existing user key.
	Renew(agentID, publicKey string, expires time.Time) (jwt string, err error)
}

// Accounts updates the NATS account the agents belong to on the servers. It holds (or reaches the
// holder of) the key that signs the account; config-api never needs it.
type Accounts interface {
	// Push signs the account with revoked (user key -> JWTs issued at or before it are refused) as its
	// revocation list and pushes it to the servers.
	Push(ctx context.Context, revoked map[string]time.Time) error
	// Sync pushes the same only when the servers' account differs, and reports whether it pushed.
	Sync(ctx context.Context, revoked map[string]time.Time) (bool, error)
}

// NATSIdentity turns on per-agent NATS users: every registered host gets its own expiring user, and
// revoking hosts lists their keys in the account's revocation list.
type NATSIdentity struct {
	Issuer   Issuer
	Accounts Accounts
	// Lifetime is how long an issued or renewed agent JWT is valid (default DefaultCredsLifetime). It
	// is also how long a revocation stays in the account: after it every JWT the revocation refuses
	// has expired.
	Lifetime time.Duration
	// PruneGrace keeps a revocation this much longer than the JWTs it refuses, for clock skew between
	// config-api and the NATS servers (default DefaultPruneGrace).
	PruneGrace time.Duration
	// MaxPendingPerClient caps one client's revocations made within one Lifetime that are still in the
	// account, so no tenant can grow the account JWT, which every tenant shares, past what the servers
	// accept (default DefaultMaxPendingPerClient).
	MaxPendingPerClient int
	// MaxPending caps all clients' revocations together (default DefaultMaxPending): at about 93 bytes
	// an entry, the default keeps the account JWT well under the servers' 1 MB max_payload.
	MaxPending int
	Log        *zap.Logger
}

// NATSIdentity defaults.
const (
	DefaultCredsLifetime       = 30 * 24 * time.Hour
	DefaultPruneGrace          = 5 * time.Minute
	DefaultMaxPendingPerClient = 2000
	DefaultMaxPending          = 8000
	// MaxBatchRevoke caps one batch revocation.
	MaxBatchRevoke = 1000
)

func (n NATSIdentity) withDefaults() NATSIdentity {
	if n.Lifetime <= 0 {
		n.Lifetime = DefaultCredsLifetime
	}
	if n.PruneGrace <= 0 {
		n.PruneGrace = DefaultPruneGrace
	}
	if n.MaxPendingPerClient <= 0 {
		n.MaxPendingPerClient = DefaultMaxPendingPerClient
	}
	if n.MaxPending <= 0 {
		n.MaxPending = DefaultMaxPending
	}
	if n.Log == nil {
		n.Log = zap.NewNop()
	}
	return n
}

// expiry is when a JWT issued now expires (whole seconds, as JWTs carry them).
func (n *NATSIdentity) expiry() time.Time {
	return time.Now().Add(n.Lifetime).Truncate(time.Second)
}

// RevocationLimits is what a revocation may add to the account's list: entries still pending at Cutoff
// (not prunable yet) count — in all, and per client those it made since Since (one lifetime ago), so
// revocations from before the cap existed never lock a client out.
type RevocationLimits struct {
	Cutoff    time.Time
	Since     time.Time
	PerClient int
	Total     int
}

// ErrRevocationLimit is the store's answer when a revocation would pass a RevocationLimits cap.
var ErrRevocationLimit = &fault.Error{Kind: fault.Conflict, Code: "revocation_limit",
	Message: "too many hosts revoked recently: the NATS account's revocation list is full for this client; " +
		"revocations leave it once the credentials they refuse have expired — retry later, or revoke fewer hosts"}

// MissingHostsError is RevokeHosts' answer when some ids are not hosts the caller can revoke (in the
// environment given); nothing was revoked.
type MissingHostsError struct {
	// Indexes are the positions of the missing ids in the request.
	Indexes []int
}

func (e *MissingHostsError) Error() string { return fmt.Sprintf("%d hosts not found", len(e.Indexes)) }

// RevocationStore persists revocations and the account's desired revocation list.
type RevocationStore interface {
	// RevokeHosts revokes the hosts ids (within filter, and environmentID when Valid), all or none: ids
	// it cannot find fail it with a *MissingHostsError. Each newly revoked host's NATS key joins the
	// revocation list, unless that would pass limits (ErrRevocationLimit). Hosts revoked before are
	// left as they are. It returns how many keys joined the list.
	RevokeHosts(ctx context.Context, filter, environmentID uuid.NullUUID, ids []uuid.UUID, limits RevocationLimits) (int, error)
	// ReplaceNATSKey gives a host (within filter, not revoked) a new NATS user key whose JWT expires at
	// expires, and lists the key it had, if any, in the revocation list (counted against limits).
	ReplaceNATSKey(ctx context.Context, filter uuid.NullUUID, id uuid.UUID, publicKey string, expires time.Time, limits RevocationLimits) error
	// RenewNATSExpiry records that a JWT expiring at expires is issued for agentID's key publicKey. It
	// fails with fault.NotFound unless the host exists, is not revoked, holds that key and its latest
	// JWT expires before renewableAfter.
	RenewNATSExpiry(ctx context.Context, agentID, publicKey string, expires, renewableAfter time.Time) error
	// WithRevocations runs fn with the desired revocation list (entries pruned at cutoff left out,
	// and deleted), holding a lock that serializes it across every config-api replica.
	WithRevocations(ctx context.Context, cutoff time.Time, fn func(revoked map[string]time.Time) error) error
}

func (s *Service) limits() RevocationLimits {
	return RevocationLimits{Cutoff: s.cutoff(), Since: s.now().Add(-s.identity.Lifetime),
		PerClient: s.identity.MaxPendingPerClient, Total: s.identity.MaxPending}
}

// cutoff is the instant before which an entry's JWTs have all expired, with the clock-skew grace.
func (s *Service) cutoff() time.Time { return s.now().Add(-s.identity.PruneGrace) }

// Revoke marks a host revoked: it keeps its history but gets no more configs, and its NATS user is
// refused. Revoking twice is a no-op that keeps the first revocation time.
func (s *Service) Revoke(ctx context.Context, p tenancy.Principal, id uuid.UUID) (Host, error) {
	if err := s.revoke(ctx, p, uuid.NullUUID{}, []uuid.UUID{id}); err != nil {
		var me *MissingHostsError
		if asMissing(err, &me) {
			return Host{}, s.guard.Missing(ctx, p, tenancy.KindHost, id)
		}
		return Host{}, err
	}
	h, err := s.Get(ctx, p, id)
	if err != nil {
		return Host{}, err
	}
	s.guard.Record(ctx, p, tenancy.ActionHostRevoked, uuid.NullUUID{UUID: h.ClientID, Valid: true}, tenancy.KindHost, id, nil)
	return h, nil
}

// RevokeBatch revokes 1 to MaxBatchRevoke hosts of one environment, all or none, with one update of
// the NATS account. An id that is not a host of the environment fails the batch (not found, naming
// the entry); hosts already revoked stay as they are. One audit event records the batch.
func (s *Service) RevokeBatch(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, ids []uuid.UUID) (int, error) {
	if err := checkHostIDs(ids, MaxBatchRevoke); err != nil {
		return 0, err
	}
	env, err := s.environments.Environment(ctx, p, environmentID)
	if err != nil {
		return 0, err
	}
	err = s.revoke(ctx, p, uuid.NullUUID{UUID: env.ID, Valid: true}, ids)
	var me *MissingHostsError
	if asMissing(err, &me) {
		// Audits the first missing id when it is another client's host (the answer is the same).
		_ = s.guard.Missing(ctx, p, tenancy.KindHost, ids[me.Indexes[0]])
		return 0, fault.NotFoundf("host_ids[%d]: no such host in this environment (%d of %d not found); nothing was revoked",
			me.Indexes[0], len(me.Indexes), len(ids))
	}
	if err != nil {
		return 0, err
	}
	s.guard.Record(ctx, p, tenancy.ActionHostsRevoked, uuid.NullUUID{UUID: env.ClientID, Valid: true},
		tenancy.KindEnvironment, env.ID, map[string]any{"hosts": len(ids)})
	return len(ids), nil
}

func asMissing(err error, target **MissingHostsError) bool { return errors.As(err, target) }

// checkHostIDs checks the host_ids of a batch route: 1 to max ids, none twice.
func checkHostIDs(ids []uuid.UUID, max int) error {
	if len(ids) == 0 || len(ids) > max {
		return fault.Invalidf("host_ids must list 1 to %d hosts, not %d", max, len(ids))
	}
	seen := make(map[uuid.UUID]int, len(ids))
	for i, id := range ids {
		if j, dup := seen[id]; dup {
			return fault.Invalidf("host_ids[%d]: the same as host_ids[%d]", i, j)
		}
		seen[id] = i
	}
	return nil
}

// revoke revokes ids in the database and then pushes the account's revocation list once.
func (s *Service) revoke(ctx context.Context, p tenancy.Principal, environmentID uuid.NullUUID, ids []uuid.UUID) error {
	limits := RevocationLimits{}
	if s.identity != nil {
		limits = s.limits()
	}
	listed, err := s.store.RevokeHosts(ctx, p.Filter(), environmentID, ids, limits)
	if err != nil {
		var me *MissingHostsError
		if errors.As(err, &me) || fault.KindOf(err) != fault.Internal {
			return err
		}
		return fmt.Errorf("hosts: revoke: %w", err)
	}
	if s.identity == nil || listed == 0 {
		return nil
	}
	if err := s.PushRevocations(ctx); err != nil {
		return &fault.Error{Kind: fault.Unavailable, Err: err,
			Message: "hosts revoked, but the NATS account could not be updated yet; it is retried automatically (or revoke again)"}
	}
	return nil
}

// PushRevocations pushes the desired revocation list (from the database, pruned) to the NATS account,
// serialized with every other replica's pushes, so the last push always carries every revocation
// committed before it.
func (s *Service) PushRevocations(ctx context.Context) error {
	return s.store.WithRevocations(ctx, s.cutoff(), func(revoked map[string]time.Time) error {
		return s.identity.Accounts.Push(ctx, revoked)
	})
}

// ReconcileRevocations re-pushes the desired revocation list when the servers' account differs (a
// failed or overwritten push, or entries that are due to be pruned). It reports whether it pushed.
func (s *Service) ReconcileRevocations(ctx context.Context) (bool, error) {
	if s.identity == nil {
		return false, nil
	}
	var pushed bool
	err := s.store.WithRevocations(ctx, s.cutoff(), func(revoked map[string]time.Time) error {
		var err error
		pushed, err = s.identity.Accounts.Sync(ctx, revoked)
		return err
	})
	return pushed, err
}

// RunReconciler calls ReconcileRevocations every interval until ctx ends, logging failures (the next
// round retries them).
func (s *Service) RunReconciler(ctx context.Context, interval time.Duration) {
	if s.identity == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pushed, err := s.ReconcileRevocations(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.identity.Log.Warn("NATS account reconcile failed", zap.Error(err))
		case pushed:
			s.identity.Log.Info("NATS account revocations re-pushed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ReissueCredentials gives a host new NATS credentials — a new user key and JWT — and revokes the key
// it had. It is how an agent whose credentials expired while it was off re-enrols (the operator
// installs the new creds file on the host), and how credentials issued before JWTs expired are
// replaced by expiring ones. The creds file is in the result's NATSCredentials, shown once.
func (s *Service) ReissueCredentials(ctx context.Context, p tenancy.Principal, id uuid.UUID) (Host, error) {
	// The host first: another client's is an audited 404, whatever the deployment.
	h, err := s.Get(ctx, p, id)
	if err != nil {
		return Host{}, err
	}
	if s.identity == nil {
		return Host{}, &fault.Error{Kind: fault.PreconditionFailed, Code: "no_nats_identity",
			Message: "this deployment issues no per-agent NATS credentials"}
	}
	if h.RevokedAt != nil {
		return Host{}, fault.Conflictf("host %s is revoked; register a new host instead", id)
	}
	expires := s.identity.expiry()
	creds, pub, err := s.identity.Issuer.Issue(h.AgentID, expires)
	if err != nil {
		return Host{}, fmt.Errorf("hosts: reissue NATS credentials: %w", err)
	}
	if err := s.store.ReplaceNATSKey(ctx, p.Filter(), id, pub, expires, s.limits()); err != nil {
		if fault.Is(err, fault.NotFound) {
			return Host{}, s.guard.Missing(ctx, p, tenancy.KindHost, id)
		}
		if fault.KindOf(err) != fault.Internal {
			return Host{}, err
		}
		return Host{}, fmt.Errorf("hosts: reissue NATS credentials: %w", err)
	}
	h.NATSPublicKey, h.NATSExpiresAt, h.NATSCredentials = pub, expires, string(creds)
	s.guard.Record(ctx, p, tenancy.ActionHostCredsReissued, uuid.NullUUID{UUID: h.ClientID, Valid: true}, tenancy.KindHost, id, nil)
	if err := s.PushRevocations(ctx); err != nil {
		// The new credentials work; only the old key's revocation waits for the reconciler.
		s.identity.Log.Warn("NATS account push after re-issue failed; the reconciler retries it", zap.Error(err))
	}
	return h, nil
}

// ErrRenewRefused is RenewCredentials' answer for an unknown or revoked host, a key the host does not
// hold, or credentials renewed less than half a lifetime ago.
var ErrRenewRefused = fault.NotFoundf("no active host holds these credentials, or they were renewed recently")

// RenewCredentials signs a fresh JWT for an agent's existing NATS user key, when the agent's host is
// registered, not revoked and holds that key. agentID is the subject token the request arrived on
// (the agent's NATS identity), never a payload field.
func (s *Service) RenewCredentials(ctx context.Context, agentID, publicKey string) (string, time.Time, error) {
	if s.identity == nil {
		return "", time.Time{}, ErrRenewRefused
	}
	if !protocol.ValidAgentID(agentID) || publicKey == "" {
		return "", time.Time{}, ErrRenewRefused
	}
	expires := s.identity.expiry()
	// Recorded first (under the host's row lock, only while it is not revoked), so a revocation that
	// follows lists the key until this JWT has expired too.
	// Renewable once less than half a lifetime is left (agents renew at a third left).
	renewableAfter := s.now().Add(s.identity.Lifetime / 2)
	if err := s.store.RenewNATSExpiry(ctx, agentID, publicKey, expires, renewableAfter); err != nil {
		if fault.Is(err, fault.NotFound) {
			return "", time.Time{}, ErrRenewRefused
		}
		return "", time.Time{}, fmt.Errorf("hosts: renew: %w", err)
	}
	token, err := s.identity.Issuer.Renew(agentID, publicKey, expires)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("hosts: renew: %w", err)
	}
	return token, expires, nil
}
