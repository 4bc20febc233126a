// Command credential runs the credential service: the nats.go micro service that stores collector
// credentials encrypted and injects them into collector configs, plus /healthz and /readyz.
// Configuration comes from the environment (see the service's README.md).
package main

import (
	"go.uber.org/fx"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/services/credential"
)

func main() {
	fx.New(app.Module("credential", pgdb.Module, credential.Module)).Run()
}
