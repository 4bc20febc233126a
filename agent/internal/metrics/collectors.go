package metrics

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/libs/agentconfig"
)

// ParseCollectors decodes the collectors config (null: none). A field still holding the redaction
// marker is rejected: a redacted secret cannot log in anywhere, and the backend will deliver it again.
func ParseCollectors(data json.RawMessage) (agentconfig.CollectorsConfig, error) {
	if agentconfig.IsNull(data) {
		return nil, nil
	}
	var cs agentconfig.CollectorsConfig
	if err := json.Unmarshal(data, &cs); err != nil {
		return nil, fmt.Errorf("collectors: %w", err)
	}
	for i, c := range cs {
		if c.Type == "" || c.Name == "" {
			return nil, fmt.Errorf("collectors[%d]: type and name are required", i)
		}
		if f := redactedField(c); f != "" {
			return nil, fmt.Errorf("collector %s/%s: field %s is redacted; waiting for the backend to deliver the secret", c.Type, c.Name, f)
		}
	}
	return cs, nil
}

// redactedField names the first string field whose value is the redaction marker.
func redactedField(c agentconfig.Collector) string {
	v := reflect.ValueOf(c)
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.String && f.String() == agentconfig.RedactedValue {
			return v.Type().Field(i).Tag.Get("json")
		}
	}
	return ""
}

func build(c agentconfig.Collector, pol *policy.Policy) (Collector, error) {
	switch c.Type {
	case agentconfig.CollectorHTTP:
		return newHTTPCheck(c, pol)
	case agentconfig.CollectorTCP:
		return newTCPCheck(c, pol)
	case agentconfig.CollectorPostgres:
		return newPostgresCheck(c, pol)
	case agentconfig.CollectorRedis:
		return newRedisCheck(c, pol)
	case agentconfig.CollectorMySQL:
		return newMySQLCheck(c, pol)
	}
	return nil, fmt.Errorf("unknown collector type %q", c.Type)
}

// CheckCollectors refuses a collectors config the policy does not allow: an interval below the
// policy's minimum, or a target the network rules refuse as written (a literal denied address, a
// port not allowed). A host name is decided again on the address it resolves to, at every connection.
func CheckCollectors(pol *policy.Policy, cs agentconfig.CollectorsConfig) error {
	for i, c := range cs {
		if !c.IsEnabled() {
			continue
		}
		if err := checkCollector(pol, c); err != nil {
			return fmt.Errorf("collectors[%d] (%s/%s): %w", i, c.Type, c.Name, err)
		}
	}
	return nil
}

func checkCollector(pol *policy.Policy, c agentconfig.Collector) error {
	if err := pol.CheckInterval(c.Interval.Std()); err != nil {
		return fmt.Errorf("interval: %w", err)
	}
	switch c.Type {
	case agentconfig.CollectorHTTP:
		u, err := url.Parse(c.URL)
		if err != nil {
			return fmt.Errorf("url: not a URL")
		}
		if err := pol.CheckURL(u); err != nil {
			return fmt.Errorf("url: %w", err)
		}
	case agentconfig.CollectorTCP:
		if err := pol.CheckAddress(c.Address); err != nil {
			return fmt.Errorf("address: %w", err)
		}
	case agentconfig.CollectorPostgres, agentconfig.CollectorRedis, agentconfig.CollectorMySQL:
		def := map[string]int{agentconfig.CollectorPostgres: 5432, agentconfig.CollectorRedis: 6379, agentconfig.CollectorMySQL: 3306}[c.Type]
		port := c.Port
		if port == 0 {
			port = def
		}
		if err := pol.CheckHost(c.Host, port); err != nil {
			return fmt.Errorf("host: %w", err)
		}
	}
	return nil
}

// hostPort joins the host and port fields with a default port.
func hostPort(c agentconfig.Collector, defPort int) (string, error) {
	if c.Host == "" {
		return "", fmt.Errorf("host is required")
	}
	port := c.Port
	if port == 0 {
		port = defPort
	}
	if port < 1 || port > 65535 {
		return "", fmt.Errorf("port %d out of range", port)
	}
	return joinHostPort(c.Host, port), nil
}

// secretValues returns, per collector index, the non-empty string values at the injected pointers
// ("/<index>/<field>"). A pointer that names nothing is an error: a secret must never go unprotected.
func secretValues(data json.RawMessage, pointers []string) (map[int][]string, error) {
	out := map[int][]string{}
	if len(pointers) == 0 {
		return out, nil
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("collectors: %w", err)
	}
	for _, ptr := range pointers {
		idx, field, ok := strings.Cut(strings.TrimPrefix(ptr, "/"), "/")
		i, err := strconv.Atoi(idx)
		if !ok || err != nil || i < 0 || i >= len(list) {
			return nil, fmt.Errorf("collectors: secret field %q names no collector field", ptr)
		}
		field = strings.ReplaceAll(strings.ReplaceAll(field, "~1", "/"), "~0", "~")
		raw, found := list[i][field]
		if !found {
			return nil, fmt.Errorf("collectors: secret field %q names no collector field", ptr)
		}
		var v string
		if json.Unmarshal(raw, &v) == nil && v != "" {
			out[i] = append(out[i], v)
		} else if len(raw) > 0 {
			out[i] = append(out[i], string(raw))
		}
	}
	return out, nil
}
