package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/inlinesecrets"
	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
)

var _ inlinesecrets.Store = (*Store)(nil)

// EnvironmentsWithInlineSecrets lists the environments whose live collectors config holds a secret
// inline, in id order.
func (s *Store) EnvironmentsWithInlineSecrets(ctx context.Context) ([]uuid.UUID, error) {
	ids, err := s.q.ListEnvironmentsWithInlineSecrets(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: environments with inline secrets: %w", err)
	}
	return ids, nil
}

// HostsWithInlineSecrets lists the hosts whose live collectors override holds a secret inline, in id
// order.
func (s *Store) HostsWithInlineSecrets(ctx context.Context) ([]uuid.UUID, error) {
	ids, err := s.q.ListHostsWithInlineSecrets(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: hosts with inline secrets: %w", err)
	}
	return ids, nil
}

// RevisionsWithInlineSecrets returns up to limit collectors revisions after afterID whose data holds an
// inline secret value that is not yet redacted, in id order (only ID, OldData and NewData are set).
func (s *Store) RevisionsWithInlineSecrets(ctx context.Context, afterID int64, limit int) ([]inlinesecrets.Revision, error) {
	rows, err := s.q.ListRevisionsWithInlineSecrets(ctx, sqlcdb.ListRevisionsWithInlineSecretsParams{AfterID: afterID, MaxRows: int32(limit)})
	return listOf(rows, err, "revisions with inline secrets", func(r sqlcdb.ListRevisionsWithInlineSecretsRow) inlinesecrets.Revision {
		return inlinesecrets.Revision{ID: r.ID, OldData: r.OldData, NewData: r.NewData}
	})
}

// ScrubRevision replaces the old and new data of one revision.
func (s *Store) ScrubRevision(ctx context.Context, id int64, oldData, newData json.RawMessage) error {
	if err := s.q.ScrubRevision(ctx, sqlcdb.ScrubRevisionParams{ID: id, OldData: oldData, NewData: newData}); err != nil {
		return fmt.Errorf("postgres: scrub revision %d: %w", id, err)
	}
	return nil
}
