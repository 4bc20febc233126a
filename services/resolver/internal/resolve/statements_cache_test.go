package resolve

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
)

// memStatements is a StatementStore in memory that counts the reads of config statements.
type memStatements struct {
	mu      sync.Mutex
	configs map[StatementKey]protocol.Signed
	reads   int
	asked   []StatementKey
}

func (m *memStatements) ConfigStatements(_ context.Context, keys []StatementKey) (map[StatementKey]protocol.Signed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	m.asked = append(m.asked, keys...)
	out := map[StatementKey]protocol.Signed{}
	for _, k := range keys {
		if s, ok := m.configs[k]; ok {
			out[k] = s
		}
	}
	return out, nil
}

func (m *memStatements) SaveConfigStatements(_ context.Context, statements map[StatementKey]protocol.Signed) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, s := range statements {
		if _, ok := m.configs[k]; !ok {
			m.configs[k] = s
		}
	}
	return nil
}

func (m *memStatements) SaveIdentityStatements(context.Context, map[string]protocol.Signed) error {
	return nil
}
func (m *memStatements) CredentialFields(context.Context, string, []string) (map[string][]string, error) {
	return map[string][]string{}, nil
}

// countingSigner signs with a fixed signature and counts the messages signed.
type countingSigner struct{ signed int }

func (s *countingSigner) Sign(_ context.Context, messages [][]byte) ([]Signature, error) {
	s.signed += len(messages)
	out := make([]Signature, len(messages))
	for i := range out {
		out[i] = Signature{KeyID: "k1", Value: []byte("sig")}
	}
	return out, nil
}

// A batch of fetches whose configs were signed or read lately asks the store nothing for their
// statements; after statementTTL (compromise recovery may have deleted some) it reads them again, and
// a statement deleted from the store is then signed anew.
func TestConfigStatementsAreCachedForTheirTTL(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	store := &memStatements{configs: map[StatementKey]protocol.Signed{}}
	signer := &countingSigner{}
	n := &notary{signer: signer, store: store, configs: newStatementCache(func() time.Time { return now })}
	env := StatementKey{Scope: "environment:e1", ConfigType: "labels", Version: 7}
	batch := func() []*protocol.EffectiveConfig {
		t.Helper()
		// Two hosts of the environment share the key; a host override has its own.
		ecs := []*protocol.EffectiveConfig{
			{ConfigType: "labels", ConfigData: []byte(`{"a":"b"}`), Version: 7},
			{ConfigType: "labels", ConfigData: []byte(`{"a":"b"}`), Version: 7},
		}
		pending := []pendingStatement{{key: env, clientID: "c1", ec: ecs[0]}, {key: env, clientID: "c1", ec: ecs[1]}}
		if err := n.attach(context.Background(), pending); err != nil {
			t.Fatal(err)
		}
		for _, ec := range ecs {
			if ec.Statement == nil || string(ec.Statement.Signature) != "sig" {
				t.Fatalf("no statement attached: %+v", ec)
			}
		}
		return ecs
	}

	batch()
	if store.reads != 1 || signer.signed != 1 || len(store.configs) != 1 {
		t.Fatalf("first batch: %d reads, %d signed, %d stored; want 1, 1, 1", store.reads, signer.signed, len(store.configs))
	}
	for range 3 {
		now = now.Add(statementTTL / 4)
		batch()
	}
	if store.reads != 1 || signer.signed != 1 {
		t.Fatalf("within the TTL: %d reads, %d signed; want the cache to answer (1, 1)", store.reads, signer.signed)
	}
	// Compromise recovery deletes what the key signed; once the entry is older than the TTL the
	// resolver reads the store again and signs what is gone.
	delete(store.configs, env)
	now = now.Add(statementTTL)
	batch()
	if store.reads != 2 || signer.signed != 2 || len(store.configs) != 1 {
		t.Fatalf("after the TTL: %d reads, %d signed, %d stored; want 2, 2, 1", store.reads, signer.signed, len(store.configs))
	}
	// A statement read from the store (signed by another replica) is cached too.
	other := StatementKey{Scope: "environment:e2", ConfigType: "labels", Version: 9}
	store.configs[other] = protocol.Signed{Statement: []byte("s"), KeyID: "k1", Signature: []byte("sig")}
	for range 2 {
		ec := &protocol.EffectiveConfig{ConfigType: "labels", ConfigData: []byte(`{}`), Version: 9}
		if err := n.attach(context.Background(), []pendingStatement{{key: other, clientID: "c1", ec: ec}}); err != nil {
			t.Fatal(err)
		}
		if ec.Statement == nil {
			t.Fatal("no statement attached")
		}
	}
	if store.reads != 3 || signer.signed != 2 {
		t.Fatalf("another replica's statement: %d reads, %d signed; want 3, 2", store.reads, signer.signed)
	}
}
