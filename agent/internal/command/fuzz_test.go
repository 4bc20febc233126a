package command

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// FuzzHandleMessage feeds arbitrary bytes to the command subscription's decoder: nothing panics, at
// most one ack is sent and only for the command's own type, an applied ack and a callback only ever
// see a config the type registry accepts, and whatever reached the cache file loads back unchanged.
func FuzzHandleMessage(f *testing.F) {
	for _, seed := range []string{
		`{"command_id":"c1","type":"config_update","config_type":"healthcheck","version":1,"payload":{"interval_seconds":5}}`,
		`{"command_id":"c2","type":"config_update","config_type":"collectors","version":4,"payload":[{"type":"postgres","name":"db","host":"h","port":5432,"password":"pw"}],"secret_fields":["/0/password"]}`,
		`{"command_id":"c3","type":"config_update","config_type":"collectors","version":4,"payload":[{"type":"postgres","name":"db","host":"h","port":5432}],"secret_fields":["/0/port","/9/x"]}`,
		`{"command_id":"c4","type":"config_update","config_type":"labels","version":2,"payload":null}`,
		`{"command_id":"c5","type":"config_update","config_type":"bogus","version":2,"payload":{}}`,
		`{"command_id":"c6","type":"config_update","config_type":"intervals","version":-3,"payload":{"metrics":"1s"}}`,
		`{"type":"config_update","config_type":"intervals","version":"3","payload":"{}"}`,
		`{"type":"config_update","config_type":""}`,
		`{"type":"reboot"}`, `[]`, `null`, ``, `garbage`, `{"payload":{"a":`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fx := newFixture(t, nil)
		var sent protocol.Command
		_ = json.Unmarshal(data, &sent)
		for _, typ := range agentconfig.TypeNames() {
			fx.h.RegisterCallback(typ, func(_ context.Context, configType string, payload json.RawMessage, _ int64) error {
				if payload != nil {
					if err := agentconfig.ValidateDelivered(configType, payload, sent.SecretFields); err != nil {
						t.Fatalf("%s callback got a config the registry refuses: %v", configType, err)
					}
				}
				return nil
			})
		}
		fx.h.HandleMessage(context.Background(), data)

		var cmd protocol.Command
		decoded := json.Unmarshal(data, &cmd) == nil
		switch n := len(fx.acks.list); {
		case n > 1:
			t.Fatalf("%d acks for one command", n)
		case n == 1:
			a := fx.acks.list[0]
			if !decoded || cmd.Type != protocol.CommandConfigUpdate || a.ConfigType != cmd.ConfigType || a.AgentID != "agent-1" {
				t.Fatalf("ack %+v for command %q", a, data)
			}
			switch a.Status {
			case protocol.AckFailed:
				if a.Error == "" {
					t.Fatal("failed ack without an error")
				}
			case protocol.AckApplied:
				if !agentconfig.Known(a.ConfigType) {
					t.Fatalf("unknown type %q acked as applied", a.ConfigType)
				}
				if !agentconfig.IsNull(cmd.Payload) {
					if err := agentconfig.ValidateDelivered(cmd.ConfigType, cmd.Payload, cmd.SecretFields); err != nil {
						t.Fatalf("invalid config acked as applied: %v", err)
					}
				}
			default:
				t.Fatalf("ack status %q", a.Status)
			}
		}

		// What the handler wrote, the loader takes back as it was.
		reopened, err := configcache.Open(filepath.Dir(fx.cache.Path()), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(fx.cache.Entries())
		got, _ := json.Marshal(reopened.Entries())
		if !bytes.Equal(want, got) {
			t.Fatalf("cache reloads as %s, was %s", got, want)
		}
	})
}
