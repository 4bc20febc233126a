package metrics

import (
	"encoding/json"

	"github.com/configsync/configsync/libs/agentconfig"
)

func collector(s string) agentconfig.Collector {
	var c agentconfig.Collector
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		panic(err)
	}
	return c
}
