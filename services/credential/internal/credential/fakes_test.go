package credential_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/configsync/configsync/services/credential/internal/credential"
)

// memStore is an in-memory credential.Store with the same scoping rules as the PostgreSQL adapter.
type memStore struct {
	mu   sync.Mutex
	rows map[string]credential.Record
	// envs maps environment id -> client id, for the Create check.
	envs map[string]string
	// clients lists the clients that exist.
	clients map[string]bool
}

func newMemStore() *memStore {
	return &memStore{rows: map[string]credential.Record{}, envs: map[string]string{}, clients: map[string]bool{}}
}

func (s *memStore) addClient(clientID string, envIDs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients[clientID] = true
	for _, e := range envIDs {
		s.envs[e] = clientID
	}
}

func (s *memStore) Create(_ context.Context, r credential.Record) (credential.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.clients[r.ClientID] {
		return credential.Record{}, fmt.Errorf("%w: client", credential.ErrNotFound)
	}
	if r.EnvironmentID != "" && s.envs[r.EnvironmentID] != r.ClientID {
		return credential.Record{}, fmt.Errorf("%w: environment", credential.ErrNotFound)
	}
	for _, o := range s.rows {
		if o.ClientID == r.ClientID && o.Name == r.Name {
			return credential.Record{}, fmt.Errorf("%w: name", credential.ErrConflict)
		}
	}
	now := time.Now().UTC()
	r.CreatedAt, r.UpdatedAt = now, now
	s.rows[r.ID] = r
	return r, nil
}

// get returns the row id of clientID; the caller holds mu.
func (s *memStore) get(clientID, id string) (credential.Record, error) {
	r, ok := s.rows[id]
	if !ok || r.ClientID != clientID {
		return credential.Record{}, fmt.Errorf("%w: credential %s", credential.ErrNotFound, id)
	}
	return r, nil
}

func (s *memStore) Get(_ context.Context, clientID, id string) (credential.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.get(clientID, id)
}

func (s *memStore) List(_ context.Context, clientID, environmentID string) ([]credential.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []credential.Record
	for _, r := range s.rows {
		if r.ClientID == clientID && (environmentID == "" || r.EnvironmentID == environmentID) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b credential.Record) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out, nil
}

func (s *memStore) Update(_ context.Context, clientID, id string, fn func(credential.Record) (credential.Record, error)) (credential.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.get(clientID, id)
	if err != nil {
		return credential.Record{}, err
	}
	next, err := fn(r)
	if err != nil {
		return credential.Record{}, err
	}
	r.Fields, r.Ciphertext, r.KeyVersion, r.UpdatedAt = next.Fields, next.Ciphertext, next.KeyVersion, time.Now().UTC()
	s.rows[id] = r
	return r, nil
}

func (s *memStore) Delete(_ context.Context, clientID, id string) (credential.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.get(clientID, id)
	if err != nil {
		return credential.Record{}, err
	}
	delete(s.rows, id)
	return r, nil
}

func (s *memStore) SealedByIDs(_ context.Context, ids []string) (map[string]credential.Sealed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]credential.Sealed{}
	for _, id := range ids {
		if r, ok := s.rows[id]; ok {
			out[id] = credential.Sealed{ID: r.ID, ClientID: r.ClientID, EnvironmentID: r.EnvironmentID, Ciphertext: r.Ciphertext, AllowedTargets: r.AllowedTargets}
		}
	}
	return out, nil
}

// setCiphertext overwrites a row's ciphertext, as an attacker with database access (or corruption) would.
func (s *memStore) setCiphertext(id, ct string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[id]
	r.Ciphertext = ct
	s.rows[id] = r
}

func (s *memStore) ciphertext(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows[id].Ciphertext
}

// countingCipher counts Decrypt calls and items at the port, and keeps the plaintexts it handed out so
// that a test can check they were zeroed.
type countingCipher struct {
	credential.Cipher
	calls, items atomic.Int64
	mu           sync.Mutex
	handedOut    [][]byte
	// fail, when set, is returned for every Decrypt call.
	fail error
}

func (c *countingCipher) Decrypt(ctx context.Context, items []credential.DecryptItem) ([]credential.Decrypted, error) {
	c.calls.Add(1)
	c.items.Add(int64(len(items)))
	if c.fail != nil {
		return nil, c.fail
	}
	out, err := c.Cipher.Decrypt(ctx, items)
	c.mu.Lock()
	for _, o := range out {
		if o.Plaintext != nil {
			c.handedOut = append(c.handedOut, o.Plaintext)
		}
	}
	c.mu.Unlock()
	return out, err
}

func (c *countingCipher) reset() {
	c.calls.Store(0)
	c.items.Store(0)
	c.mu.Lock()
	c.handedOut = nil
	c.mu.Unlock()
}

// allZeroed reports whether every plaintext handed out has been overwritten with zeros.
func (c *countingCipher) allZeroed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.handedOut {
		for _, b := range p {
			if b != 0 {
				return false
			}
		}
	}
	return true
}
