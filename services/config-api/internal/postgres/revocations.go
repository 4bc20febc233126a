package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
)

// Advisory lock keys (transaction-scoped) of the NATS account's revocation list.
const (
	// revocationWriteLock serializes the writers of the list, so a per-client cap cannot be passed by
	// revocations racing on two replicas.
	revocationWriteLock int64 = 0x636673_0001
	// revocationPushLock serializes the pushes of the list to the NATS servers across replicas: each
	// push reads the list under it, so the last push carries every revocation committed before it.
	revocationPushLock int64 = 0x636673_0002
)

// RevokeHosts revokes hosts and lists their NATS keys, all or none (see hosts.RevocationStore).
func (s *Store) RevokeHosts(ctx context.Context, filter, environmentID uuid.NullUUID, ids []uuid.UUID, limits hosts.RevocationLimits) (int, error) {
	var listed int
	err := s.inTx(ctx, func(_ pgx.Tx, q *sqlcdb.Queries) error {
		if err := q.LockRevocations(ctx, revocationWriteLock); err != nil {
			return err
		}
		rows, err := q.LockHostsForRevocation(ctx, sqlcdb.LockHostsForRevocationParams{Ids: ids, ClientFilter: filter, EnvironmentID: environmentID})
		if err != nil {
			return err
		}
		found := make(map[uuid.UUID]bool, len(rows))
		newKeys := map[uuid.UUID]int{}
		for _, r := range rows {
			found[r.ID] = true
			if r.RevokedAt == nil && r.NatsPublicKey != nil {
				newKeys[r.ClientID]++
			}
		}
		if len(rows) != len(ids) {
			me := &hosts.MissingHostsError{}
			for i, id := range ids {
				if !found[id] {
					me.Indexes = append(me.Indexes, i)
				}
			}
			return me
		}
		if err := checkLimits(ctx, q, newKeys, limits); err != nil {
			return err
		}
		revoked, err := q.RevokeHosts(ctx, ids)
		if err != nil {
			return err
		}
		if len(revoked) > 0 {
			listed = int(revoked[0].Listed)
		}
		return nil
	})
	if err != nil {
		var me *hosts.MissingHostsError
		if errors.As(err, &me) || fault.KindOf(err) != fault.Internal {
			return 0, err
		}
		return 0, fmt.Errorf("postgres: revoke hosts: %w", err)
	}
	return listed, nil
}

// checkLimits fails with hosts.ErrRevocationLimit when adding newKeys (per client) to the entries
// still pending at limits.Cutoff would pass a cap. Zero limits check nothing.
func checkLimits(ctx context.Context, q *sqlcdb.Queries, newKeys map[uuid.UUID]int, limits hosts.RevocationLimits) error {
	if limits.PerClient <= 0 && limits.Total <= 0 {
		return nil
	}
	total := 0
	for _, n := range newKeys {
		total += n
	}
	for client, n := range newKeys {
		c, err := q.CountPendingRevocations(ctx, sqlcdb.CountPendingRevocationsParams{ClientID: client, Since: limits.Since, Cutoff: &limits.Cutoff})
		if err != nil {
			return err
		}
		if limits.PerClient > 0 && int(c.ClientPending)+n > limits.PerClient {
			return hosts.ErrRevocationLimit
		}
		if limits.Total > 0 && int(c.TotalPending)+total > limits.Total {
			return hosts.ErrRevocationLimit
		}
	}
	return nil
}

// ReplaceNATSKey gives a host a new NATS key and revokes the old one (see hosts.RevocationStore).
func (s *Store) ReplaceNATSKey(ctx context.Context, filter uuid.NullUUID, id uuid.UUID, publicKey string, expires time.Time, limits hosts.RevocationLimits) error {
	err := s.inTx(ctx, func(_ pgx.Tx, q *sqlcdb.Queries) error {
		if err := q.LockRevocations(ctx, revocationWriteLock); err != nil {
			return err
		}
		h, err := q.LockHostForReissue(ctx, sqlcdb.LockHostForReissueParams{ID: id, ClientFilter: filter})
		if err != nil {
			return classify(err, "host")
		}
		if h.RevokedAt != nil {
			return fault.Conflictf("host %s is revoked; register a new host instead", id)
		}
		if h.NatsPublicKey != nil {
			if err := checkLimits(ctx, q, map[uuid.UUID]int{h.ClientID: 1}, limits); err != nil {
				return err
			}
			var pruneAfter *time.Time
			if !h.NatsUnexpiring {
				pruneAfter = h.NatsExpiresAt
			}
			if err := q.InsertNATSRevocation(ctx, sqlcdb.InsertNATSRevocationParams{
				PublicKey: *h.NatsPublicKey, ClientID: h.ClientID, HostID: uuid.NullUUID{UUID: id, Valid: true},
				ExpiresAt: h.NatsExpiresAt, PruneAfter: pruneAfter,
			}); err != nil {
				return err
			}
		}
		return q.ReplaceHostNATSKey(ctx, sqlcdb.ReplaceHostNATSKeyParams{NatsPublicKey: &publicKey, NatsExpiresAt: &expires, ID: id})
	})
	if err != nil && fault.KindOf(err) == fault.Internal {
		return fmt.Errorf("postgres: replace NATS key: %w", err)
	}
	return err
}

// RenewNATSExpiry records a renewed JWT's expiry (see hosts.RevocationStore).
func (s *Store) RenewNATSExpiry(ctx context.Context, agentID, publicKey string, expires, renewableAfter time.Time) error {
	_, err := s.q.RenewHostNATSExpiry(ctx, sqlcdb.RenewHostNATSExpiryParams{
		ExpiresAt: expires, AgentID: agentID, NatsPublicKey: &publicKey, RenewableAfter: renewableAfter,
	})
	return classify(err, "host")
}

// WithRevocations runs fn with the desired revocation list under the push lock, deleting the entries
// pruned at cutoff (see hosts.RevocationStore). The transaction stays open while fn pushes; a push is
// one NATS request.
func (s *Store) WithRevocations(ctx context.Context, cutoff time.Time, fn func(map[string]time.Time) error) error {
	return s.inTx(ctx, func(_ pgx.Tx, q *sqlcdb.Queries) error {
		if err := q.LockRevocations(ctx, revocationPushLock); err != nil {
			return fmt.Errorf("postgres: revocation push lock: %w", err)
		}
		if _, err := q.DeletePrunedNATSRevocations(ctx, &cutoff); err != nil {
			return fmt.Errorf("postgres: prune revocations: %w", err)
		}
		rows, err := q.ListNATSRevocations(ctx, &cutoff)
		if err != nil {
			return fmt.Errorf("postgres: list revocations: %w", err)
		}
		revoked := make(map[string]time.Time, len(rows))
		for _, r := range rows {
			revoked[r.PublicKey] = r.RevokeBefore
		}
		return fn(revoked)
	})
}
