package configapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestRegisterHostsWithLabels: WithLabels gives the named hosts their inventory labels in the batch
// request; the others are sent without a labels member.
func TestRegisterHostsWithLabels(t *testing.T) {
	var mu sync.Mutex
	got := map[string]json.RawMessage{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Hosts []map[string]json.RawMessage `json:"hosts"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		out := make([]map[string]string, len(req.Hosts))
		mu.Lock()
		for i, h := range req.Hosts {
			var id string
			_ = json.Unmarshal(h["agent_id"], &id)
			got[id] = h["labels"]
			out[i] = map[string]string{"id": "h-" + id}
		}
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"data": out})
	}))
	t.Cleanup(srv.Close)
	ids := agentIDs(1500)
	reg, err := New(srv.URL, "tok", 2).RegisterHosts(context.Background(), "env-1", ids, 2, nil,
		WithLabels(map[string]map[string]string{"a-0": {"ring": "canary"}, "a-1200": {"role": "db", "tier": "gold"}}))
	if err != nil || reg.Hosts != 1500 {
		t.Fatalf("registered %d: %v", reg.Hosts, err)
	}
	if len(got) != 1500 {
		t.Fatalf("%d hosts sent", len(got))
	}
	for id, labels := range got {
		switch id {
		case "a-0":
			if string(labels) != `{"ring":"canary"}` {
				t.Errorf("a-0 labels %s", labels)
			}
		case "a-1200":
			if string(labels) != `{"role":"db","tier":"gold"}` {
				t.Errorf("a-1200 labels %s", labels)
			}
		default:
			if labels != nil {
				t.Errorf("%s sent labels %s", id, labels)
			}
		}
	}
}
