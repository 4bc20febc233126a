// Command ack-ingest runs the ack-ingest service: JetStream consumers writing agents' apply
// acknowledgements and heartbeats into PostgreSQL, plus /healthz and /readyz. Configuration comes from
// the environment (see README.md).
package main

import (
	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/pgdb"
	ackingest "github.com/configsync/configsync/services/ack-ingest"
)

func main() {
	app.Main("ack-ingest", nil, pgdb.Module, ackingest.Module)
}
