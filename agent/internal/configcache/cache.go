// Package configcache is the agent's persistent config cache at {data_dir}/config.cache.json: the last
// config of every type received from the backend, so that an agent restarting while the backend is
// away still runs with what it was told. Writes are atomic (temp file, fsync, rename, fsync of the
// directory), the file is 0600 in a 0700 directory, and injected secrets never reach it: values named
// by secret_fields are stored as "[REDACTED]" and the entry is flagged redacted, while the real values
// stay in memory only.
package configcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// FileName is the cache file inside the data directory.
const FileName = "config.cache.json"

const (
	fileMode = 0o600
	dirMode  = 0o700
	tmpGlob  = ".config.cache.*.tmp"
)

// StaleError is returned for a change older than the version the cache holds for its type.
type StaleError struct {
	ConfigType string
	Version    int64
	Current    int64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("config %s version %d is older than the cached version %d", e.ConfigType, e.Version, e.Current)
}

// ErrNotPersisted wraps a failure to write the cache file: the change is in effect in memory only.
var ErrNotPersisted = errors.New("config cache not written to disk")

// ErrStale matches every *StaleError with errors.Is.
var ErrStale = errors.New("stale config version")

// Is makes errors.Is(err, ErrStale) true for a *StaleError.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Entry is a cached config as the agent uses it. Data is the live (un-redacted) value when this process
// received it; after a restart a redacted entry only has its redacted form and Redacted is true.
type Entry struct {
	ConfigType string
	Data       json.RawMessage
	Version    int64
	Redacted   bool
}

// Change is one update: a config to store, or with Delete set a type to drop (Version is then the
// deletion's version). Statement is the config's signed statement, stored with it so the entry can be
// verified again when the cache is loaded.
type Change struct {
	ConfigType   string
	Data         json.RawMessage
	Version      int64
	SecretFields []string
	Delete       bool
	Statement    *protocol.Signed
}

// Stored is one entry of the cache file: the config as cached (redacted) and its signed statement.
type Stored struct {
	agentconfig.CacheEntry
	Statement *protocol.Signed `json:"statement,omitempty"`
}

type entry struct {
	stored Stored          // exactly what is on disk
	live   json.RawMessage // un-redacted value; nil when only the redacted form is known
}

// Cache is safe for concurrent use.
type Cache struct {
	dir, path string
	log       *slog.Logger

	mu      sync.RWMutex
	entries map[string]*entry
	// deleted remembers the version of types deleted in this process, so a delayed older push cannot
	// bring a deleted config back. It is not persisted.
	deleted map[string]int64
	// verify, if set, checks every entry when the file is loaded (its signature); failing entries are
	// not used.
	verify func(Stored) error
}

// Open creates dataDir (0700) if needed and loads the cache file. A missing file gives an empty cache;
// a corrupt one is logged, set aside as config.cache.json.corrupt and also gives an empty cache.
func Open(dataDir string, log *slog.Logger) (*Cache, error) { return OpenVerified(dataDir, log, nil) }

// OpenVerified is Open checking each loaded entry with verify: an entry it refuses (a tampered value,
// a missing or untrusted signature, e.g. an entry written by an agent release that did not sign) is
// dropped with a warning, so the agent runs its local default for the type until a fetch brings a
// signed config.
func OpenVerified(dataDir string, log *slog.Logger, verify func(Stored) error) (*Cache, error) {
	if dataDir == "" {
		return nil, errors.New("configcache: data directory is required")
	}
	if err := os.MkdirAll(dataDir, dirMode); err != nil {
		return nil, fmt.Errorf("configcache: create %s: %w", dataDir, err)
	}
	if st, err := os.Stat(dataDir); err != nil {
		return nil, fmt.Errorf("configcache: %w", err)
	} else if st.Mode().Perm() != dirMode {
		if err := os.Chmod(dataDir, dirMode); err != nil {
			return nil, fmt.Errorf("configcache: restrict %s to 0700: %w", dataDir, err)
		}
		log.Info("data directory permissions restricted", "path", dataDir, "was", st.Mode().Perm().String())
	}
	c := &Cache{dir: dataDir, path: filepath.Join(dataDir, FileName), log: log,
		entries: map[string]*entry{}, deleted: map[string]int64{}, verify: verify}
	// Temp files left by a crash mid-write are garbage: the real file is either old or new.
	if leftovers, _ := filepath.Glob(filepath.Join(dataDir, tmpGlob)); len(leftovers) > 0 {
		for _, f := range leftovers {
			_ = os.Remove(f)
		}
	}
	c.load()
	return c, nil
}

// Path is the cache file.
func (c *Cache) Path() string { return c.path }

func (c *Cache) load() {
	data, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		c.log.Info("config cache empty: no cache file yet", "path", c.path)
		return
	}
	if err != nil {
		c.log.Warn("config cache unreadable; starting empty", "path", c.path, "error", err)
		return
	}
	var stored []Stored
	if err := json.Unmarshal(data, &stored); err != nil {
		c.setAside(fmt.Errorf("decode: %w", err))
		return
	}
	entries := map[string]*entry{}
	for i, e := range stored {
		if err := checkStored(e.CacheEntry); err != nil {
			c.setAside(fmt.Errorf("entry %d: %w", i, err))
			return
		}
		if _, dup := entries[e.ConfigType]; dup {
			c.setAside(fmt.Errorf("entry %d: type %s cached twice", i, e.ConfigType))
			return
		}
		e.ConfigData = compact(e.ConfigData) // the file is indented; memory holds compact JSON
		if c.verify != nil {
			if err := c.verify(e); err != nil {
				c.log.Warn("cached config not used: its signature does not verify", "config_type", e.ConfigType,
					"version", e.Version, "error", err)
				continue
			}
		}
		ent := &entry{stored: e}
		if !e.Redacted {
			ent.live = e.ConfigData
		}
		entries[e.ConfigType] = ent
	}
	c.entries = entries
	c.log.Info("config cache loaded", "path", c.path, "types", len(entries))
}

func checkStored(e agentconfig.CacheEntry) error {
	if !agentconfig.Known(e.ConfigType) {
		return fmt.Errorf("unknown config type %q", e.ConfigType)
	}
	if e.Version < 0 {
		return fmt.Errorf("negative version")
	}
	if !json.Valid(e.ConfigData) || agentconfig.IsNull(e.ConfigData) {
		return fmt.Errorf("config_data of %s is not a JSON value", e.ConfigType)
	}
	return nil
}

func (c *Cache) setAside(cause error) {
	aside := c.path + ".corrupt"
	if err := os.Rename(c.path, aside); err != nil {
		c.log.Warn("config cache corrupt; starting empty", "path", c.path, "error", cause, "set_aside_error", err)
		return
	}
	c.log.Warn("config cache corrupt; starting empty", "path", c.path, "error", cause, "moved_to", aside)
}

// Get returns the cached config of one type.
func (c *Cache) Get(configType string) (Entry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.entries[configType]
	if !ok {
		return Entry{}, false
	}
	if e.live != nil {
		return Entry{ConfigType: configType, Data: e.live, Version: e.stored.Version}, true
	}
	return Entry{ConfigType: configType, Data: e.stored.ConfigData, Version: e.stored.Version, Redacted: true}, true
}

// SecretFields returns the pointers of the injected (in-memory only) values of a type's cached config.
func (c *Cache) SecretFields(configType string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.entries[configType]
	if !ok || e.live == nil {
		return nil
	}
	return slices.Clone(e.stored.SecretFields)
}

// Version returns the version held for a type: the cached one, or that of its deletion in this process.
func (c *Cache) Version(configType string) int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.versionLocked(configType)
}

func (c *Cache) versionLocked(configType string) int64 {
	if e, ok := c.entries[configType]; ok {
		return e.stored.Version
	}
	return c.deleted[configType]
}

// Put stores one config and persists the cache. A version older than the one held returns a
// *StaleError and changes nothing. secretFields are RFC 6901 pointers to values that must not reach
// disk.
func (c *Cache) Put(configType string, data json.RawMessage, version int64, secretFields []string) error {
	errs, err := c.Apply(Change{ConfigType: configType, Data: data, Version: version, SecretFields: secretFields})
	if errs[0] != nil {
		return errs[0]
	}
	return err
}

// Remove drops one type (deleted at version) and persists the cache.
func (c *Cache) Remove(configType string, version int64) error {
	errs, err := c.Apply(Change{ConfigType: configType, Version: version, Delete: true})
	if errs[0] != nil {
		return errs[0]
	}
	return err
}

// Apply makes several changes and persists once. It returns one error per change (nil, a *StaleError,
// or why the change was refused) and the error of writing the file, if any. Accepted changes are in
// effect in memory even when writing fails.
func (c *Cache) Apply(changes ...Change) ([]error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	errs := make([]error, len(changes))
	dirty := false
	for i, ch := range changes {
		if ch.ConfigType == "" {
			errs[i] = errors.New("configcache: config type is empty")
			continue
		}
		if !agentconfig.Known(ch.ConfigType) {
			errs[i] = fmt.Errorf("configcache: unknown config type %q", ch.ConfigType)
			continue
		}
		if cur := c.versionLocked(ch.ConfigType); ch.Version < cur {
			errs[i] = &StaleError{ConfigType: ch.ConfigType, Version: ch.Version, Current: cur}
			continue
		}
		if ch.Delete || agentconfig.IsNull(ch.Data) {
			if _, ok := c.entries[ch.ConfigType]; ok {
				delete(c.entries, ch.ConfigType)
				dirty = true
			}
			c.deleted[ch.ConfigType] = ch.Version
			continue
		}
		if !json.Valid(ch.Data) {
			errs[i] = fmt.Errorf("configcache: %s config is not valid JSON", ch.ConfigType)
			continue
		}
		stored := Stored{CacheEntry: agentconfig.CacheEntry{ConfigType: ch.ConfigType, ConfigData: compact(ch.Data), Version: ch.Version},
			Statement: ch.Statement}
		if len(ch.SecretFields) > 0 {
			red, err := agentconfig.Redact(ch.Data, ch.SecretFields)
			if err != nil {
				// Never store what could not be redacted: the secret would reach disk.
				errs[i] = fmt.Errorf("configcache: redact %s: %w", ch.ConfigType, err)
				continue
			}
			stored.ConfigData = compact(red)
			stored.Redacted = true
			stored.SecretFields = slices.Clone(ch.SecretFields)
		}
		c.entries[ch.ConfigType] = &entry{stored: stored, live: slices.Clone(ch.Data)}
		delete(c.deleted, ch.ConfigType)
		dirty = true
	}
	if !dirty {
		return errs, nil
	}
	if err := c.persistLocked(); err != nil {
		return errs, fmt.Errorf("%w: %w", ErrNotPersisted, err)
	}
	return errs, nil
}

func compact(data json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return slices.Clone(data)
	}
	return b.Bytes()
}

// Entries returns the cache as stored (redacted), sorted by type.
func (c *Cache) Entries() []agentconfig.CacheEntry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.entriesLocked()
}

func (c *Cache) entriesLocked() []agentconfig.CacheEntry {
	out := make([]agentconfig.CacheEntry, 0, len(c.entries))
	for _, t := range slices.Sorted(maps.Keys(c.entries)) {
		out = append(out, c.entries[t].stored.CacheEntry)
	}
	return out
}

// storedLocked is the file's content: the entries with their statements, sorted by type.
func (c *Cache) storedLocked() []Stored {
	out := make([]Stored, 0, len(c.entries))
	for _, t := range slices.Sorted(maps.Keys(c.entries)) {
		out = append(out, c.entries[t].stored)
	}
	return out
}

// ConfigHash is the SHA-256 of the cached configs as stored (agentconfig.ConfigHash), reported in every
// heartbeat for drift detection.
func (c *Cache) ConfigHash() string { return agentconfig.ConfigHash(c.Entries()) }

// ConfigVersion is the highest cached version.
func (c *Cache) ConfigVersion() int64 { return agentconfig.MaxVersion(c.Entries()) }

// ConfigVersions maps every cached type to its version.
func (c *Cache) ConfigVersions() map[string]int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make(map[string]int64, len(c.entries))
	for t, e := range c.entries {
		out[t] = e.stored.Version
	}
	return out
}

func (c *Cache) persistLocked() error {
	data, err := json.MarshalIndent(c.storedLocked(), "", "  ")
	if err != nil {
		return fmt.Errorf("configcache: encode: %w", err)
	}
	if err := WriteFileAtomic(c.path, append(data, '\n')); err != nil {
		return fmt.Errorf("configcache: write %s: %w", c.path, err)
	}
	return nil
}

// WriteFileAtomic replaces path with data so that a crash at any moment leaves either the old or the
// new content: temp file in the same directory, fsync, rename over path, fsync the directory.
func WriteFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, tmpGlob)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(fileMode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
