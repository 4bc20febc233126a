// Package changedetect hashes the files under the configured paths on every scan and reports what was
// created, modified or deleted since the previous scan. Every path must lie under the local policy's
// read roots; files the policy denies are skipped, and a scan visits at most the policy's max_files.
package changedetect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/libs/agentconfig"
)

// DefaultInterval is the scan interval when the config names none.
const DefaultInterval = 5 * time.Minute

// Parse decodes a change_detection config (null: disabled) and returns the scan interval, zero when
// detection is disabled.
func Parse(data json.RawMessage) (Config, time.Duration, error) {
	var raw agentconfig.ChangeDetectionConfig
	if !agentconfig.IsNull(data) {
		if err := json.Unmarshal(data, &raw); err != nil {
			return Config{}, 0, fmt.Errorf("change_detection: %w", err)
		}
	}
	c := Config{Enabled: raw.Enabled != nil && *raw.Enabled, Paths: raw.Paths, Interval: raw.Interval.Std()}
	if raw.Interval < 0 {
		return c, 0, fmt.Errorf("change_detection: interval must be positive")
	}
	every := DefaultInterval
	if raw.Interval > 0 {
		every = raw.Interval.Std()
	}
	if !c.Enabled {
		every = 0
	}
	return c, every, nil
}

// Config is what the scanner needs of the change_detection config.
type Config struct {
	Enabled  bool
	Paths    []string
	Interval time.Duration // as configured (0: the default)
}

// Check refuses a change_detection config the policy does not allow: a path outside policy.read_paths
// (or denied), or an interval below the policy's minimum.
func Check(pol *policy.Policy, c Config) error {
	if err := pol.CheckInterval(c.Interval); err != nil {
		return fmt.Errorf("change_detection: interval: %w", err)
	}
	for i, p := range c.Paths {
		if err := pol.CheckRead(p); err != nil {
			return fmt.Errorf("change_detection: paths[%d]: %w", i, err)
		}
	}
	return nil
}

// Change is one detected difference.
type Change struct {
	Path   string `json:"path"`
	Change string `json:"change"` // created, modified, deleted
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
	// ModTime is set, and SHA256 left empty, for a file larger than policy.limits.max_hash_size: such a
	// file is watched by size and modification time, never read.
	ModTime *time.Time `json:"mtime,omitempty"`
}

// Report is what a scan that found changes publishes.
type Report struct {
	Time    time.Time `json:"time"`
	Changes []Change  `json:"changes"`
	Files   int       `json:"files"`
}

// Scanner holds the config and the last scan's hashes.
type Scanner struct {
	log  *slog.Logger
	pol  *policy.Policy
	emit func(Report)

	mu       sync.Mutex
	cfg      Config
	baseline map[string]Change // nil until the first scan under the current paths
	scans    int
}

// NewScanner returns a disabled scanner reading only what pol allows; emit receives reports that
// contain changes.
func NewScanner(log *slog.Logger, pol *policy.Policy, emit func(Report)) *Scanner {
	return &Scanner{log: log, pol: pol, emit: emit}
}

// UpdateConfig checks cfg against the policy (a refusal keeps the running config) and swaps it. A
// change of paths starts a new baseline, so files merely coming into scope are not reported as created.
func (s *Scanner) UpdateConfig(cfg Config) error {
	if err := Check(s.pol, cfg); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Equal(cfg.Paths, s.cfg.Paths) || !cfg.Enabled {
		s.baseline = nil
	}
	s.cfg = cfg
	return nil
}

// Scans counts completed scans.
func (s *Scanner) Scans() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scans
}

// Scan walks the paths once and emits the differences from the previous scan. It does nothing while
// disabled.
func (s *Scanner) Scan(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.cfg.Enabled {
		return
	}
	current := map[string]Change{}
	maxFiles := s.pol.Limits().MaxFiles
	truncated := false
	for _, configured := range s.cfg.Paths {
		// Walk from the resolved root (WalkDir follows no symlink below it), checked again each scan.
		root, err := s.pol.Resolved(configured)
		if err != nil {
			s.log.Warn("change detection path refused by the policy", "path", configured, "error", err)
			continue
		}
		err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				s.log.Debug("change detection cannot read path", "path", path, "error", err)
				return nil
			}
			if d.IsDir() {
				if s.pol.CheckResolved(path) != nil {
					return fs.SkipDir // denied: the policy's deny list wins inside an allowed root
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if len(current) >= maxFiles {
				truncated = true
				return fs.SkipAll
			}
			c, err := s.fingerprint(path)
			if err != nil {
				s.log.Debug("change detection cannot hash file", "path", path, "error", err)
				return nil
			}
			current[path] = c
			return nil
		})
		if err != nil && ctx.Err() != nil {
			return
		}
	}
	if truncated {
		s.log.Warn("change detection scan stopped at the policy's file limit", "max_files", maxFiles)
	}
	s.scans++
	prev := s.baseline
	s.baseline = current
	if prev == nil {
		return
	}
	var changes []Change
	for p, c := range current {
		old, ok := prev[p]
		switch {
		case !ok:
			c.Change = "created"
			changes = append(changes, c)
		case old.SHA256 != c.SHA256 || old.Size != c.Size || !sameTime(old.ModTime, c.ModTime):
			c.Change = "modified"
			changes = append(changes, c)
		}
	}
	for p := range prev {
		if _, ok := current[p]; !ok {
			changes = append(changes, Change{Path: p, Change: "deleted"})
		}
	}
	if len(changes) == 0 {
		return
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].Path < changes[j].Path })
	if s.emit != nil {
		s.emit(Report{Time: time.Now().UTC(), Changes: changes, Files: len(current)})
	}
}

// fingerprint is what a scan compares of one file: its SHA-256 and size, or, for a file over the
// policy's max_hash_size, its size and modification time (the file is not read).
func (s *Scanner) fingerprint(path string) (Change, error) {
	f, _, err := s.pol.OpenResolved(path)
	if err != nil {
		return Change{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Change{}, err
	}
	if st.Size() > s.pol.Limits().MaxHashSize {
		mt := st.ModTime().UTC()
		return Change{Path: path, Size: st.Size(), ModTime: &mt}, nil
	}
	h := sha256.New()
	// Read at most one byte past the cap: a file growing while it is hashed cannot make the scan read
	// without bound.
	n, err := io.Copy(h, io.LimitReader(f, s.pol.Limits().MaxHashSize+1))
	if err != nil {
		return Change{}, err
	}
	return Change{Path: path, SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}
