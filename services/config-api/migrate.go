package configapi

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/credentials"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/inlinesecrets"
	"github.com/configsync/configsync/services/config-api/internal/natsclient"
	"github.com/configsync/configsync/services/config-api/internal/postgres"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// MigrationSummary counts what MigrateInlineSecrets did.
type MigrationSummary = inlinesecrets.Summary

// MigrateInlineSecrets moves the secrets collectors configs hold inline into credentials (created
// through the credential service over nc, as POST /credentials does), rewrites those collectors to
// reference them (new versions with revisions and config-changed events) and redacts the inline values
// left in config_revisions. It writes a progress line per config and a summary to out, and can be run
// again: what is migrated is not found again. It is what `config-api migrate-inline-secrets` runs.
func MigrateInlineSecrets(ctx context.Context, cfg Config, pool *pgxpool.Pool, nc *nats.Conn, log *zap.Logger, out io.Writer) (MigrationSummary, error) {
	store := postgres.NewStore(pool)
	guard := tenancy.NewGuard(store, store, log.Named("audit"))
	tenantSvc := tenants.NewService(store, guard)
	hostSvc := hosts.NewService(store, tenantSvc, guard, nil, cfg.OnlineWindow)
	configSvc := configs.NewService(store, tenantSvc, hostSvc, natsclient.NewResolver(nc, cfg.RequestTimeout), guard)
	creds := credentials.NewService(natsclient.NewCredentials(nc, cfg.RequestTimeout), configSvc, tenantSvc, guard)
	return inlinesecrets.New(store, creds, out).Run(ctx)
}
