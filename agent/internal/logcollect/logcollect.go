// Package logcollect renders the log_collection config into a Fluent Bit configuration file in the
// agent's data directory. Fluent Bit reads its config only at start, so a change is logged as requiring
// a Fluent Bit restart. The agent refuses to render a file path that could reach outside the local
// policy's read roots or into its deny list: Fluent Bit usually runs with more rights than the agent.
package logcollect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/libs/agentconfig"
)

// Config is the log_collection config type.
type Config = agentconfig.LogCollectionConfig

// FileName is the rendered file, relative to the data directory.
const FileName = "fluent-bit.conf"

// Parse decodes a log_collection config (null: collect nothing).
func Parse(data json.RawMessage) (Config, error) {
	var c Config
	if agentconfig.IsNull(data) {
		return c, nil
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("log_collection: %w", err)
	}
	if c.FlushInterval < 0 {
		return c, fmt.Errorf("log_collection: flush_interval must be positive")
	}
	for i, f := range c.Files {
		if f.Name == "" || f.Path == "" {
			return c, fmt.Errorf("log_collection: files[%d]: name and path are required", i)
		}
		if strings.ContainsAny(f.Path+f.Name+f.Parser+f.Tag+strings.Join(f.ExcludePaths, ""), "\n\r") {
			return c, fmt.Errorf("log_collection: files[%d]: values must be single lines", i)
		}
	}
	if c.Journald != nil {
		for _, u := range c.Journald.Units {
			if strings.ContainsAny(u, "\n\r ") {
				return c, fmt.Errorf("log_collection: journald unit %q is not a unit name", u)
			}
		}
	}
	return c, nil
}

// Check refuses a log_collection config whose file paths (globs) the policy does not allow. Fluent
// Bit's tail Path is a comma-separated list of globs: each is checked; brace patterns are refused (they
// could combine allowed and denied paths). A "${" in any rendered value is refused: Fluent Bit would
// substitute an environment variable there, which only policy.env could allow (and does not cover
// Fluent Bit's environment).
func Check(pol *policy.Policy, c Config) error {
	for i, f := range c.Files {
		for _, v := range []struct{ key, val string }{{"name", f.Name}, {"path", f.Path}, {"parser", f.Parser}, {"tag", f.Tag},
			{"exclude_paths", strings.Join(f.ExcludePaths, ",")}} {
			if strings.Contains(v.val, "${") {
				return fmt.Errorf("log_collection: files[%d].%s: %w", i, v.key,
					policy.Refuse(policy.RuleEnv, "${...} would make Fluent Bit read an environment variable"))
			}
		}
		for _, glob := range strings.Split(f.Path, ",") {
			glob = strings.TrimSpace(glob)
			if strings.ContainsAny(glob, "{}") {
				return fmt.Errorf("log_collection: files[%d].path: %w", i,
					policy.Refuse(policy.RuleReadPaths, "%s: brace patterns are not allowed", glob))
			}
			if err := pol.CheckReadPattern(glob); err != nil {
				return fmt.Errorf("log_collection: files[%d].path: %w", i, err)
			}
		}
	}
	if j := c.Journald; j != nil {
		for i, u := range j.Units {
			if strings.Contains(u, "${") {
				return fmt.Errorf("log_collection: journald.units[%d]: %w", i,
					policy.Refuse(policy.RuleEnv, "${...} would make Fluent Bit read an environment variable"))
			}
		}
	}
	return nil
}

// Renderer writes the Fluent Bit config.
type Renderer struct {
	log     *slog.Logger
	pol     *policy.Policy
	path    string
	tag     string // tag prefix: the agent's log subject prefix
	output  string // rendered [OUTPUT] section
	mu      sync.Mutex
	renders int
}

// NewRenderer renders into dataDir. relayHost/relayPort name the agent's log relay (logrelay), to which
// Fluent Bit's http output posts records with their tag in a header: Fluent Bit's nats output has no
// TLS and no NATS credentials, so the agent publishes them on its own connection. tagPrefix prefixes
// every input's tag (records are published under it).
func NewRenderer(log *slog.Logger, pol *policy.Policy, dataDir, tagPrefix, relayHost, relayPort string) *Renderer {
	out := "[OUTPUT]\n    Name        http\n    Match       " + tagPrefix + ".*\n    Host        " + relayHost +
		"\n    Port        " + relayPort + "\n    URI         /logs\n    Format      json\n    Header_Tag  X-Fluent-Tag\n" +
		"    Retry_Limit 10\n"
	return &Renderer{log: log, pol: pol, path: filepath.Join(dataDir, FileName), tag: tagPrefix, output: out}
}

// Path is the rendered file.
func (r *Renderer) Path() string { return r.path }

// Render builds the file's content for cfg. A disabled config renders no inputs.
func (r *Renderer) Render(cfg Config) []byte {
	var b bytes.Buffer
	flush := 5
	if d := cfg.FlushInterval.Std(); d >= time.Second {
		flush = int(d / time.Second)
	}
	b.WriteString("# Rendered by the ConfigSync agent from the log_collection config. Do not edit.\n")
	fmt.Fprintf(&b, "[SERVICE]\n    Flush        %d\n    Log_Level    warn\n    Daemon       off\n\n", flush)
	enabled := cfg.Enabled == nil || *cfg.Enabled
	files := append([]agentconfig.LogFile(nil), cfg.Files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	for _, f := range files {
		if !enabled {
			break
		}
		tag := r.tag + "." + f.Name
		if f.Tag != "" {
			tag = r.tag + "." + f.Tag
		}
		fmt.Fprintf(&b, "[INPUT]\n    Name              tail\n    Tag               %s\n    Path              %s\n", tag, f.Path)
		if len(f.ExcludePaths) > 0 {
			fmt.Fprintf(&b, "    Exclude_Path      %s\n", strings.Join(f.ExcludePaths, ","))
		}
		if f.Parser != "" {
			fmt.Fprintf(&b, "    Parser            %s\n", f.Parser)
		}
		if f.ReadFromHead != nil && *f.ReadFromHead {
			b.WriteString("    Read_from_Head    true\n")
		}
		if cfg.MemBufLimitMB > 0 {
			fmt.Fprintf(&b, "    Mem_Buf_Limit     %dMB\n", cfg.MemBufLimitMB)
		}
		b.WriteString("    Refresh_Interval  10\n\n")
	}
	if j := cfg.Journald; enabled && j != nil && (j.Enabled == nil || *j.Enabled) && len(j.Units) > 0 {
		b.WriteString("[INPUT]\n    Name              systemd\n")
		fmt.Fprintf(&b, "    Tag               %s.journald\n", r.tag)
		for _, u := range j.Units {
			fmt.Fprintf(&b, "    Systemd_Filter    _SYSTEMD_UNIT=%s\n", u)
		}
		if j.ReadFromTail != nil && *j.ReadFromTail {
			b.WriteString("    Read_From_Tail    on\n")
		}
		b.WriteString("\n")
	}
	b.WriteString(r.output)
	return b.Bytes()
}

// Apply checks cfg against the policy (a refusal leaves the rendered file as it is), renders it and
// replaces the file atomically when its content changes, logging that Fluent Bit must be restarted to
// pick it up. It reports whether the file changed.
func (r *Renderer) Apply(cfg Config) (bool, error) {
	if err := Check(r.pol, cfg); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	want := r.Render(cfg)
	have, err := os.ReadFile(r.path)
	if err == nil && bytes.Equal(have, want) {
		return false, nil
	}
	existed := err == nil
	if err := writeAtomic(r.path, want); err != nil {
		return false, fmt.Errorf("log_collection: write %s: %w", r.path, err)
	}
	r.renders++
	if !existed {
		r.log.Info("log collection config rendered; start Fluent Bit with it", "path", r.path,
			"files", len(cfg.Files), "journald_units", journaldUnits(cfg))
		return true, nil
	}
	r.log.Warn("log collection config changed; restart Fluent Bit to apply it", "path", r.path,
		"files", len(cfg.Files), "journald_units", journaldUnits(cfg))
	return true, nil
}

func journaldUnits(c Config) int {
	if c.Journald == nil {
		return 0
	}
	return len(c.Journald.Units)
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fluent-bit-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
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
	return os.Rename(tmp.Name(), path)
}
