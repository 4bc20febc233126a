package ingest

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/google/uuid"
)

// HostDirectory maps agent ids to host ids, remembering up to a fixed number of them (least recently
// used evicted first). An agent's host id never changes while the host exists, so entries do not expire;
// Forget drops one when the database says the host is gone. Unknown agents are not remembered, so a host
// registered a moment ago is found on its first message.
type HostDirectory struct {
	store Store
	size  int

	mu      sync.Mutex
	order   *list.List // front = most recently used; values are *hostEntry
	entries map[string]*list.Element
}

type hostEntry struct {
	agentID string
	ref     HostRef
}

// HostRef is a host as ingestion needs it: its id and its environment (which never changes).
type HostRef struct {
	ID            uuid.UUID
	EnvironmentID uuid.UUID
}

// NewHostDirectory returns a directory over store holding at most size entries (at least 1).
func NewHostDirectory(store Store, size int) *HostDirectory {
	size = max(size, 1)
	return &HostDirectory{store: store, size: size, order: list.New(), entries: make(map[string]*list.Element, min(size, 1<<16))}
}

// Lookup returns the host id of every known agent among agentIDs, asking the store only for the agents
// it does not remember.
func (d *HostDirectory) Lookup(ctx context.Context, agentIDs []string) (map[string]uuid.UUID, error) {
	refs, err := d.LookupRefs(ctx, agentIDs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uuid.UUID, len(refs))
	for a, r := range refs {
		out[a] = r.ID
	}
	return out, nil
}

// LookupRefs is Lookup with each host's environment.
func (d *HostDirectory) LookupRefs(ctx context.Context, agentIDs []string) (map[string]HostRef, error) {
	found := make(map[string]HostRef, len(agentIDs))
	var missing []string
	d.mu.Lock()
	for _, id := range agentIDs {
		if _, done := found[id]; done {
			continue
		}
		if el, ok := d.entries[id]; ok {
			d.order.MoveToFront(el)
			found[id] = el.Value.(*hostEntry).ref
			continue
		}
		found[id] = HostRef{} // placeholder: keeps duplicates out of missing
		missing = append(missing, id)
	}
	d.mu.Unlock()
	for _, id := range missing {
		delete(found, id)
	}
	if len(missing) == 0 {
		return found, nil
	}
	loaded, err := d.store.LookupHostIDs(ctx, missing)
	if err != nil {
		return nil, fmt.Errorf("look up hosts: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for agentID, ref := range loaded {
		found[agentID] = ref
		d.putLocked(agentID, ref)
	}
	return found, nil
}

// Forget drops what the directory remembers about agentID.
func (d *HostDirectory) Forget(agentID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if el, ok := d.entries[agentID]; ok {
		d.order.Remove(el)
		delete(d.entries, agentID)
	}
}

// Len reports how many agents the directory remembers.
func (d *HostDirectory) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.order.Len()
}

func (d *HostDirectory) putLocked(agentID string, ref HostRef) {
	if el, ok := d.entries[agentID]; ok {
		el.Value.(*hostEntry).ref = ref
		d.order.MoveToFront(el)
		return
	}
	d.entries[agentID] = d.order.PushFront(&hostEntry{agentID: agentID, ref: ref})
	for d.order.Len() > d.size {
		oldest := d.order.Back()
		d.order.Remove(oldest)
		delete(d.entries, oldest.Value.(*hostEntry).agentID)
	}
}
