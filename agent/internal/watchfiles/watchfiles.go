// Package watchfiles is the file watch scanner: it reports the files under the configured paths (size,
// mode, modification time, SHA-256 and, for small non-sensitive text files, the content) whenever they
// appear or change. Sensitive files are reported by hash only, never content; files above
// max_file_size by metadata only.
package watchfiles

import (
	"bytes"
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
	"unicode/utf8"

	"github.com/configsync/configsync/libs/agentconfig"
)

// Config is the watch_files config type.
type Config = agentconfig.WatchFilesConfig

// DefaultMaxFileSize applies when the config names none.
const DefaultMaxFileSize = 1 << 20

const maxFiles = 50_000

// Parse decodes a watch_files config (null: nothing watched) and fills in the default max_file_size.
func Parse(data json.RawMessage) (Config, error) {
	var c Config
	if !agentconfig.IsNull(data) {
		if err := json.Unmarshal(data, &c); err != nil {
			return c, fmt.Errorf("watch_files: %w", err)
		}
	}
	if c.MaxFileSize < 0 {
		return c, fmt.Errorf("watch_files: max_file_size must be positive")
	}
	if c.MaxFileSize == 0 {
		c.MaxFileSize = DefaultMaxFileSize
	}
	for _, p := range append(slices.Clone(c.ExcludePatterns), c.SensitiveFiles...) {
		if _, err := filepath.Match(p, ""); err != nil {
			return c, fmt.Errorf("watch_files: bad pattern %q: %w", p, err)
		}
	}
	return c, nil
}

// File is one reported file.
type File struct {
	Path      string    `json:"path"`
	Size      int64     `json:"size"`
	Mode      string    `json:"mode"`
	ModTime   time.Time `json:"mod_time"`
	SHA256    string    `json:"sha256,omitempty"`
	Sensitive bool      `json:"sensitive,omitempty"`
	TooLarge  bool      `json:"too_large,omitempty"`
	Content   *string   `json:"content,omitempty"`
}

// Report is what a scan publishes: files new or changed since the previous report, and removed paths.
// Full is set on the first scan under a config (every file is listed).
type Report struct {
	Time    time.Time `json:"time"`
	Full    bool      `json:"full"`
	Files   []File    `json:"files"`
	Removed []string  `json:"removed,omitempty"`
}

// Scanner holds the config and what was last reported.
type Scanner struct {
	log  *slog.Logger
	emit func(Report)

	mu   sync.Mutex
	cfg  Config
	seen map[string]string // path -> fingerprint of the last report; nil: next scan is full
}

// NewScanner returns a scanner watching nothing.
func NewScanner(log *slog.Logger, emit func(Report)) *Scanner {
	return &Scanner{log: log, emit: emit, cfg: Config{MaxFileSize: DefaultMaxFileSize}}
}

// UpdateConfig swaps the config; the next scan is a full one under the new rules.
func (s *Scanner) UpdateConfig(cfg Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cfg.MaxFileSize <= 0 {
		cfg.MaxFileSize = DefaultMaxFileSize
	}
	s.cfg = cfg
	s.seen = nil
}

func match(patterns []string, path string) bool {
	base := filepath.Base(path)
	for _, p := range patterns {
		if p == path {
			return true
		}
		if ok, _ := filepath.Match(p, base); ok {
			return true
		}
		if ok, _ := filepath.Match(p, path); ok {
			return true
		}
	}
	return false
}

// Scan walks the paths once and emits a report when something is new, changed or removed (always on
// the first scan under a config with paths).
func (s *Scanner) Scan(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cfg.Paths) == 0 {
		s.seen = map[string]string{}
		return
	}
	full := s.seen == nil
	now := map[string]string{}
	var changed []File
	for _, root := range s.cfg.Paths {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				s.log.Debug("watch_files cannot read path", "path", path, "error", err)
				return nil
			}
			if match(s.cfg.ExcludePatterns, path) {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if len(now) >= maxFiles {
				return fs.SkipAll
			}
			f, err := s.describe(path)
			if err != nil {
				s.log.Debug("watch_files cannot read file", "path", path, "error", err)
				return nil
			}
			fp := fmt.Sprintf("%d|%s|%s|%t", f.Size, f.ModTime.Format(time.RFC3339Nano), f.SHA256, f.Sensitive)
			now[path] = fp
			if full || s.seen[path] != fp {
				changed = append(changed, f)
			}
			return nil
		})
		if err != nil && ctx.Err() != nil {
			return
		}
	}
	var removed []string
	for p := range s.seen {
		if _, ok := now[p]; !ok {
			removed = append(removed, p)
		}
	}
	s.seen = now
	if !full && len(changed) == 0 && len(removed) == 0 {
		return
	}
	sort.Slice(changed, func(i, j int) bool { return changed[i].Path < changed[j].Path })
	sort.Strings(removed)
	if changed == nil {
		changed = []File{}
	}
	if s.emit != nil {
		s.emit(Report{Time: time.Now().UTC(), Full: full, Files: changed, Removed: removed})
	}
}

func (s *Scanner) describe(path string) (File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return File{}, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return File{}, err
	}
	f := File{Path: path, Size: st.Size(), Mode: st.Mode().Perm().String(), ModTime: st.ModTime().UTC(),
		Sensitive: match(s.cfg.SensitiveFiles, path)}
	if st.Size() > s.cfg.MaxFileSize {
		f.TooLarge = true
		return f, nil
	}
	h := sha256.New()
	var buf bytes.Buffer
	w := io.Writer(h)
	if !f.Sensitive {
		// Content is only ever read into memory for files that may be reported with it.
		w = io.MultiWriter(h, &buf)
	}
	if _, err := io.Copy(w, io.LimitReader(fh, s.cfg.MaxFileSize+1)); err != nil {
		return File{}, err
	}
	f.SHA256 = hex.EncodeToString(h.Sum(nil))
	if !f.Sensitive && utf8.Valid(buf.Bytes()) {
		c := buf.String()
		f.Content = &c
	}
	return f, nil
}
