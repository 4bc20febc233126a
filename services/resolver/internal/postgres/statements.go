package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/postgres/sqlcdb"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

var (
	_ resolve.StatementStore  = (*Store)(nil)
	_ resolve.StatementPruner = (*Store)(nil)
)

// PruneConfigStatements deletes up to limit stored statements created before before that can no
// longer be served (superseded by a newer version of their scope and type, or of a host that is gone),
// in one statement, and returns how many it deleted.
func (s *Store) PruneConfigStatements(ctx context.Context, before time.Time, limit int) (int64, error) {
	n, err := s.q.PruneConfigStatements(ctx, sqlcdb.PruneConfigStatementsParams{Before: before, MaxRows: int32(min(limit, 1<<30))})
	if err != nil {
		return 0, fmt.Errorf("postgres: prune config statements: %w", err)
	}
	return n, nil
}

// ConfigStatements reads the stored statements of keys in one query.
func (s *Store) ConfigStatements(ctx context.Context, keys []resolve.StatementKey) (map[resolve.StatementKey]protocol.Signed, error) {
	p := sqlcdb.ConfigStatementsParams{
		Scopes:      make([]string, len(keys)),
		ConfigTypes: make([]string, len(keys)),
		Versions:    make([]int64, len(keys)),
	}
	for i, k := range keys {
		p.Scopes[i], p.ConfigTypes[i], p.Versions[i] = k.Scope, k.ConfigType, k.Version
	}
	rows, err := s.q.ConfigStatements(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("postgres: config statements: %w", err)
	}
	out := make(map[resolve.StatementKey]protocol.Signed, len(rows))
	for _, r := range rows {
		out[resolve.StatementKey{Scope: r.Scope, ConfigType: r.ConfigType, Version: r.Version}] =
			protocol.Signed{Statement: r.Statement, KeyID: r.KeyID, Signature: r.Signature}
	}
	return out, nil
}

// SaveConfigStatements stores statements in one statement; keys stored already keep their rows.
func (s *Store) SaveConfigStatements(ctx context.Context, statements map[resolve.StatementKey]protocol.Signed) error {
	var p sqlcdb.SaveConfigStatementsParams
	for k, st := range statements {
		p.Scopes = append(p.Scopes, k.Scope)
		p.ConfigTypes = append(p.ConfigTypes, k.ConfigType)
		p.Versions = append(p.Versions, k.Version)
		p.Statements = append(p.Statements, st.Statement)
		p.KeyIds = append(p.KeyIds, st.KeyID)
		p.Signatures = append(p.Signatures, st.Signature)
	}
	if err := s.q.SaveConfigStatements(ctx, p); err != nil {
		return fmt.Errorf("postgres: save config statements: %w", err)
	}
	return nil
}

// SaveIdentityStatements stores identity statements in one statement.
func (s *Store) SaveIdentityStatements(ctx context.Context, statements map[string]protocol.Signed) error {
	var p sqlcdb.SaveIdentityStatementsParams
	for id, st := range statements {
		u, err := uuid.Parse(id)
		if err != nil {
			return fmt.Errorf("postgres: host id: %w", err)
		}
		p.HostIds = append(p.HostIds, u)
		p.Statements = append(p.Statements, st.Statement)
		p.KeyIds = append(p.KeyIds, st.KeyID)
		p.Signatures = append(p.Signatures, st.Signature)
	}
	if err := s.q.SaveIdentityStatements(ctx, p); err != nil {
		return fmt.Errorf("postgres: save identity statements: %w", err)
	}
	return nil
}

// CredentialFields reads the field names of a client's credentials. Ids that are not UUIDs name no
// credential and are left out.
func (s *Store) CredentialFields(ctx context.Context, clientID string, credentialIDs []string) (map[string][]string, error) {
	client, err := uuid.Parse(clientID)
	if err != nil {
		return nil, fmt.Errorf("postgres: client id: %w", err)
	}
	ids := make([]uuid.UUID, 0, len(credentialIDs))
	for _, id := range credentialIDs {
		if u, err := uuid.Parse(id); err == nil {
			ids = append(ids, u)
		}
	}
	rows, err := s.q.CredentialFields(ctx, sqlcdb.CredentialFieldsParams{ClientID: client, Ids: ids})
	if err != nil {
		return nil, fmt.Errorf("postgres: credential fields: %w", err)
	}
	out := make(map[string][]string, len(rows))
	for _, r := range rows {
		out[r.ID.String()] = r.Fields
	}
	return out, nil
}
