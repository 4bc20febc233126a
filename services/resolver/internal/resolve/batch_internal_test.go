package resolve

import (
	"encoding/json"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
)

// The computed size of a host entry is exactly its encoded length, or pages could overrun the budget.
func TestBatchHostSize(t *testing.T) {
	hosts := []protocol.BatchHost{
		{HostID: "0b9f7c2e-8d1a-4e8b-9a55-3c1f6f0e2a11", AgentID: "agent-1"},
		{HostID: "0b9f7c2e-8d1a-4e8b-9a55-3c1f6f0e2a11", AgentID: "a<b>&\"c\"\\\n\u00e9"},
		{HostID: "h", AgentID: "a", Override: &protocol.EffectiveConfig{ConfigType: "labels",
			ConfigData: json.RawMessage(`{"static": {"k": "<v>"}}`), Version: 3, Source: "merged", HostVersion: 3}},
		{HostID: "h", AgentID: "a", Override: &protocol.EffectiveConfig{ConfigType: "labels", Version: 3}},
	}
	for _, h := range hosts {
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := batchHostSize(h)
		if err != nil {
			t.Fatal(err)
		}
		if got != len(b) {
			t.Errorf("batchHostSize(%+v) = %d, encoded length %d", h, got, len(b))
		}
	}
}
