package postgres

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
	"github.com/configsync/configsync/services/config-api/internal/tokens"
)

// CreateToken stores a token hash.
func (s *Store) CreateToken(ctx context.Context, name string, hash []byte, clientID uuid.NullUUID) (tokens.Token, error) {
	row, err := s.q.CreateAPIToken(ctx, sqlcdb.CreateAPITokenParams{Name: name, TokenHash: hash, ClientID: clientID})
	if err != nil {
		return tokens.Token{}, classify(err, "token")
	}
	return tokens.Token{ID: row.ID, Name: row.Name, ClientID: row.ClientID, CreatedAt: row.CreatedAt}, nil
}

// TokenByHash finds an active token by its hash.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (tokens.Token, error) {
	row, err := s.q.GetAPITokenByHash(ctx, hash)
	if err != nil {
		return tokens.Token{}, classify(err, "token")
	}
	return tokens.Token{ID: row.ID, Name: row.Name, ClientID: row.ClientID, LastUsedAt: row.LastUsedAt}, nil
}

// TouchToken records that a token was used.
func (s *Store) TouchToken(ctx context.Context, id uuid.UUID) error {
	if err := s.q.TouchAPIToken(ctx, id); err != nil {
		return fmt.Errorf("postgres: touch token: %w", err)
	}
	return nil
}

// RevokeToken revokes an active token; false when there was none.
func (s *Store) RevokeToken(ctx context.Context, id uuid.UUID) (bool, error) {
	n, err := s.q.RevokeAPIToken(ctx, id)
	if err != nil {
		return false, fmt.Errorf("postgres: revoke token: %w", err)
	}
	return n > 0, nil
}
