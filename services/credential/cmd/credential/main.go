// Command credential runs the credential service: the nats.go micro service that stores collector
// credentials encrypted and injects them into collector configs, plus /healthz and /readyz.
// Configuration comes from the environment (see the service's README.md).
package main

import (
	"go.uber.org/fx"

	"github.com/configsync/configsync/libs/platform/httpserver"
	"github.com/configsync/configsync/libs/platform/logging"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/libs/platform/tracing"
	"github.com/configsync/configsync/services/credential"
)

func main() {
	fx.New(
		logging.Module,
		metrics.Module,
		tracing.Module("credential"),
		pgdb.Module,
		natsconn.Module,
		httpserver.Module,
		// Nothing else asks for the HTTP server here; request it so health endpoints are served.
		fx.Invoke(func(*httpserver.Server) {}),
		credential.Module,
	).Run()
}
