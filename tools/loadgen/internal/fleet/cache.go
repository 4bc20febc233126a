package fleet

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/configsync/configsync/libs/agentconfig"
)

// entry is one cached config as a real agent stores it: redacted when the backend injected secrets.
// Entries are interned fleet-wide, because an environment-wide push hands every agent the same bytes:
// redacting and hashing them once per distinct content, instead of once per agent, keeps loadgen's own
// CPU out of the measurement on a small machine.
type entry struct {
	id    uint64
	cache agentconfig.CacheEntry
}

// entryTable interns entries and memoises the config_hash of each distinct set of entries.
type entryTable struct {
	mu     sync.Mutex
	byKey  map[string]*entry
	hashes map[string]string
	next   uint64
}

func newEntryTable() *entryTable {
	return &entryTable{byKey: map[string]*entry{}, hashes: map[string]string{}}
}

// intern returns the shared entry of (configType, version, payload, secretFields), redacting payload at
// secretFields the first time that content is seen.
func (t *entryTable) intern(configType string, version int64, payload json.RawMessage, secretFields []string) (*entry, error) {
	// The key is built in a pooled buffer and looked up without a string copy: every agent's fetch
	// interns each of its types, nearly always a hit.
	bp := internKeys.Get().(*[]byte)
	defer internKeys.Put(bp)
	k := append((*bp)[:0], configType...)
	k = append(k, 0)
	k = strconv.AppendInt(k, version, 10)
	k = append(k, 0)
	for _, f := range secretFields {
		k = append(k, f...)
		k = append(k, 1)
	}
	k = append(k, 0)
	k = append(k, payload...)
	*bp = k

	t.mu.Lock()
	e, ok := t.byKey[string(k)]
	t.mu.Unlock()
	if ok {
		return e, nil
	}
	key := string(k)
	ce := agentconfig.CacheEntry{ConfigType: configType, ConfigData: slices.Clone(payload), Version: version}
	if len(secretFields) > 0 {
		red, err := agentconfig.Redact(payload, secretFields)
		if err != nil {
			return nil, fmt.Errorf("redact %s: %w", configType, err)
		}
		ce.ConfigData, ce.Redacted, ce.SecretFields = red, true, slices.Clone(secretFields)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byKey[key]; ok { // another agent won the race
		return e, nil
	}
	t.next++
	e = &entry{id: t.next, cache: ce}
	t.byKey[key] = e
	return e, nil
}

// internKeys are the buffers intern builds its keys in.
var internKeys = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// hash returns the config_hash of entries (any order), computed once per distinct set.
func (t *entryTable) hash(entries []*entry) string {
	ids := make([]uint64, len(entries))
	for i, e := range entries {
		ids[i] = e.id
	}
	slices.Sort(ids)
	var k strings.Builder
	for _, id := range ids {
		k.WriteString(strconv.FormatUint(id, 36))
		k.WriteByte(',')
	}
	key := k.String()
	t.mu.Lock()
	h, ok := t.hashes[key]
	t.mu.Unlock()
	if ok {
		return h
	}
	ces := make([]agentconfig.CacheEntry, len(entries))
	for i, e := range entries {
		ces[i] = e.cache
	}
	h = agentconfig.ConfigHash(ces)
	t.mu.Lock()
	t.hashes[key] = h
	t.mu.Unlock()
	return h
}
