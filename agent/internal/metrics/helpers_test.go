package metrics

import (
	"encoding/json"

	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/libs/agentconfig"
)

// testPol is the default policy: every address but the metadata endpoints, so the local servers the
// tests start are reachable.
var testPol = func() *policy.Policy {
	p, err := policy.New(policy.DefaultConfig(), policy.Secrets{})
	if err != nil {
		panic(err)
	}
	return p
}()

func collector(s string) agentconfig.Collector {
	var c agentconfig.Collector
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		panic(err)
	}
	return c
}
