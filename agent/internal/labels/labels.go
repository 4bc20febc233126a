// Package labels keeps the host's labels: static key-values from the labels config plus dynamic labels
// whose values come from a file, a command or an environment variable, each refreshed by its own
// goroutine. Update checks the config against the local policy, then swaps the static set and restarts
// the generators; a refused config changes nothing.
package labels

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/libs/agentconfig"
)

// DefaultRefresh is how often a dynamic label without an interval is re-read.
const DefaultRefresh = 5 * time.Minute

// maxValue caps a label value read from a file or command.
const maxValue = 1024

// Parse decodes and checks a labels config; null means no labels.
func Parse(data json.RawMessage) (agentconfig.LabelsConfig, error) {
	var c agentconfig.LabelsConfig
	if agentconfig.IsNull(data) {
		return c, nil
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("labels: %w", err)
	}
	seen := map[string]bool{}
	for i := range c.Dynamic {
		g := &c.Dynamic[i]
		if g.Name == "" {
			return c, fmt.Errorf("labels: dynamic[%d]: name is required", i)
		}
		if seen[g.Name] {
			return c, fmt.Errorf("labels: dynamic label %q defined twice", g.Name)
		}
		seen[g.Name] = true
		if g.Interval < 0 {
			return c, fmt.Errorf("labels: dynamic label %q: interval must be positive", g.Name)
		}
		switch g.Source {
		case "file":
			if g.Path == "" {
				return c, fmt.Errorf("labels: dynamic label %q: path is required", g.Name)
			}
		case "command":
			if len(g.Command) == 0 {
				return c, fmt.Errorf("labels: dynamic label %q: command is required", g.Name)
			}
		case "env":
			if g.Env == "" {
				return c, fmt.Errorf("labels: dynamic label %q: env is required", g.Name)
			}
		default:
			return c, fmt.Errorf("labels: dynamic label %q: unknown source %q", g.Name, g.Source)
		}
	}
	return c, nil
}

// Check refuses a labels config the policy does not allow: a file outside policy.read_paths, a command
// whose resolved executable policy.commands does not list, an environment variable policy.env does not
// list, or an interval below the policy's minimum. The error names the config path and the rule.
func Check(pol *policy.Policy, c agentconfig.LabelsConfig) error {
	for i, g := range c.Dynamic {
		at := fmt.Sprintf("labels: dynamic[%d]", i)
		if err := pol.CheckInterval(g.Interval.Std()); err != nil {
			return fmt.Errorf("%s.interval: %w", at, err)
		}
		var err error
		switch g.Source {
		case "file":
			err = pol.CheckRead(g.Path)
			at += ".path"
		case "command":
			_, err = pol.CheckCommand(g.Command)
			at += ".command"
		case "env":
			err = pol.CheckEnv(g.Env)
			at += ".env"
		}
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
	}
	return nil
}

// Manager holds the current labels.
type Manager struct {
	log *slog.Logger
	pol *policy.Policy
	upd sync.Mutex // serialises Update and Close

	mu      sync.RWMutex
	static  map[string]string
	dynamic map[string]string
	gen     int // generation of the running generators; stale goroutines drop their results

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool

	updates int64 // dynamic values written, for observability and tests
}

// NewManager returns a manager with no labels that runs only what pol allows.
func NewManager(log *slog.Logger, pol *policy.Policy) *Manager {
	return &Manager{log: log, pol: pol, static: map[string]string{}, dynamic: map[string]string{}}
}

// Update checks cfg against the policy (a refusal keeps the running labels and generators), then
// replaces the static labels and restarts the dynamic generators. Each generator reads its value once
// before Update returns, so labels are complete right after a config is applied.
func (m *Manager) Update(cfg agentconfig.LabelsConfig) error {
	if err := Check(m.pol, cfg); err != nil {
		return err
	}
	m.upd.Lock()
	defer m.upd.Unlock()
	if m.closed {
		return nil
	}
	m.mu.Lock()
	if m.cancel != nil {
		m.cancel()
	}
	m.mu.Unlock()
	m.wg.Wait()

	ctx, cancel := context.WithCancel(context.Background())
	m.mu.Lock()
	m.gen++
	gen := m.gen
	m.cancel = cancel
	m.static = maps.Clone(cfg.Static)
	if m.static == nil {
		m.static = map[string]string{}
	}
	m.dynamic = map[string]string{}
	m.mu.Unlock()

	for _, g := range cfg.Dynamic {
		m.refresh(ctx, gen, g)
		m.wg.Add(1)
		go m.run(ctx, gen, g)
	}
	return nil
}

// Close stops the generators; later Updates are ignored.
func (m *Manager) Close() {
	m.upd.Lock()
	defer m.upd.Unlock()
	m.closed = true
	m.mu.Lock()
	if m.cancel != nil {
		m.cancel()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// Labels returns a snapshot: static labels, overridden by dynamic ones of the same name.
func (m *Manager) Labels() map[string]string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string]string, len(m.static)+len(m.dynamic))
	maps.Copy(out, m.static)
	maps.Copy(out, m.dynamic)
	return out
}

// Updates counts dynamic values read so far.
func (m *Manager) Updates() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.updates
}

func (m *Manager) run(ctx context.Context, gen int, g agentconfig.DynamicLabel) {
	defer m.wg.Done()
	every := g.Interval.Std()
	if every <= 0 {
		every = DefaultRefresh
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.refresh(ctx, gen, g)
		}
	}
}

func (m *Manager) refresh(ctx context.Context, gen int, g agentconfig.DynamicLabel) {
	v, err := m.read(ctx, g)
	if err != nil {
		m.log.Warn("dynamic label not read", "label", g.Name, "source", g.Source, "error", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen != gen {
		return
	}
	m.dynamic[g.Name] = v
	m.updates++
}

// read reads one dynamic value. The policy is checked again on every read: a path may have become a
// symlink since the config was applied, and the file is opened without blocking (a FIFO is refused,
// not waited on).
func (m *Manager) read(ctx context.Context, g agentconfig.DynamicLabel) (string, error) {
	switch g.Source {
	case "file":
		f, _, err := m.pol.OpenFile(g.Path)
		if err != nil {
			return "", err
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxValue))
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	case "command":
		c, err := m.pol.CheckCommand(g.Command)
		if err != nil {
			return "", err
		}
		cctx, cancel := context.WithTimeout(ctx, m.pol.Limits().LabelTimeout)
		defer cancel()
		// The resolved executable with the argv as given: no shell, and an environment of PATH plus the
		// variables the policy lets labels read, not the agent's whole environment.
		cmd := exec.CommandContext(cctx, c.Path)
		cmd.Args = c.Args
		cmd.Env = commandEnv(m.pol)
		cmd.Dir = "/"
		var out bytes.Buffer
		cmd.Stdout = &limitWriter{w: &out, n: maxValue}
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("command %s: %w", c.Args[0], err)
		}
		return strings.TrimSpace(out.String()), nil
	case "env":
		if err := m.pol.CheckEnv(g.Env); err != nil {
			return "", err
		}
		return os.Getenv(g.Env), nil
	}
	return "", fmt.Errorf("unknown source %q", g.Source)
}

func commandEnv(pol *policy.Policy) []string {
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, name := range pol.Env() {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	n := len(p)
	if l.n <= 0 {
		return n, nil
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	l.n -= len(p)
	_, err := l.w.Write(p)
	return n, err
}
