package resolve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
)

// Signer signs statements with the config authority's key. The resolver is its only user: it signs
// only statements it built from the database, never input a caller sent. Adapters: a 0600 key file
// (keyfile) and Vault Transit (vaulttransit).
type Signer interface {
	// Sign signs each message (one batch, one round trip for a remote key) and returns one signature
	// per message, in order, each naming the key that made it.
	Sign(ctx context.Context, messages [][]byte) ([]Signature, error)
}

// Signature is one ed25519 signature and the id of its key.
type Signature struct {
	KeyID string
	Value []byte
}

// ErrSigning wraps a failure to obtain signatures (the key is unreachable or refuses): the request may
// succeed later, like a store outage.
var ErrSigning = errors.New("signing failed")

// StatementKey names a config statement: versions come from one sequence, so a key names one content.
type StatementKey struct {
	Scope      string
	ConfigType string
	Version    int64
}

// StatementStore keeps signed statements, so each is signed once and reused by every later fetch and
// push, and reads what a statement's hash depends on beyond the config rows.
type StatementStore interface {
	// ConfigStatements returns the stored statements of keys (absent keys are left out), in one query.
	ConfigStatements(ctx context.Context, keys []StatementKey) (map[StatementKey]protocol.Signed, error)
	// SaveConfigStatements stores statements; a key stored already keeps its row.
	SaveConfigStatements(ctx context.Context, statements map[StatementKey]protocol.Signed) error
	// SaveIdentityStatements stores identity statements by host id; a host stored already keeps its row.
	SaveIdentityStatements(ctx context.Context, statements map[string]protocol.Signed) error
	// CredentialFields returns the secret field names of a client's credentials, by credential id.
	CredentialFields(ctx context.Context, clientID string, credentialIDs []string) (map[string][]string, error)
}

// SignObserver counts signatures made, by key id (metrics).
type SignObserver interface {
	Signed(keyID string, n int)
}

// notary attaches signed statements to the effective configs of one request.
type notary struct {
	signer   Signer
	store    StatementStore
	observer SignObserver
	// configs keeps the config statements read or made lately, so a batch of fetches whose hosts share
	// their environment's configs (the usual case) asks the store nothing for them; nil: no cache.
	configs *statementCache
}

// statementTTL is how long a replica serves a config statement from memory. A key names one content
// forever (versions come from one sequence), so a write never makes an entry stale; the bound is for
// compromise recovery, which deletes what a key signed from the store: every replica stops serving
// those statements within this time, then reads (and signs) again.
const statementTTL = time.Minute

// maxCachedStatements bounds the cache: an environment's configs, and host overrides' while they are
// fetched, are far fewer; reaching it empties the cache.
const maxCachedStatements = 8192

// statementCache holds config statements by key with the time they were cached.
type statementCache struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[StatementKey]cachedStatement
}

type cachedStatement struct {
	s  protocol.Signed
	at time.Time
}

func newStatementCache(now func() time.Time) *statementCache {
	return &statementCache{now: now, m: map[StatementKey]cachedStatement{}}
}

// take moves the cached statements of keys into into and returns the keys it does not hold (fresh).
func (c *statementCache) take(keys []StatementKey, into map[StatementKey]protocol.Signed) []StatementKey {
	if c == nil {
		return keys
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	var missing []StatementKey
	for _, k := range keys {
		e, ok := c.m[k]
		if !ok || now.Sub(e.at) >= statementTTL {
			missing = append(missing, k)
			continue
		}
		into[k] = e.s
	}
	return missing
}

// put caches statements (read from the store or signed and stored).
func (c *statementCache) put(statements map[StatementKey]protocol.Signed) {
	if c == nil || len(statements) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m)+len(statements) > maxCachedStatements {
		clear(c.m)
	}
	now := c.now()
	for k, s := range statements {
		if _, ok := c.m[k]; !ok || now.Sub(c.m[k].at) >= statementTTL {
			c.m[k] = cachedStatement{s: s, at: now}
		}
	}
}

// pendingStatement is an effective config of a request waiting for its statement.
type pendingStatement struct {
	key      StatementKey
	clientID string
	ec       *protocol.EffectiveConfig
}

// scopeOf is the scope of a host's effective config: the environment when the host has no row of its
// own for the type (every such host runs the same config at the same version), else the agent.
func scopeOf(h Host, hasHostRow bool) string {
	if hasHostRow {
		return signing.AgentScope(h.AgentID)
	}
	return signing.EnvironmentScope(h.EnvironmentID)
}

// attach sets the Statement of every pending config: stored ones are read in one query; the others are
// hashed, signed in one batch and stored. Configs sharing a key share one statement.
func (n *notary) attach(ctx context.Context, pending []pendingStatement) error {
	if n == nil || len(pending) == 0 {
		return nil
	}
	keys := make([]StatementKey, 0, len(pending))
	byKey := make(map[StatementKey][]pendingStatement, len(pending))
	for _, p := range pending {
		if _, ok := byKey[p.key]; !ok {
			keys = append(keys, p.key)
		}
		byKey[p.key] = append(byKey[p.key], p)
	}
	stored := make(map[StatementKey]protocol.Signed, len(keys))
	if ask := n.configs.take(keys, stored); len(ask) > 0 {
		read, err := n.store.ConfigStatements(ctx, ask)
		if err != nil {
			return fmt.Errorf("read statements: %w", err)
		}
		n.configs.put(read)
		maps.Copy(stored, read)
	}
	var missing []StatementKey
	for _, k := range keys {
		if _, ok := stored[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		fields := map[string]map[string][]string{} // client -> credential -> field names
		messages := make([][]byte, len(missing))
		for i, k := range missing {
			p := byKey[k][0]
			h, err := n.hash(ctx, p, fields)
			if err != nil {
				return err
			}
			b, err := signing.Encode(signing.ConfigStatement{Kind: signing.KindConfig, ConfigType: k.ConfigType,
				Version: k.Version, SHA256: h, Scope: k.Scope})
			if err != nil {
				return err
			}
			messages[i] = b
		}
		sigs, err := n.sign(ctx, messages)
		if err != nil {
			return err
		}
		fresh := make(map[StatementKey]protocol.Signed, len(missing))
		for i, k := range missing {
			fresh[k] = protocol.Signed{Statement: messages[i], KeyID: sigs[i].KeyID, Signature: sigs[i].Value}
			stored[k] = fresh[k]
		}
		if err := n.store.SaveConfigStatements(ctx, fresh); err != nil {
			return fmt.Errorf("store %d statements: %w", len(fresh), err)
		}
		n.configs.put(fresh)
	}
	for k, ps := range byKey {
		s := stored[k]
		for _, p := range ps {
			p.ec.Statement = &s
		}
	}
	return nil
}

// hash is the statement hash of a pending config: of its data as the agent caches it, so for collectors
// with credential references, injected and redacted (field names from the credential metadata).
func (n *notary) hash(ctx context.Context, p pendingStatement, fields map[string]map[string][]string) (*string, error) {
	data := p.ec.ConfigData
	if agentconfig.IsNull(data) {
		return nil, nil
	}
	if p.key.ConfigType == agentconfig.Collectors {
		ids, err := agentconfig.CredentialIDs(data)
		if err != nil {
			return nil, fmt.Errorf("statement for %s: %w", p.key.Scope, err)
		}
		if len(ids) > 0 {
			byCred := fields[p.clientID]
			var ask []string
			for _, id := range ids {
				if _, ok := byCred[id]; !ok {
					ask = append(ask, id)
				}
			}
			if len(ask) > 0 {
				got, err := n.store.CredentialFields(ctx, p.clientID, ask)
				if err != nil {
					return nil, fmt.Errorf("credential fields: %w", err)
				}
				if byCred == nil {
					byCred = map[string][]string{}
					fields[p.clientID] = byCred
				}
				for _, id := range ask {
					byCred[id] = got[id] // a credential gone has no fields: delivery then withholds the list
				}
			}
			if data, _, err = agentconfig.RedactForCache(data, byCred); err != nil {
				// A missing credential cannot be injected either: delivery withholds the list, so the
				// statement is never used. Sign the unredacted form rather than fail the whole request.
				data = p.ec.ConfigData
			}
		}
	}
	canon, err := agentconfig.Canonicalize(data)
	if err != nil {
		return nil, fmt.Errorf("statement for %s %s: %w", p.key.Scope, p.key.ConfigType, err)
	}
	sum := sha256.Sum256(canon)
	h := hex.EncodeToString(sum[:])
	return &h, nil
}

func (n *notary) sign(ctx context.Context, messages [][]byte) ([]Signature, error) {
	sigs, err := n.signer.Sign(ctx, messages)
	if err == nil && len(sigs) != len(messages) {
		err = fmt.Errorf("%d signatures for %d statements", len(sigs), len(messages))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSigning, err)
	}
	if n.observer != nil {
		counts := map[string]int{}
		for _, s := range sigs {
			counts[s.KeyID]++
		}
		for id, c := range counts {
			n.observer.Signed(id, c)
		}
	}
	return sigs, nil
}

// identities returns the identity statement of each host (by host id): the stored ones as the hosts
// were read with them (known: Store.FetchRows reads them in its one query), the others signed in one
// batch and stored. Hosts registered through the config-api have theirs signed at registration, so a
// herd of a new fleet signs nothing here.
func (n *notary) identities(ctx context.Context, hosts []Host, known map[string]*protocol.Signed) (map[string]*protocol.Signed, error) {
	if n == nil || len(hosts) == 0 {
		return nil, nil
	}
	out := make(map[string]*protocol.Signed, len(hosts))
	var missing []Host
	var messages [][]byte
	for _, h := range hosts {
		if s := known[h.ID]; s != nil {
			out[h.ID] = s
			continue
		}
		b, err := signing.Encode(signing.IdentityStatement{Kind: signing.KindIdentity, AgentID: h.AgentID, EnvironmentID: h.EnvironmentID})
		if err != nil {
			return nil, err
		}
		missing = append(missing, h)
		messages = append(messages, b)
	}
	if len(missing) == 0 {
		return out, nil
	}
	sigs, err := n.sign(ctx, messages)
	if err != nil {
		return nil, err
	}
	fresh := make(map[string]protocol.Signed, len(missing))
	for i, h := range missing {
		s := protocol.Signed{Statement: messages[i], KeyID: sigs[i].KeyID, Signature: sigs[i].Value}
		fresh[h.ID] = s
		out[h.ID] = &s
	}
	if err := n.store.SaveIdentityStatements(ctx, fresh); err != nil {
		return nil, fmt.Errorf("store %d identity statements: %w", len(fresh), err)
	}
	return out, nil
}
