// Package trust is the agent's side of signed configs: the public keys it trusts, its verified identity
// (agent id -> environment id) and the check every config passes before it is cached or applied. Its
// state (the identity statement and any trusted-key lists accepted by rotation) is kept in
// {data_dir}/trust.json, 0600, written atomically; at load every statement in it is verified again from
// the keys of the local YAML, so a tampered file is ignored.
package trust

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
)

// FileName is the trust state file inside the data directory.
const FileName = "trust.json"

// state is what trust.json holds.
type state struct {
	Identity *protocol.Signed `json:"identity,omitempty"`
	// Rotations are the accepted trusted-key lists, oldest first: each was signed by a key of the set
	// before it (the first by a key of the local YAML).
	Rotations []protocol.Signed `json:"rotations,omitempty"`
}

// Verifier checks statements for one agent. The zero value is not usable; use Open. Safe for
// concurrent use.
type Verifier struct {
	agentID string
	skip    bool
	path    string
	log     *slog.Logger

	mu          sync.RWMutex
	keys        signing.KeySet
	keysVersion int64
	envID       string
	st          state
}

// Open builds the verifier from the YAML's keys (skip: trust.insecure_skip_verify) and loads the state
// in dataDir. A state entry that no longer verifies is dropped with a warning.
func Open(agentID string, keys signing.KeySet, skip bool, dataDir string, log *slog.Logger) *Verifier {
	v := &Verifier{agentID: agentID, skip: skip, keys: keys, path: filepath.Join(dataDir, FileName), log: log}
	if skip {
		log.Warn("INSECURE: trust.insecure_skip_verify is set; configs are applied WITHOUT checking their signatures")
	}
	data, err := os.ReadFile(v.path)
	if errors.Is(err, os.ErrNotExist) {
		return v
	}
	if err != nil {
		log.Warn("trust state unreadable; starting from the configured keys", "path", v.path, "error", err)
		return v
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		log.Warn("trust state corrupt; starting from the configured keys", "path", v.path, "error", err)
		return v
	}
	for i := range st.Rotations {
		if err := v.rotateLocked(&st.Rotations[i]); err != nil {
			log.Warn("stored trusted-key list ignored", "error", err)
			break
		}
	}
	if st.Identity != nil {
		if err := v.identityLocked(st.Identity); err != nil {
			log.Warn("stored identity ignored", "error", err)
		}
	}
	return v
}

// Skip reports whether verification is switched off.
func (v *Verifier) Skip() bool { return v.skip }

// EnvironmentID is the environment of the verified identity ("" before one arrives).
func (v *Verifier) EnvironmentID() string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.envID
}

// KeyIDs lists the trusted key ids (diagnostics).
func (v *Verifier) KeyIDs() []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]string, 0, len(v.keys))
	for id := range v.keys {
		out = append(out, id)
	}
	return out
}

// SetIdentity verifies and keeps the agent's identity statement (persisted when it changed).
func (v *Verifier) SetIdentity(s *protocol.Signed) error {
	if v.skip {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.identityLocked(s); err != nil {
		return err
	}
	return v.persistLocked()
}

func (v *Verifier) identityLocked(s *protocol.Signed) error {
	env, err := v.keys.Identity(s, v.agentID)
	if err != nil {
		return err
	}
	v.envID, v.st.Identity = env, s
	return nil
}

// Rotate accepts a new trusted-key list signed by a key trusted now and newer than the last one
// accepted, and persists it. A list not newer is ignored (nil error).
func (v *Verifier) Rotate(s *protocol.Signed) error {
	if v.skip || s == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	before := v.keysVersion
	if err := v.rotateLocked(s); err != nil {
		return err
	}
	if v.keysVersion == before {
		return nil
	}
	v.log.Info("trusted keys rotated", "version", v.keysVersion, "keys", len(v.keys))
	return v.persistLocked()
}

func (v *Verifier) rotateLocked(s *protocol.Signed) error {
	next, version, err := v.keys.TrustedKeys(s)
	if err != nil {
		return err
	}
	if version <= v.keysVersion {
		return nil // a replayed older list
	}
	v.keys, v.keysVersion = next, version
	v.st.Rotations = append(v.st.Rotations, *s)
	if v.st.Identity != nil {
		// The identity must still verify under the new keys; if not, the next fetch brings one.
		if env, err := v.keys.Identity(v.st.Identity, v.agentID); err == nil {
			v.envID = env
		} else {
			v.envID, v.st.Identity = "", nil
		}
	}
	return nil
}

func (v *Verifier) persistLocked() error {
	data, err := json.MarshalIndent(v.st, "", "  ")
	if err != nil {
		return fmt.Errorf("trust: encode state: %w", err)
	}
	if err := configcache.WriteFileAtomic(v.path, append(data, '\n')); err != nil {
		return fmt.Errorf("trust: write %s: %w", v.path, err)
	}
	return nil
}

// Config checks one delivered config (or deletion: null data) against its statement. It wraps
// signing.ErrSignatureInvalid on failure; with skip it accepts everything.
func (v *Verifier) Config(configType string, version int64, data json.RawMessage, secretFields []string, s *protocol.Signed) error {
	if v.skip {
		return nil
	}
	v.mu.RLock()
	keys, env := v.keys, v.envID
	v.mu.RUnlock()
	return keys.VerifyConfig(s, signing.Config{AgentID: v.agentID, EnvironmentID: env, ConfigType: configType,
		Version: version, Data: data, SecretFields: secretFields})
}

// Cached checks a cache entry as stored (redacted data, nothing else to redact).
func (v *Verifier) Cached(e configcache.Stored) error {
	return v.Config(e.ConfigType, e.Version, e.ConfigData, nil, e.Statement)
}
