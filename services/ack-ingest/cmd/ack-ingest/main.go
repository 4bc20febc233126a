// Command ack-ingest runs the ack-ingest service: JetStream consumers writing agents' apply
// acknowledgements and heartbeats into PostgreSQL, plus /healthz and /readyz. Configuration comes from
// the environment (see README.md).
package main

import (
	"go.uber.org/fx"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/pgdb"
	ackingest "github.com/configsync/configsync/services/ack-ingest"
)

func main() {
	fx.New(app.Module("ack-ingest", pgdb.Module, ackingest.Module)).Run()
}
