package agentconfig

import (
	"encoding/json"
	"fmt"
	"time"
)

// Typed shapes of the config types, for decoding an effective config with encoding/json. Every field is
// optional because host overrides are partial; a zero value means "not set". Pointers mark the fields
// whose zero value is meaningful (false toggles, a 0 sample ratio).

// Duration is a duration written as a Go duration string ("30s", "1m30s").
type Duration time.Duration

// UnmarshalJSON parses a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// CollectorsConfig is the collectors type: a list of collectors.
type CollectorsConfig []Collector

// Collector is one metric collector. Type selects which of the type-specific fields apply: http (URL,
// Method, ExpectStatus, and Username and Password for basic auth), tcp (Address), postgres, mysql and
// redis (Host, Port, Database, Username, Password), and postgres also SSLMode (one of the SSLMode
// constants; empty means SSLModePrefer). Secrets normally arrive through CredentialID (a lowercase UUID;
// not on tcp collectors), which the backend replaces with the credential's fields (see SecretFields)
// before delivery.
type Collector struct {
	Type         string   `json:"type"`
	Name         string   `json:"name"`
	Enabled      *bool    `json:"enabled,omitempty"`
	Interval     Duration `json:"interval,omitempty"`
	Timeout      Duration `json:"timeout,omitempty"`
	CredentialID string   `json:"credential_id,omitempty"`

	URL          string `json:"url,omitempty"`
	Method       string `json:"method,omitempty"`
	ExpectStatus int    `json:"expect_status,omitempty"`

	Address string `json:"address,omitempty"`

	Host     string `json:"host,omitempty"`
	Port     int    `json:"port,omitempty"`
	Database string `json:"database,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	SSLMode  string `json:"sslmode,omitempty"` // postgres only
}

// IsEnabled reports whether the collector should run: unless "enabled" is false.
func (c Collector) IsEnabled() bool { return c.Enabled == nil || *c.Enabled }

// IntervalsConfig is the intervals type.
type IntervalsConfig struct {
	Metrics   Duration `json:"metrics,omitempty"`
	Inventory Duration `json:"inventory,omitempty"`
	Heartbeat Duration `json:"heartbeat,omitempty"`
	Processes Duration `json:"processes,omitempty"`
}

// LabelsConfig is the labels type.
type LabelsConfig struct {
	Static  map[string]string `json:"static,omitempty"`
	Dynamic []DynamicLabel    `json:"dynamic,omitempty"`
}

// DynamicLabel computes a label value from a source: LabelSourceFile reads Path, LabelSourceCommand
// runs Command (program and arguments, no shell), LabelSourceEnv reads the environment variable Env.
type DynamicLabel struct {
	Name     string   `json:"name"`
	Source   string   `json:"source"`
	Path     string   `json:"path,omitempty"`
	Command  []string `json:"command,omitempty"`
	Env      string   `json:"env,omitempty"`
	Interval Duration `json:"interval,omitempty"`
}

// ChangeDetectionConfig is the change_detection type.
type ChangeDetectionConfig struct {
	Enabled  *bool    `json:"enabled,omitempty"`
	Paths    []string `json:"paths,omitempty"`
	Interval Duration `json:"interval,omitempty"`
}

// LogCollectionConfig is the log_collection type.
type LogCollectionConfig struct {
	Files         []LogFile       `json:"files,omitempty"`
	Journald      *JournaldConfig `json:"journald,omitempty"`
	Enabled       *bool           `json:"enabled,omitempty"`
	FlushInterval Duration        `json:"flush_interval,omitempty"`
	MemBufLimitMB int             `json:"mem_buf_limit_mb,omitempty"`
}

// LogFile is one tailed log file (or glob of files).
type LogFile struct {
	Name         string   `json:"name"`
	Path         string   `json:"path,omitempty"`
	ExcludePaths []string `json:"exclude_paths,omitempty"`
	Parser       string   `json:"parser,omitempty"`
	Tag          string   `json:"tag,omitempty"`
	ReadFromHead *bool    `json:"read_from_head,omitempty"`
}

// JournaldConfig selects systemd journal units to collect.
type JournaldConfig struct {
	Enabled      *bool    `json:"enabled,omitempty"`
	Units        []string `json:"units,omitempty"`
	ReadFromTail *bool    `json:"read_from_tail,omitempty"`
}

// AgentSettingsConfig is the agent_settings type. MemoryLimitMB 0 means no limit.
type AgentSettingsConfig struct {
	CollectorTimeout Duration `json:"collector_timeout,omitempty"`
	MemoryLimitMB    int      `json:"memory_limit_mb,omitempty"`
	LogLevel         string   `json:"log_level,omitempty"`
}

// WatchFilesConfig is the watch_files type. ExcludePatterns and SensitiveFiles are path.Match
// patterns; MaxFileSize is in bytes.
type WatchFilesConfig struct {
	Paths           []string `json:"paths,omitempty"`
	ExcludePatterns []string `json:"exclude_patterns,omitempty"`
	SensitiveFiles  []string `json:"sensitive_files,omitempty"`
	MaxFileSize     int64    `json:"max_file_size,omitempty"`
}

// HealthcheckConfig is the healthcheck type.
type HealthcheckConfig struct {
	IntervalSeconds int `json:"interval_seconds,omitempty"`
	TimeoutSeconds  int `json:"timeout_seconds,omitempty"`
}

// TracingConfig is the tracing type. SampleRatio is in [0, 1].
type TracingConfig struct {
	Enabled     *bool    `json:"enabled,omitempty"`
	SampleRatio *float64 `json:"sample_ratio,omitempty"`
}

// LogShippingConfig is the log_shipping type. Level is error, warn, info or debug.
type LogShippingConfig struct {
	Enabled *bool  `json:"enabled,omitempty"`
	Level   string `json:"level,omitempty"`
}
