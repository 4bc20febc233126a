// Package watchfiles is the file watch scanner: it reports the files under the configured paths (size,
// mode, modification time, SHA-256 and, for small non-sensitive text files, the content) whenever they
// appear or change. Sensitive files are reported by hash only, never content; files above
// max_file_size by metadata only. Contents are sent only when the local policy allows it
// (upload_file_contents); otherwise every file is reported by metadata and hash. Every path must lie
// under the policy's read roots, and files the policy denies are skipped.
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
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/libs/agentconfig"
)

// Config is the watch_files config type.
type Config = agentconfig.WatchFilesConfig

// DefaultMaxFileSize applies when the config names none.
const DefaultMaxFileSize = 1 << 20

// Parse decodes a watch_files config (null: nothing watched). An unset max_file_size stays 0: the
// scanner then uses DefaultMaxFileSize, or the policy's cap when that is lower.
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

// Check refuses a watch_files config the policy does not allow: a path outside policy.read_paths (or
// denied), or a max_file_size above the policy's cap.
func Check(pol *policy.Policy, c Config) error {
	for i, p := range c.Paths {
		if err := pol.CheckRead(p); err != nil {
			return fmt.Errorf("watch_files: paths[%d]: %w", i, err)
		}
	}
	if err := pol.CheckFileSize(c.MaxFileSize); err != nil {
		return fmt.Errorf("watch_files: max_file_size: %w", err)
	}
	return nil
}

// Scanner holds the config and what was last reported.
type Scanner struct {
	log  *slog.Logger
	pol  *policy.Policy
	emit func(Report)

	mu   sync.Mutex
	cfg  Config
	seen map[string]string // path -> fingerprint of the last report; nil: next scan is full
}

// NewScanner returns a scanner watching nothing, reading only what pol allows.
func NewScanner(log *slog.Logger, pol *policy.Policy, emit func(Report)) *Scanner {
	return &Scanner{log: log, pol: pol, emit: emit, cfg: Config{MaxFileSize: min(DefaultMaxFileSize, pol.Limits().MaxFileSize)}}
}

// UpdateConfig checks cfg against the policy (a refusal keeps the running config) and swaps it; the
// next scan is a full one under the new rules.
func (s *Scanner) UpdateConfig(cfg Config) error {
	if cfg.MaxFileSize <= 0 {
		cfg.MaxFileSize = min(DefaultMaxFileSize, s.pol.Limits().MaxFileSize)
	}
	if err := Check(s.pol, cfg); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = cfg
	s.seen = nil
	return nil
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
	maxFiles := s.pol.Limits().MaxFiles
	truncated := false
	for _, configured := range s.cfg.Paths {
		// Walk from the resolved root (WalkDir follows no symlink below it), checked again each scan.
		root, err := s.pol.Resolved(configured)
		if err != nil {
			s.log.Warn("watch_files path refused by the policy", "path", configured, "error", err)
			continue
		}
		err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
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
			if d.IsDir() {
				if s.pol.CheckResolved(path) != nil {
					return fs.SkipDir // denied: the policy's deny list wins inside an allowed root
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if len(now) >= maxFiles {
				truncated = true
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
	if truncated {
		s.log.Warn("watch_files scan stopped at the policy's file limit", "max_files", maxFiles)
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
	fh, st, err := s.pol.OpenResolved(path)
	if err != nil {
		return File{}, err
	}
	defer fh.Close()
	f := File{Path: path, Size: st.Size(), Mode: st.Mode().Perm().String(), ModTime: st.ModTime().UTC(),
		Sensitive: match(s.cfg.SensitiveFiles, path)}
	if st.Size() > s.cfg.MaxFileSize {
		f.TooLarge = true
		return f, nil
	}
	h := sha256.New()
	var buf bytes.Buffer
	w := io.Writer(h)
	upload := !f.Sensitive && s.pol.UploadFileContents()
	if upload {
		// Content is only ever read into memory for files that may be reported with it.
		w = io.MultiWriter(h, &buf)
	}
	if _, err := io.Copy(w, io.LimitReader(fh, s.cfg.MaxFileSize+1)); err != nil {
		return File{}, err
	}
	f.SHA256 = hex.EncodeToString(h.Sum(nil))
	if upload && utf8.Valid(buf.Bytes()) {
		c := buf.String()
		f.Content = &c
	}
	return f, nil
}
