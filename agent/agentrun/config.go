package agentrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/nats-io/nats.go"
	"go.yaml.in/yaml/v3"
)

// Config is the agent's local configuration: who it is, how it reaches NATS, where it keeps its cache,
// and local defaults for every config type (used when neither the backend nor the cache has one).
// LoadConfig reads it from YAML; embedders may also build it in code (start from DefaultConfig).
type Config struct {
	AgentID string     `yaml:"agent_id"`
	NATS    NATSConfig `yaml:"nats"`
	DataDir string     `yaml:"data_dir"`
	// BootJitter bounds the random sleep before the startup fetch (0 disables it).
	BootJitter time.Duration `yaml:"boot_jitter"`
	// FetchTimeout bounds the startup fetch (0: 10s).
	FetchTimeout time.Duration `yaml:"fetch_timeout"`
	// LogLevel is the level until agent_settings.log_level says otherwise (debug, info, warn, error).
	LogLevel string `yaml:"log_level"`
	// LogFormat is json (default) or text.
	LogFormat string `yaml:"log_format"`
	// ProcRoot is where the system collectors read /proc (a container can mount the host's elsewhere).
	ProcRoot string `yaml:"proc_root"`
	// DiskPaths are the mount points whose usage the disk collector reports (default /).
	DiskPaths []string `yaml:"disk_paths"`
	// Defaults holds a local default per config type, in the type's JSON shape (written as YAML).
	Defaults Defaults `yaml:"defaults"`

	// AgentVersion is reported in heartbeats (default: Version).
	AgentVersion string `yaml:"-"`
	// LogOutput receives the agent's log lines (default: standard error).
	LogOutput io.Writer `yaml:"-"`
	// NATSOptions are appended to the agent's own connection options (tests, embedding).
	NATSOptions []nats.Option `yaml:"-"`

	hooks *hooks // test instrumentation
}

// NATSConfig says how to reach NATS. At most one of CredsFile, User/Password and Token is set.
type NATSConfig struct {
	URL       string `yaml:"url"`
	CredsFile string `yaml:"creds_file"`
	User      string `yaml:"user"`
	Password  string `yaml:"password"`
	Token     string `yaml:"token"`
}

// Defaults maps config types to local default configs (JSON).
type Defaults map[string]json.RawMessage

// UnmarshalYAML converts each type's YAML value to JSON and validates it with the type's rules.
func (d *Defaults) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: defaults must be a mapping of config type to config", n.Line)
	}
	out := Defaults{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !agentconfig.Known(k.Value) {
			return fmt.Errorf("line %d: defaults: unknown config type %q", k.Line, k.Value)
		}
		var val any
		if err := v.Decode(&val); err != nil {
			return fmt.Errorf("line %d: defaults.%s: %w", v.Line, k.Value, err)
		}
		data, err := json.Marshal(val)
		if err != nil {
			return fmt.Errorf("line %d: defaults.%s: not representable as JSON: %w", v.Line, k.Value, err)
		}
		if err := agentconfig.Validate(k.Value, data); err != nil {
			return fmt.Errorf("line %d: defaults.%s: %w", v.Line, k.Value, err)
		}
		out[k.Value] = data
	}
	*d = out
	return nil
}

// Version is the agent's version, set at build time with -ldflags "-X ...agentrun.Version=...".
var Version = "0.1.0-dev"

// DefaultConfig returns the defaults LoadConfig starts from.
func DefaultConfig() Config {
	return Config{
		NATS:         NATSConfig{URL: nats.DefaultURL},
		DataDir:      "/var/lib/configsync-agent",
		BootJitter:   5 * time.Second,
		FetchTimeout: 10 * time.Second,
		LogLevel:     "info",
		LogFormat:    "json",
		ProcRoot:     "/proc",
		DiskPaths:    []string{"/"},
	}
}

// LoadConfig reads a YAML file over DefaultConfig and validates it. Unknown keys are errors, and YAML
// errors name the line.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("agent config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("agent config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes YAML over DefaultConfig and validates the result.
func ParseConfig(data []byte) (Config, error) {
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate checks the fields Run needs.
func (c Config) Validate() error {
	var errs []error
	if !protocol.ValidAgentID(c.AgentID) {
		errs = append(errs, fmt.Errorf("agent_id %q must be 1-128 letters, digits, '-' or '_'", c.AgentID))
	}
	if c.NATS.URL == "" {
		errs = append(errs, errors.New("nats.url is required"))
	}
	methods := 0
	for _, set := range []bool{c.NATS.CredsFile != "", c.NATS.User != "", c.NATS.Token != ""} {
		if set {
			methods++
		}
	}
	if methods > 1 {
		errs = append(errs, errors.New("nats: set only one of creds_file, user/password and token"))
	}
	if c.NATS.Password != "" && c.NATS.User == "" {
		errs = append(errs, errors.New("nats.password needs nats.user"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir is required"))
	}
	if c.BootJitter < 0 || c.FetchTimeout < 0 {
		errs = append(errs, errors.New("boot_jitter and fetch_timeout must not be negative"))
	}
	if c.LogFormat != "" && c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, fmt.Errorf("log_format %q must be json or text", c.LogFormat))
	}
	for t, d := range c.Defaults {
		if err := agentconfig.Validate(t, d); err != nil {
			errs = append(errs, fmt.Errorf("defaults.%s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}
