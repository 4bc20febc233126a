// Command credential runs the credential service: the nats.go micro service that stores collector
// credentials encrypted and injects them into collector configs, plus /healthz and /readyz.
// Configuration comes from the environment (see the service's README.md).
package main

import (
	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/services/credential"
)

func main() {
	app.Main("credential", nil, pgdb.Module, credential.Module)
}
