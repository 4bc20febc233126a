// Command ack-ingest runs the ack-ingest service: JetStream consumers writing agents' apply
// acknowledgements and heartbeats into PostgreSQL, plus /healthz and /readyz. Configuration comes from
// the environment (see README.md).
package main

import (
	"go.uber.org/fx"

	"github.com/configsync/configsync/libs/platform/httpserver"
	"github.com/configsync/configsync/libs/platform/logging"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/libs/platform/tracing"
	ackingest "github.com/configsync/configsync/services/ack-ingest"
)

func main() {
	fx.New(
		logging.Module,
		metrics.Module,
		tracing.Module("ack-ingest"),
		pgdb.Module,
		natsconn.Module,
		httpserver.Module,
		// Nothing else asks for the HTTP server here; request it so health endpoints are served.
		fx.Invoke(func(*httpserver.Server) {}),
		ackingest.Module,
	).Run()
}
