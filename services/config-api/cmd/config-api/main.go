// Command config-api serves ConfigSync's operator REST API. `config-api bootstrap-token -name NAME`
// instead prints a new admin API token (it needs only DATABASE_URL). `config-api migrate-inline-secrets`
// moves the secrets collectors configs hold inline into credentials (it needs DATABASE_URL and the NATS
// settings, and the credential service running), printing progress and a summary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/logging"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/platform/outbox"
	"github.com/configsync/configsync/libs/platform/pgdb"
	configapi "github.com/configsync/configsync/services/config-api"
)

func main() {
	app.Main("config-api", app.Commands{
		"bootstrap-token":        bootstrapToken,
		"migrate-inline-secrets": migrateInlineSecrets,
	}, pgdb.Module, outbox.Module, configapi.Module)
}

// bootstrapToken prints a new admin token on stdout (logs go to stderr).
func bootstrapToken(args []string) error {
	fs := flag.NewFlagSet("bootstrap-token", flag.ContinueOnError)
	name := fs.String("name", "", "name of the admin token (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" {
		return errors.New("-name is required")
	}
	var logCfg logging.Config
	var dbCfg pgdb.Config
	if err := envconfig.Load(&logCfg); err != nil {
		return err
	}
	if err := envconfig.Load(&dbCfg); err != nil {
		return err
	}
	log, err := logging.New(logCfg)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgdb.Open(ctx, dbCfg, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	token, err := configapi.BootstrapAdminToken(ctx, pool, *name)
	if err != nil {
		return err
	}
	fmt.Println(token)
	return nil
}

// migrateInlineSecrets runs configapi.MigrateInlineSecrets with the service's own settings: progress
// and the summary on stdout, logs on stderr.
func migrateInlineSecrets(args []string) error {
	fs := flag.NewFlagSet("migrate-inline-secrets", flag.ContinueOnError)
	timeout := fs.Duration("timeout", time.Hour, "give up after this long (a later run continues where this one stopped)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var (
		logCfg  logging.Config
		dbCfg   pgdb.Config
		natsCfg natsconn.Config
		apiCfg  configapi.Config
	)
	for _, c := range []any{&logCfg, &dbCfg, &natsCfg, &apiCfg} {
		if err := envconfig.Load(c); err != nil {
			return err
		}
	}
	log, err := logging.New(logCfg)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	pool, err := pgdb.Open(ctx, dbCfg, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, err := natsconn.Connect(natsCfg, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	_, err = configapi.MigrateInlineSecrets(ctx, apiCfg, pool, nc, log, os.Stdout)
	return err
}
