// Package changedetect hashes the files under the configured paths on every scan and reports what was
// created, modified or deleted since the previous scan.
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
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/configsync/configsync/libs/agentconfig"
)

// DefaultInterval is the scan interval when the config names none.
const DefaultInterval = 5 * time.Minute

// maxFiles bounds one scan so a path like / cannot exhaust the host.
const maxFiles = 100_000

// Parse decodes a change_detection config (null: disabled) and returns the scan interval, zero when
// detection is disabled.
func Parse(data json.RawMessage) (Config, time.Duration, error) {
	var raw agentconfig.ChangeDetectionConfig
	if !agentconfig.IsNull(data) {
		if err := json.Unmarshal(data, &raw); err != nil {
			return Config{}, 0, fmt.Errorf("change_detection: %w", err)
		}
	}
	c := Config{Enabled: raw.Enabled != nil && *raw.Enabled, Paths: raw.Paths}
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
	Enabled bool
	Paths   []string
}

// Change is one detected difference.
type Change struct {
	Path   string `json:"path"`
	Change string `json:"change"` // created, modified, deleted
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
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
	emit func(Report)

	mu       sync.Mutex
	cfg      Config
	baseline map[string]Change // nil until the first scan under the current paths
	scans    int
}

// NewScanner returns a disabled scanner; emit receives reports that contain changes.
func NewScanner(log *slog.Logger, emit func(Report)) *Scanner {
	return &Scanner{log: log, emit: emit}
}

// UpdateConfig swaps the config. A change of paths starts a new baseline, so files merely coming into
// scope are not reported as created.
func (s *Scanner) UpdateConfig(cfg Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Equal(cfg.Paths, s.cfg.Paths) || !cfg.Enabled {
		s.baseline = nil
	}
	s.cfg = cfg
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
	for _, root := range s.cfg.Paths {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				s.log.Debug("change detection cannot read path", "path", path, "error", err)
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if len(current) >= maxFiles {
				return fs.SkipAll
			}
			sum, size, err := hashFile(path)
			if err != nil {
				s.log.Debug("change detection cannot hash file", "path", path, "error", err)
				return nil
			}
			current[path] = Change{Path: path, SHA256: sum, Size: size}
			return nil
		})
		if err != nil && ctx.Err() != nil {
			return
		}
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
		case old.SHA256 != c.SHA256:
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

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
