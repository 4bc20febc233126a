// Command delivery runs the delivery service: agents' config fetches and the push of config changes,
// plus /healthz and /readyz. Configuration comes from the environment (see README.md).
package main

import (
	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/services/delivery"
)

func main() {
	app.Main("delivery", nil, delivery.Module)
}
