package agentrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/configsync/configsync/agent/internal/logrelay"
	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/agent/internal/transport"
	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/agentconfig/signing"
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
	// LogRelayAddr is the loopback address of the log relay Fluent Bit posts collected logs to (the
	// agent publishes them over its own NATS connection). Empty: no relay. Default 127.0.0.1:24280.
	LogRelayAddr string `yaml:"log_relay_addr"`
	// ProcRoot is where the system collectors read /proc (a container can mount the host's elsewhere).
	ProcRoot string `yaml:"proc_root"`
	// DiskPaths are the mount points whose usage the disk collector reports (default /).
	DiskPaths []string `yaml:"disk_paths"`
	// Defaults holds a local default per config type, in the type's JSON shape (written as YAML).
	Defaults Defaults `yaml:"defaults"`
	// Policy is what a config delivered over NATS may make this agent do on its host. It is read here
	// only, at start; nothing remote changes it (see agent/README.md).
	Policy PolicyConfig `yaml:"policy"`
	// AllowRoot acknowledges running with euid 0: the start-up warning is then an info line.
	AllowRoot bool `yaml:"allow_root"`
	// Trust holds the public keys of the config authority: a config whose signed statement does not
	// verify with one of them is refused. One of public_keys and insecure_skip_verify is required.
	Trust TrustConfig `yaml:"trust"`

	// ConfigPath is the YAML file the config was loaded from (set by LoadConfig); the policy denies
	// reading it, like the creds file and the data directory.
	ConfigPath string `yaml:"-"`

	// AgentVersion is reported in heartbeats (default: Version).
	AgentVersion string `yaml:"-"`
	// LogOutput receives the agent's log lines (default: standard error).
	LogOutput io.Writer `yaml:"-"`
	// NATSOptions are appended to the agent's own connection options (tests, embedding).
	NATSOptions []nats.Option `yaml:"-"`

	hooks *hooks // test instrumentation
}

// PolicyConfig is the policy section of the local YAML; NetworkPolicy and PolicyLimits are its
// network and limits parts. DefaultConfig holds the defaults (reads under /etc, /var/log and /opt;
// no commands, no environment variables, no file contents; metadata endpoints denied; 5s minimum
// intervals, 1 MiB files, 10000 files per scan, 10s per command label).
type (
	PolicyConfig  = policy.Config
	NetworkPolicy = policy.Network
	PolicyLimits  = policy.Limits
)

// NATSConfig says how to reach NATS. At most one of CredsFile, User/Password and Token is set.
type NATSConfig struct {
	URL       string `yaml:"url"`
	CredsFile string `yaml:"creds_file"`
	User      string `yaml:"user"`
	Password  string `yaml:"password"`
	Token     string `yaml:"token"`
	// TLS: required when the servers serve TLS only (every ConfigSync deployment). ca_file verifies
	// them (empty: the system roots); cert_file/key_file are an optional client certificate;
	// server_name overrides the host name verified.
	TLS *NATSTLSConfig `yaml:"tls"`
}

// transportTLS is the transport's view of nats.tls (zero: plaintext).
func (n NATSConfig) transportTLS() transport.TLS {
	if n.TLS == nil {
		return transport.TLS{}
	}
	return transport.TLS{CAFile: n.TLS.CAFile, CertFile: n.TLS.CertFile, KeyFile: n.TLS.KeyFile, ServerName: n.TLS.ServerName}
}

// NATSTLSConfig is nats.tls in the agent's YAML.
type NATSTLSConfig struct {
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"`
}

// TrustConfig is trust in the agent's YAML.
type TrustConfig struct {
	// PublicKeys are the trusted ed25519 keys with their ids (the resolver's key ids).
	PublicKeys []TrustedKey `yaml:"public_keys"`
	// PublicKeysFile names a file of more trusted keys, "id=base64" items separated by commas or
	// newlines (what `resolver public-keys` writes and CONFIGSYNC_TRUST_PUBLIC_KEYS holds), read at
	// start; a deployment provisions it next to the agent. Missing or empty, the agent does not start.
	PublicKeysFile string `yaml:"public_keys_file"`
	// InsecureSkipVerify applies configs without checking signatures (logged loudly at every start).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// TrustedKey is one trusted public key: its id and the base64 of its 32 bytes.
type TrustedKey struct {
	ID        string `yaml:"id"`
	PublicKey string `yaml:"public_key"`
}

// keySet parses the keys listed inline (public_keys).
func (t TrustConfig) keySet() (signing.KeySet, error) {
	ks := signing.KeySet{}
	for _, k := range t.PublicKeys {
		if err := ks.Add(k.ID, k.PublicKey); err != nil {
			return nil, fmt.Errorf("trust.public_keys: %w", err)
		}
	}
	return ks, nil
}

// loadKeySet is keySet plus the keys of public_keys_file, which must exist and list at least one.
func (t TrustConfig) loadKeySet() (signing.KeySet, error) {
	ks, err := t.keySet()
	if err != nil || t.PublicKeysFile == "" {
		return ks, err
	}
	raw, err := os.ReadFile(t.PublicKeysFile)
	if err != nil {
		return nil, fmt.Errorf("trust.public_keys_file: %w", err)
	}
	more, err := signing.ParseKeys(string(raw))
	if err != nil {
		return nil, fmt.Errorf("trust.public_keys_file %s: %w", t.PublicKeysFile, err)
	}
	if len(more) == 0 {
		return nil, fmt.Errorf("trust.public_keys_file %s lists no key", t.PublicKeysFile)
	}
	for id, k := range more {
		if _, dup := ks[id]; dup {
			return nil, fmt.Errorf("trust.public_keys_file %s: key %s is listed in trust.public_keys too", t.PublicKeysFile, id)
		}
		ks[id] = k
	}
	return ks, nil
}

// TrustKeys builds trust.public_keys from the "id=base64,..." form of CONFIGSYNC_TRUST_PUBLIC_KEYS.
func TrustKeys(spec string) ([]TrustedKey, error) {
	ks, err := signing.ParseKeys(spec)
	if err != nil {
		return nil, err
	}
	var out []TrustedKey
	for _, item := range strings.Split(ks.String(), ",") {
		if id, key, ok := strings.Cut(item, "="); ok {
			out = append(out, TrustedKey{ID: id, PublicKey: key})
		}
	}
	return out, nil
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
		LogRelayAddr: logrelay.DefaultAddr,
		ProcRoot:     "/proc",
		DiskPaths:    []string{"/"},
		Policy:       policy.DefaultConfig(),
	}
}

// LoadConfig reads a YAML file over DefaultConfig and validates it. Unknown keys are errors, and YAML
// errors name the line.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("agent config: %w", err)
	}
	cfg, err := parseConfig(data, path)
	if err != nil {
		return Config{}, fmt.Errorf("agent config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes YAML over DefaultConfig and validates the result.
func ParseConfig(data []byte) (Config, error) { return parseConfig(data, "") }

func parseConfig(data []byte, path string) (Config, error) {
	cfg := DefaultConfig()
	if path != "" {
		if abs, err := filepath.Abs(path); err == nil {
			cfg.ConfigPath = abs
		}
	}
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
	if t := c.NATS.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, errors.New("nats.tls: cert_file and key_file go together"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir is required"))
	}
	if ks, err := c.Trust.keySet(); err != nil {
		errs = append(errs, err)
	} else if len(ks) == 0 && c.Trust.PublicKeysFile == "" && !c.Trust.InsecureSkipVerify {
		errs = append(errs, errors.New("trust.public_keys (or trust.public_keys_file) is required (the config authority's keys); only trust.insecure_skip_verify: true runs without, applying unsigned configs"))
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
	if pol, err := c.buildPolicy(); err != nil {
		errs = append(errs, err)
	} else {
		// Local defaults obey the policy too: a default the agent would refuse to apply is a mistake
		// to report now, not at the first deletion.
		for t, d := range c.Defaults {
			if err := checkPolicy(pol, t, d); err != nil {
				errs = append(errs, fmt.Errorf("defaults.%s: %w", t, err))
			}
		}
	}
	return errors.Join(errs...)
}

// buildPolicy builds the policy, denying the agent's own files (this config, the NATS creds, the data
// directory) on top of the built-in deny list.
func (c Config) buildPolicy() (*policy.Policy, error) {
	abs := func(p string) string {
		if p == "" {
			return ""
		}
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	return policy.New(c.Policy, policy.Secrets{ConfigFile: abs(c.ConfigPath), CredsFile: abs(c.NATS.CredsFile), DataDir: abs(c.DataDir)})
}
