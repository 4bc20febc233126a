// Package credentialtest holds what the credential service's tests share: an in-memory
// credential.Store with the same scoping rules as the PostgreSQL adapter.
package credentialtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/configsync/configsync/services/credential/internal/credential"
)

// MemStore is an in-memory credential.Store. Clients and their environments exist once added with
// AddClient; everything else is not found.
type MemStore struct {
	mu   sync.Mutex
	rows map[string]credential.Record
	// envs maps environment id -> client id, for the Create check.
	envs map[string]string
	// clients lists the clients that exist.
	clients map[string]bool
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{rows: map[string]credential.Record{}, envs: map[string]string{}, clients: map[string]bool{}}
}

// AddClient makes clientID and its environments envIDs exist.
func (s *MemStore) AddClient(clientID string, envIDs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients[clientID] = true
	for _, e := range envIDs {
		s.envs[e] = clientID
	}
}

// Create is credential.Store.Create.
func (s *MemStore) Create(_ context.Context, r credential.Record) (credential.Record, error) {
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
func (s *MemStore) get(clientID, id string) (credential.Record, error) {
	r, ok := s.rows[id]
	if !ok || r.ClientID != clientID {
		return credential.Record{}, fmt.Errorf("%w: credential %s", credential.ErrNotFound, id)
	}
	return r, nil
}

// Get is credential.Store.Get.
func (s *MemStore) Get(_ context.Context, clientID, id string) (credential.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.get(clientID, id)
}

// List is credential.Store.List.
func (s *MemStore) List(_ context.Context, clientID, environmentID string) ([]credential.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []credential.Record
	for _, r := range s.rows {
		if r.ClientID == clientID && (environmentID == "" || r.EnvironmentID == environmentID) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b credential.Record) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Update is credential.Store.Update: it stores the fields, ciphertext, key version and allowed
// targets fn returns.
func (s *MemStore) Update(_ context.Context, clientID, id string, fn func(credential.Record) (credential.Record, error)) (credential.Record, error) {
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
	r.Fields, r.Ciphertext, r.KeyVersion, r.AllowedTargets = next.Fields, next.Ciphertext, next.KeyVersion, next.AllowedTargets
	r.UpdatedAt = time.Now().UTC()
	s.rows[id] = r
	return r, nil
}

// Delete is credential.Store.Delete.
func (s *MemStore) Delete(_ context.Context, clientID, id string) (credential.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.get(clientID, id)
	if err != nil {
		return credential.Record{}, err
	}
	delete(s.rows, id)
	return r, nil
}

// SealedByIDs is credential.Store.SealedByIDs.
func (s *MemStore) SealedByIDs(_ context.Context, ids []string) (map[string]credential.Sealed, error) {
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

// SetCiphertext overwrites a row's ciphertext, as an attacker with database access (or corruption)
// would.
func (s *MemStore) SetCiphertext(id, ct string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[id]
	r.Ciphertext = ct
	s.rows[id] = r
}

// Ciphertext returns a row's ciphertext.
func (s *MemStore) Ciphertext(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows[id].Ciphertext
}
