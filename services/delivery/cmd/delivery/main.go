// Command delivery runs the delivery service: agents' config fetches and the push of config changes,
// plus /healthz and /readyz. Configuration comes from the environment (see README.md).
package main

import (
	"go.uber.org/fx"

	"github.com/configsync/configsync/libs/platform/httpserver"
	"github.com/configsync/configsync/libs/platform/logging"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/platform/tracing"
	"github.com/configsync/configsync/services/delivery"
)

func main() {
	fx.New(
		logging.Module,
		metrics.Module,
		tracing.Module("delivery"),
		natsconn.Module,
		httpserver.Module,
		// Nothing else asks for the HTTP server here; request it so health endpoints are served.
		fx.Invoke(func(*httpserver.Server) {}),
		delivery.Module,
	).Run()
}
