// Package app is the fx skeleton of a service binary (cmd/<service>/main.go): the platform modules
// every ConfigSync service runs on — logging, metrics, tracing under the service's name, the NATS
// connection and the HTTP server with its health endpoints — around the service's own modules. A
// service's Module never includes it (tools/devstack composes several services in one app). Main is
// a binary's whole main (its one-shot subcommands, else the app); Background and RunForLifetime run
// a service's background loops (started with the app, cancelled and awaited when it stops).
package app

import (
	"go.uber.org/fx"

	"github.com/configsync/configsync/libs/platform/httpserver"
	"github.com/configsync/configsync/libs/platform/logging"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/platform/tracing"
)

// Module is the platform modules of service followed by modules: pgdb.Module for a service that
// uses the database, then its own Module.
func Module(service string, modules ...fx.Option) fx.Option {
	return fx.Options(append([]fx.Option{
		logging.Module,
		metrics.Module,
		tracing.Module(service),
		natsconn.Module,
		httpserver.Module,
		// The health endpoints are served even when nothing else asks for the HTTP server.
		fx.Invoke(func(*httpserver.Server) {}),
	}, modules...)...)
}
