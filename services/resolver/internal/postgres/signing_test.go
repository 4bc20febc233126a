package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/keyfile"
	"github.com/configsync/configsync/services/resolver/internal/postgres"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// countingObserver counts signatures by key id.
type countingObserver struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countingObserver) Signed(keyID string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[keyID] += n
}

func (c *countingObserver) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, n := range c.n {
		t += n
	}
	return t
}

// signingResolver returns a resolver over store that signs with a fresh key file and stores its
// statements in store, the key set that verifies what it signs, and the observer of its signatures.
func signingResolver(t testing.TB, store *postgres.Store) (*resolve.Resolver, signing.KeySet, *countingObserver) {
	t.Helper()
	keyPath := filepath.Join(t.TempDir(), "signing.key")
	if _, err := keyfile.CreateFile(keyPath); err != nil {
		t.Fatal(err)
	}
	signer, err := keyfile.LoadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	obs := &countingObserver{n: map[string]int{}}
	keys := signing.KeySet{signer.KeyID(): signer.PublicKey()}
	return resolve.New(store, resolve.Options{Signer: signer, Statements: store, SignObserver: obs}), keys, obs
}

// TestSignedStatements: with signing on, 1,000 hosts sharing their environment's config cost one
// signature for it (plus one identity each, once); a host override is signed in its agent's scope;
// statements are stored and reused by later fetches and by batch pages, never signed again; what the
// resolver signs verifies on the agent side, for the right agent and environment only.
func TestSignedStatements(t *testing.T) {
	ctx := context.Background()
	pool, db, store := newDB(t)
	r, keys, obs := signingResolver(t, store)

	env := db.Environment("prod")
	other := db.Environment("staging")
	const n = 1000
	db.Hosts(env, "web", n)
	db.Host(other, "stg-1", "stg-1")
	intervals := `{"metrics":"30s","heartbeat":"15s"}`
	envV := db.PutEnv(env, "intervals", intervals)
	db.PutEnv(other, "intervals", intervals)
	var web1 string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM hosts WHERE agent_id = 'web-1'`).Scan(&web1); err != nil {
		t.Fatal(err)
	}
	overV := db.PutHost(web1, "intervals", `{"metrics":"10s"}`)

	agents := make([]string, n)
	for i := range agents {
		agents[i] = "web-" + strconv.Itoa(i+1)
	}
	reply, err := r.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: agents, Types: []string{"intervals"}})
	if err != nil {
		t.Fatal(err)
	}
	// One environment config and one override, plus one identity per host.
	if got, want := obs.total(), 2+n; got != want {
		t.Fatalf("signatures for %d hosts = %d, want %d", n, got, want)
	}
	if got := len(reply.Configs); got != 2 {
		t.Fatalf("distinct configs = %d, want 2 (the environment's and web-1's override)", got)
	}
	hosts := hostsOf(t, reply)
	if len(hosts) != n {
		t.Fatalf("hosts in the reply = %d, want %d", len(hosts), n)
	}
	for _, res := range hosts {
		agent := res.AgentID
		envOf, err := keys.Identity(res.Identity, agent)
		if err != nil || envOf != env {
			t.Fatalf("identity of %s: %q, %v", agent, envOf, err)
		}
		ec := res.Configs["intervals"]
		c := signing.Config{AgentID: agent, EnvironmentID: envOf, ConfigType: "intervals", Version: ec.Version, Data: ec.ConfigData}
		if err := keys.VerifyConfig(ec.Statement, c); err != nil {
			t.Fatalf("%s: %v", agent, err)
		}
		wantScope := signing.EnvironmentScope(env)
		if agent == "web-1" {
			wantScope = signing.AgentScope("web-1")
			// The override replayed to another host of the same environment is refused.
			replay := c
			replay.AgentID = "web-2"
			if err := keys.VerifyConfig(ec.Statement, replay); !errors.Is(err, signing.ErrSignatureInvalid) {
				t.Fatalf("web-1's override accepted by web-2: %v", err)
			}
		} else {
			// The environment config is refused by a host of another environment.
			foreign := c
			foreign.AgentID, foreign.EnvironmentID = "stg-1", other
			if err := keys.VerifyConfig(ec.Statement, foreign); !errors.Is(err, signing.ErrSignatureInvalid) {
				t.Fatalf("prod's config accepted by a staging host: %v", err)
			}
		}
		var st signing.ConfigStatement
		if err := json.Unmarshal(ec.Statement.Statement, &st); err != nil || st.Scope != wantScope {
			t.Fatalf("%s: scope %q, want %q (%v)", agent, st.Scope, wantScope, err)
		}
	}

	// Stored: fetching again and paging the environment sign nothing; a fetch's hosts come with the
	// identities stored for them (read with their rows), the same statements as before.
	before := obs.total()
	again, err := r.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: agents[:10], Types: []string{"intervals"}})
	if err != nil {
		t.Fatal(err)
	}
	firstIdentity := map[string]*protocol.Signed{}
	for _, res := range hosts {
		firstIdentity[res.AgentID] = res.Identity
	}
	for _, res := range hostsOf(t, again) {
		if first := firstIdentity[res.AgentID]; res.Identity == nil || first == nil ||
			!bytes.Equal(res.Identity.Signature, first.Signature) || !bytes.Equal(res.Identity.Statement, first.Statement) {
			t.Fatalf("identity of %s on the second fetch %+v, first %+v", res.AgentID, res.Identity, first)
		}
	}
	page, err := r.ResolvePush(ctx, protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: env, ConfigType: "intervals"})
	if err != nil {
		t.Fatal(err)
	}
	if obs.total() != before {
		t.Fatalf("statements signed again: %d -> %d signatures", before, obs.total())
	}
	overridden := 0
	for _, set := range page.Sets {
		ec := page.Configs[set.Configs["intervals"]]
		if ec.Statement == nil {
			t.Fatalf("push config unsigned: %+v", ec)
		}
		if ec.HostVersion == 0 {
			if ec.Version != envV {
				t.Fatalf("push environment config %+v", ec)
			}
			continue
		}
		// A signed override names its agent: its set holds that host alone.
		if len(set.Hosts) != 1 || set.Hosts[0].AgentID != "web-1" || ec.Version != overV {
			t.Fatalf("push override %+v for %+v", ec, set.Hosts)
		}
		overridden++
	}
	if overridden != 1 {
		t.Fatalf("%d override sets, want 1", overridden)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM config_statements`).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("stored statements = %d, %v; want 2", rows, err)
	}

	// A deletion is signed too (null hash).
	del := db.DeleteHost(web1, "intervals")
	reply, err = r.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: []string{"web-1"}, Types: []string{"intervals"}})
	if err != nil {
		t.Fatal(err)
	}
	ec := hostsOf(t, reply)[0].Configs["intervals"]
	if ec.Version != del {
		t.Fatalf("after the override's deletion version %d, want %d", ec.Version, del)
	}
	if err := keys.VerifyConfig(ec.Statement, signing.Config{AgentID: "web-1", EnvironmentID: env, ConfigType: "intervals", Version: del, Data: ec.ConfigData}); err != nil {
		t.Fatal(err)
	}
}

// TestSignedCollectorsHashRedacted: a collectors config naming a credential is signed over the form
// the agent caches, the credential's fields injected and redacted, so the agent verifies what delivery
// injected.
func TestSignedCollectorsHashRedacted(t *testing.T) {
	ctx := context.Background()
	pool, db, store := newDB(t)
	r, keys, _ := signingResolver(t, store)

	env := db.Environment("prod")
	db.Host(env, "db-1", "db-1")
	var cred string
	if err := pool.QueryRow(ctx, `INSERT INTO credentials (client_id, environment_id, name, fields, ciphertext, key_version)
		VALUES ($1, $2, 'pg', '{password,username}', 'local:v1:x', 'v1') RETURNING id::text`, db.ClientOf(env), env).Scan(&cred); err != nil {
		t.Fatal(err)
	}
	collectors := `[{"type":"postgres","name":"pg","host":"db","port":5432,"credential_id":"` + cred + `"}]`
	db.PutEnv(env, "collectors", collectors)
	reply, err := r.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: []string{"db-1"}})
	if err != nil {
		t.Fatal(err)
	}
	ec := hostsOf(t, reply)[0].Configs["collectors"]
	injected, pointers, err := agentconfig.InjectSecrets(ec.ConfigData, map[string]map[string]string{cred: {"password": "s3cret", "username": "app"}})
	if err != nil {
		t.Fatal(err)
	}
	c := signing.Config{AgentID: "db-1", EnvironmentID: env, ConfigType: "collectors", Version: ec.Version, Data: injected, SecretFields: pointers}
	if err := keys.VerifyConfig(ec.Statement, c); err != nil {
		t.Fatalf("injected collectors do not verify: %v", err)
	}
	c.Data = json.RawMessage(`[{"type":"postgres","name":"pg","host":"evil","port":5432,"password":"s3cret","username":"app"}]`)
	if err := keys.VerifyConfig(ec.Statement, c); !errors.Is(err, signing.ErrSignatureInvalid) {
		t.Fatalf("changed collectors verified: %v", err)
	}
}

// resolvedHost is one host of a sets reply with its configs looked up.
type resolvedHost struct {
	AgentID  string
	Identity *protocol.Signed
	Configs  map[string]protocol.EffectiveConfig
}

// hostsOf flattens a sets reply into its hosts, in the order of its sets.
func hostsOf(t *testing.T, reply protocol.ResolveSetsReply) []resolvedHost {
	t.Helper()
	if err := reply.Check(); err != nil {
		t.Fatal(err)
	}
	var out []resolvedHost
	for _, set := range reply.Sets {
		for _, h := range set.Hosts {
			rh := resolvedHost{AgentID: h.AgentID, Identity: h.Identity, Configs: map[string]protocol.EffectiveConfig{}}
			for typ, n := range set.Configs {
				rh.Configs[typ] = reply.Configs[n]
			}
			out = append(out, rh)
		}
	}
	return out
}
