package metrics

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

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

func build(c agentconfig.Collector) (Collector, error) {
	switch c.Type {
	case agentconfig.CollectorHTTP:
		return newHTTPCheck(c)
	case agentconfig.CollectorTCP:
		return newTCPCheck(c)
	case agentconfig.CollectorPostgres:
		return newPostgresCheck(c)
	case agentconfig.CollectorRedis:
		return newRedisCheck(c)
	case agentconfig.CollectorMySQL:
		return newMySQLCheck(c)
	}
	return nil, fmt.Errorf("unknown collector type %q", c.Type)
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
