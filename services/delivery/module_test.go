package delivery_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/httpserver"
	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential"
	"github.com/configsync/configsync/services/delivery"
	"github.com/configsync/configsync/services/resolver"
)

// The module composes with the platform modules and the resolver and credential modules in one app
// (as tools/devstack runs them), configured from the environment, and serves fetches.
func TestModuleRunsOnPlatform(t *testing.T) {
	dbURL := testinfra.PostgresURL(t)
	srv := testinfra.NATS(t)
	testinfra.PlatformEnv(t, dbURL, srv.URL())
	t.Setenv("CONFIGSYNC_KEYRING", "v1:"+base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")))
	var server *httpserver.Server
	fxApp := fxtest.New(t, app.Module("delivery", pgdb.Module, fx.Populate(&server),
		resolver.Module, credential.Module, delivery.Module))
	fxApp.RequireStart()
	defer fxApp.RequireStop()

	testinfra.WaitReady(t, server.Addr(), 30*time.Second)

	pool := testinfra.OpenPool(t, dbURL)
	s := &stack{pool: pool, nc: srv.Connect(t)}
	s.seed(t, 1)
	v := s.putEnv(t, "healthcheck", `{"interval_seconds":60,"timeout_seconds":5}`)
	reply := s.fetch(t, s.hosts[0].agent, s.hosts[0].agent)
	if reply.Error != nil || reply.Versions["healthcheck"] != v || !testinfra.JSONEqual(reply.Configs["healthcheck"], []byte(`{"interval_seconds":60,"timeout_seconds":5}`)) {
		t.Fatalf("fetch = %+v", reply)
	}

	// And pushes: the event consumer runs in the app.
	f := newFleet(t, srv.Connect(t))
	s.fleet = f
	s.js = testinfra.JetStream(t, s.nc, nil)
	v = s.putEnv(t, "healthcheck", `{"interval_seconds":30,"timeout_seconds":5}`)
	data, _ := json.Marshal(protocol.ConfigChanged{EventID: uuid.NewString(), Scope: protocol.ScopeEnvironment, ClientID: s.clientID.String(),
		EnvironmentID: s.envID.String(), ConfigType: "healthcheck", Version: v, OccurredAt: time.Now()})
	if _, err := s.js.Publish(context.Background(), protocol.ConfigChangedSubject, data); err != nil {
		t.Fatal(err)
	}
	testinfra.Eventually(t, 30*time.Second, func() bool {
		return len(f.commands(s.hosts[0].agent, "healthcheck")) == 1
	}, "pushed")
}
