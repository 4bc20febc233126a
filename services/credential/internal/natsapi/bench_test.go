package natsapi

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential/internal/credential"
	"github.com/configsync/configsync/services/credential/internal/postgres"
	"github.com/configsync/configsync/services/credential/internal/seed"
)

// BenchmarkInjectOverNATS is the whole inject path for one batch of 1,000 hosts sharing 3 credentials:
// request over NATS, decode, one PostgreSQL read, one keyring decrypt call, injection, encode, reply.
func BenchmarkInjectOverNATS(b *testing.B) {
	pool := testinfra.Postgres(b)
	nc := testinfra.NATS(b).Connect(b)
	cipher := &countingCipher{Cipher: seed.Keyring(b)}
	store := postgres.NewStore(pool)
	log, _ := testinfra.Logger(b)
	s := New(credential.NewService(store, cipher), credential.NewInjector(store, cipher, log), Options{}, log)
	if err := s.Start(nc); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Stop(b.Context()) })

	client, envs := seed.Client(b, pool, "bench", 1)
	creds := credential.NewService(store, cipher)
	var ids []string
	for i := range 3 {
		meta, err := creds.Create(b.Context(), protocol.CredentialCreateRequest{ClientID: client, Name: fmt.Sprintf("db%d", i),
			Secret: map[string]string{"password": fmt.Sprintf("secret-%d", i), "username": "svc"}})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, meta.ID)
	}
	items := make([]protocol.InjectItem, 1000)
	for i := range items {
		items[i] = protocol.InjectItem{Key: fmt.Sprintf("host-%d", i), ClientID: client, EnvironmentID: envs[0],
			Collectors: json.RawMessage(fmt.Sprintf(`[{"type":"mysql","name":"db","host":"h","port":3306,"credential_id":%q},`+
				`{"type":"redis","name":"cache","host":"r","credential_id":%q},{"type":"http","name":"web","url":"http://localhost/health"}]`,
				ids[i%3], ids[(i+1)%3]))}
	}
	body, err := json.Marshal(protocol.InjectRequest{Items: items})
	if err != nil {
		b.Fatal(err)
	}
	cipher.calls.Store(0)
	cipher.items.Store(0)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		msg, err := nc.Request(protocol.CredentialInjectSubject, body, requestTimeout)
		if err != nil {
			b.Fatal(err)
		}
		if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
			b.Fatalf("%s: %s", code, msg.Header.Get(micro.ErrorHeader))
		}
	}
	b.ReportMetric(float64(cipher.items.Load())/float64(cipher.calls.Load()), "decrypts/batch")
}
