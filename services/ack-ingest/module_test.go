package ackingest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/httpserver"
	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	ackingest "github.com/configsync/configsync/services/ack-ingest"
	"github.com/configsync/configsync/services/ack-ingest/internal/seed"
)

// The module runs as cmd/ack-ingest composes it: configured from the environment, on the platform
// modules, ready once its consumers run, and it ingests.
func TestModuleRunsOnPlatform(t *testing.T) {
	dbURL := testinfra.PostgresURL(t)
	srv := testinfra.NATS(t)
	testinfra.PlatformEnv(t, dbURL, srv.URL())
	var server *httpserver.Server
	// As cmd/ack-ingest composes it.
	fxApp := fxtest.New(t, app.Module("ack-ingest", pgdb.Module, fx.Populate(&server), ackingest.Module))
	fxApp.RequireStart()
	defer fxApp.RequireStop()

	testinfra.WaitReady(t, server.Addr(), 30*time.Second)

	// pgdb migrated the database at start; register a host there and send its ack.
	pool := testinfra.OpenPool(t, dbURL)
	hosts := seed.Hosts(t, pool, 1)
	nc := srv.Connect(t)
	data, _ := json.Marshal(ack("agent-0", "labels", 4, protocol.AckApplied, ""))
	if err := nc.Publish(protocol.AckSubject("agent-0"), data); err != nil {
		t.Fatal(err)
	}
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		var v int64
		err := pool.QueryRow(context.Background(), `SELECT version FROM host_config_apply_status WHERE host_id = $1`, hosts["agent-0"]).Scan(&v)
		if err == nil && v == 4 {
			return nil
		}
		return errors.New(fmt.Sprint(v, err))
	}, "ack ingested")
}
