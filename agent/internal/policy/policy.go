// Package policy is the agent's local policy: what a config that arrives over NATS may make this agent
// do on its host. It is built once from the local YAML (policy section) at start and never changed by
// anything remote. Every check returns an *Error naming the rule that refused, so the config handler
// can acknowledge the config as failed with "<config path>: policy: <rule>: ...".
//
// The matcher is pure apart from resolving paths (Resolve walks symlinks on the real file system):
// CheckRead, CheckReadPattern, CheckCommand, CheckEnv, CheckInterval and CheckFileSize decide;
// OpenFile, DialContext and CheckRedirect enforce the same decisions at the moment the agent reads a
// file or opens a connection, so a symlink swapped in or a DNS answer changed after the check cannot
// get past it.
package policy

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config is the policy section of the agent's local YAML.
type Config struct {
	// Commands are the executables dynamic labels may run (absolute paths, compared after resolving
	// symlinks). Empty: command labels are refused.
	Commands []string `yaml:"commands"`
	// ReadPaths are the roots under which the agent may read files (label files, watch_files,
	// change_detection, log_collection). DefaultReadPaths unless set.
	ReadPaths []string `yaml:"read_paths"`
	// DenyPaths are added to the built-in deny list (BuiltinDenyPaths), which always wins.
	DenyPaths []string `yaml:"deny_paths"`
	// Env are the environment variables a label may read. Empty: env labels are refused.
	Env []string `yaml:"env"`
	// UploadFileContents lets watch_files send file contents, not only hashes and metadata.
	UploadFileContents bool `yaml:"upload_file_contents"`
	// Network says what collectors may connect to.
	Network Network `yaml:"network"`
	// Limits are floors and caps on what a remote config may ask for.
	Limits Limits `yaml:"limits"`
}

// Network is the collectors' outbound policy. Deny (plus BuiltinDenyNetworks) always wins; when Allow
// is empty every other address is allowed.
type Network struct {
	// Allow lists CIDRs (10.0.0.0/8, 192.0.2.7) and host names (db.internal). When set, a connection
	// must go to a listed host name or resolve to an address inside a listed CIDR.
	Allow []string `yaml:"allow"`
	// Ports, when set, are the only ports collectors may connect to.
	Ports []int `yaml:"ports"`
	// Deny lists CIDRs added to BuiltinDenyNetworks.
	Deny []string `yaml:"deny"`
}

// Limits bound what a remote config may ask for. A zero field takes its default; the local YAML may
// set a lower floor or a higher cap (tests and `make run` do), a remote config never can.
type Limits struct {
	// MinInterval is the shortest interval a remote config may set (intervals, dynamic labels,
	// collectors, change_detection, healthcheck). Default 5s.
	MinInterval time.Duration `yaml:"min_interval"`
	// MaxFileSize caps watch_files.max_file_size (bytes). Default 1 MiB.
	MaxFileSize int64 `yaml:"max_file_size"`
	// MaxFiles bounds the files one watch_files or change_detection scan visits. Default 10000.
	MaxFiles int `yaml:"max_files"`
	// MaxHashSize is the largest file change_detection reads to hash (bytes); a larger file is watched
	// by its size and modification time only, so a remote config cannot make the agent read a huge
	// file on every scan. Default 64 MiB.
	MaxHashSize int64 `yaml:"max_hash_size"`
	// LabelTimeout bounds one run of a command label. Default 10s.
	LabelTimeout time.Duration `yaml:"label_timeout"`
}

// Defaults of the policy.
var (
	// DefaultReadPaths serve the spec's examples (watch_files over /etc and /opt, logs under /var/log).
	DefaultReadPaths = []string{"/etc", "/var/log", "/opt"}
	// BuiltinDenyPaths can never be read, whatever ReadPaths says. Entries are paths or
	// path.Match patterns per segment; an entry also denies everything under it.
	BuiltinDenyPaths = []string{
		"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd",
		"/etc/sudoers", "/etc/sudoers.d",
		"/etc/ssh/ssh_host_*_key", "/etc/ssl/private",
		"/root", "/home/*/.ssh",
		"/proc/*/environ", "/proc/*/mem", "/proc/*/root", "/proc/*/cwd", "/proc/*/fd", "/proc/kcore",
		"/proc/*/task/*/environ", "/proc/*/task/*/mem", "/proc/*/task/*/root", "/proc/*/task/*/cwd", "/proc/*/task/*/fd",
		"/var/lib/configsync-agent",
	}
	// BuiltinDenyNetworks are never dialled: cloud metadata endpoints (link-local and AWS's IPv6 one).
	BuiltinDenyNetworks = []string{"169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"}
)

// Default limits.
const (
	DefaultMinInterval  = 5 * time.Second
	DefaultMaxFileSize  = 1 << 20
	DefaultMaxFiles     = 10_000
	DefaultMaxHashSize  = 64 << 20
	DefaultLabelTimeout = 10 * time.Second
)

// DefaultConfig is the policy when the local YAML has no policy section.
func DefaultConfig() Config {
	return Config{ReadPaths: slices.Clone(DefaultReadPaths)}
}

// Rules, as named in errors (the YAML keys of the policy section).
const (
	RuleCommands  = "commands"
	RuleReadPaths = "read_paths"
	RuleEnv       = "env"
	RuleNetwork   = "network"
	RuleLimits    = "limits"
)

// Error is a refusal by the policy. Its text names the rule and what was refused, never a secret:
// "policy: read_paths: /etc/shadow is denied (built-in deny list)".
type Error struct {
	Rule   string
	Detail string
}

func (e *Error) Error() string { return "policy: " + e.Rule + ": " + e.Detail }

func refuse(rule, format string, args ...any) error {
	return &Error{Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// Refuse returns a refusal by rule, for checks a component makes on its own config (such as a value
// that would make Fluent Bit read an environment variable).
func Refuse(rule, format string, args ...any) error { return refuse(rule, format, args...) }

// IsRefusal reports whether err is (or wraps) a policy refusal.
func IsRefusal(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Secrets are the agent's own files, denied like the built-in deny list.
type Secrets struct {
	ConfigFile string // the local YAML (it may hold a NATS password or token)
	CredsFile  string // NATS credentials
	DataDir    string // cache and rendered files
	Other      []string
}

// Policy is a built policy. It is immutable and safe for concurrent use.
type Policy struct {
	cfg      Config
	commands map[string]string // resolved executable -> entry as written
	read     []pattern         // allowed roots (resolved)
	deny     []denyEntry
	env      map[string]bool
	allowNet []netip.Prefix
	allowHst map[string]bool
	ports    map[int]bool
	denyNet  []netip.Prefix
	limits   Limits

	httpOnce sync.Once
	http     *http.Client
}

type denyEntry struct {
	pat    pattern
	source string // "built-in deny list", "policy.deny_paths", "the agent's own files"
}

// New builds a policy. own names the agent's own secret files, which are always denied.
func New(cfg Config, own Secrets) (*Policy, error) {
	p := &Policy{cfg: cfg, commands: map[string]string{}, env: map[string]bool{}, allowHst: map[string]bool{},
		ports: map[int]bool{}}
	var errs []error
	for _, c := range cfg.Commands {
		if !filepath.IsAbs(c) {
			errs = append(errs, fmt.Errorf("policy.commands: %q is not an absolute path", c))
			continue
		}
		real, err := Resolve(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy.commands: %s: %w", c, err))
			continue
		}
		p.commands[real] = c
	}
	for _, r := range cfg.ReadPaths {
		pats, err := resolvedPatterns(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy.read_paths: %w", err))
			continue
		}
		p.read = append(p.read, pats...)
	}
	addDeny := func(list []string, source string) {
		for _, d := range list {
			if d == "" {
				continue
			}
			pats, err := resolvedPatterns(d)
			if err != nil {
				errs = append(errs, fmt.Errorf("policy deny path: %w", err))
				continue
			}
			for _, pt := range pats {
				p.deny = append(p.deny, denyEntry{pat: pt, source: source})
			}
		}
	}
	addDeny(BuiltinDenyPaths, "built-in deny list")
	addDeny(cfg.DenyPaths, "policy.deny_paths")
	addDeny(append([]string{own.ConfigFile, own.CredsFile, own.DataDir}, own.Other...), "the agent's own files")
	for _, e := range cfg.Env {
		if e == "" || strings.ContainsAny(e, "=\x00") {
			errs = append(errs, fmt.Errorf("policy.env: %q is not a variable name", e))
			continue
		}
		p.env[e] = true
	}
	for _, a := range cfg.Network.Allow {
		if pfx, err := parsePrefix(a); err == nil {
			p.allowNet = append(p.allowNet, pfx)
		} else if validHostName(a) {
			p.allowHst[strings.ToLower(strings.TrimSuffix(a, "."))] = true
		} else {
			errs = append(errs, fmt.Errorf("policy.network.allow: %q is neither a CIDR, an address nor a host name", a))
		}
	}
	for _, port := range cfg.Network.Ports {
		if port < 1 || port > 65535 {
			errs = append(errs, fmt.Errorf("policy.network.ports: %d is out of range", port))
			continue
		}
		p.ports[port] = true
	}
	for _, d := range append(slices.Clone(BuiltinDenyNetworks), cfg.Network.Deny...) {
		pfx, err := parsePrefix(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy.network.deny: %q is not a CIDR or an address", d))
			continue
		}
		p.denyNet = append(p.denyNet, pfx)
	}
	p.limits = cfg.Limits
	if p.limits.MinInterval < 0 || p.limits.MaxFileSize < 0 || p.limits.MaxFiles < 0 || p.limits.LabelTimeout < 0 ||
		p.limits.MaxHashSize < 0 {
		errs = append(errs, errors.New("policy.limits: values must not be negative"))
	}
	if p.limits.MinInterval == 0 {
		p.limits.MinInterval = DefaultMinInterval
	}
	if p.limits.MaxFileSize == 0 {
		p.limits.MaxFileSize = DefaultMaxFileSize
	}
	if p.limits.MaxFiles == 0 {
		p.limits.MaxFiles = DefaultMaxFiles
	}
	if p.limits.MaxHashSize == 0 {
		p.limits.MaxHashSize = DefaultMaxHashSize
	}
	if p.limits.LabelTimeout == 0 {
		p.limits.LabelTimeout = DefaultLabelTimeout
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// Limits returns the limits in force (defaults filled in).
func (p *Policy) Limits() Limits { return p.limits }

// UploadFileContents reports whether watch_files may send file contents.
func (p *Policy) UploadFileContents() bool { return p.cfg.UploadFileContents }

// CheckEnv refuses an environment variable the policy does not list.
func (p *Policy) CheckEnv(name string) error {
	if !p.env[name] {
		return refuse(RuleEnv, "environment variable %s is not listed in policy.env", name)
	}
	return nil
}

// Command is an executable the policy allows, resolved.
type Command struct {
	// Path is the resolved executable to run.
	Path string
	// Args is the argv to run it with: Args[0] is the policy entry as written (so a multi-call binary
	// such as busybox runs what the policy listed, not what the remote argv[0] asked for).
	Args []string
}

// CheckCommand resolves argv[0] (through PATH when it has no slash, then through symlinks) and refuses
// it unless the resolved executable is listed. The argv is run directly, never through a shell: a
// ["sh","-c",...] label runs only if the shell itself is listed.
func (p *Policy) CheckCommand(argv []string) (Command, error) {
	if len(argv) == 0 || argv[0] == "" {
		return Command{}, refuse(RuleCommands, "empty command")
	}
	name := argv[0]
	if len(p.commands) == 0 {
		return Command{}, refuse(RuleCommands, "%s: command labels are off (policy.commands is empty)", name)
	}
	path := name
	if !strings.Contains(name, "/") {
		lp, err := exec.LookPath(name)
		if err != nil {
			return Command{}, refuse(RuleCommands, "%s: not found in PATH", name)
		}
		path = lp
	}
	if !filepath.IsAbs(path) {
		return Command{}, refuse(RuleCommands, "%s: a relative path is never allowed", name)
	}
	real, err := Resolve(path)
	if err != nil {
		return Command{}, refuse(RuleCommands, "%s: cannot resolve: %v", name, err)
	}
	entry, ok := p.commands[real]
	if !ok {
		if real != path {
			return Command{}, refuse(RuleCommands, "%s (resolved to %s) is not listed in policy.commands", name, real)
		}
		return Command{}, refuse(RuleCommands, "%s is not listed in policy.commands", name)
	}
	args := append([]string{entry}, argv[1:]...)
	return Command{Path: real, Args: args}, nil
}

// CheckInterval refuses a remote interval below the policy's floor. Zero means "not set" (the
// agent's default, which is always above the floor) and passes.
func (p *Policy) CheckInterval(d time.Duration) error {
	if d != 0 && d < p.limits.MinInterval {
		return refuse(RuleLimits, "interval %s is below the minimum %s (policy.limits.min_interval)", d, p.limits.MinInterval)
	}
	return nil
}

// CheckFileSize refuses a watch_files max_file_size above the policy's cap.
func (p *Policy) CheckFileSize(n int64) error {
	if n > p.limits.MaxFileSize {
		return refuse(RuleLimits, "max_file_size %d is above the cap %d (policy.limits.max_file_size)", n, p.limits.MaxFileSize)
	}
	return nil
}

// Env lists the environment variables labels may read.
func (p *Policy) Env() []string { return slices.Sorted(maps.Keys(p.env)) }
