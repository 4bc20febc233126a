// Package labels keeps the host's labels: static key-values from the labels config plus dynamic labels
// whose values come from a file, a command or an environment variable, each refreshed by its own
// goroutine. Update swaps the static set and restarts the generators.
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

// Manager holds the current labels.
type Manager struct {
	log *slog.Logger
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

// NewManager returns a manager with no labels.
func NewManager(log *slog.Logger) *Manager {
	return &Manager{log: log, static: map[string]string{}, dynamic: map[string]string{}}
}

// Update replaces the static labels and restarts the dynamic generators. Each generator reads its
// value once before Update returns, so labels are complete right after a config is applied.
func (m *Manager) Update(cfg agentconfig.LabelsConfig) {
	m.upd.Lock()
	defer m.upd.Unlock()
	if m.closed {
		return
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
	v, err := read(ctx, g)
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

func read(ctx context.Context, g agentconfig.DynamicLabel) (string, error) {
	switch g.Source {
	case "file":
		f, err := os.Open(g.Path)
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
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, g.Command[0], g.Command[1:]...)
		var out bytes.Buffer
		cmd.Stdout = &limitWriter{w: &out, n: maxValue}
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("command %s: %w", g.Command[0], err)
		}
		return strings.TrimSpace(out.String()), nil
	case "env":
		return os.Getenv(g.Env), nil
	}
	return "", fmt.Errorf("unknown source %q", g.Source)
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
