// Package bootstrap creates the first admin API token directly in the database, for the
// `config-api bootstrap-token` command and configapi.BootstrapAdminToken (which tools/devstack and the
// tests call). Anyone who can reach the database can mint an admin token this way, which is why it is
// not an HTTP route.
package bootstrap

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/services/config-api/internal/postgres"
	"github.com/configsync/configsync/services/config-api/internal/tokens"
)

// AdminToken creates an admin API token named name and returns the bearer token (only its SHA-256
// is stored).
func AdminToken(ctx context.Context, pool *pgxpool.Pool, name string) (string, error) {
	issued, err := tokens.Create(ctx, postgres.NewStore(pool), name, uuid.NullUUID{})
	if err != nil {
		return "", fmt.Errorf("bootstrap: admin token: %w", err)
	}
	return issued.Secret, nil
}
