package credential

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// Allowed targets bind a credential to the servers it may be sent to. Each is a host:port pattern:
//
//   - host: a host name ("db.internal", compared case-insensitively, a trailing dot ignored), an IP
//     address ("10.0.0.5", "[2001:db8::1]" in brackets), "*.suffix" for any name below suffix (one or
//     more labels: "*.prod.example.com" matches "pg.prod.example.com" and "a.b.prod.example.com", not
//     "prod.example.com"), or "*" for any host;
//   - port: a number from 1 to 65535, or "*" for any port.
//
// A credential without allowed targets may be injected into any collector (the behaviour before
// targets existed). With some, the injector refuses every collector whose target matches none: the
// host and port of a postgres, mysql or redis collector (the port defaulting as the agent defaults
// it), or the host and port of an http collector's url (80 for http, 443 for https).
const (
	maxTargets       = 32
	maxTargetPattern = 300
)

// Default ports of the collector types, as the agent applies them.
var defaultPorts = map[string]int{
	agentconfig.CollectorPostgres: 5432,
	agentconfig.CollectorMySQL:    3306,
	agentconfig.CollectorRedis:    6379,
}

// target is one parsed allowed-target pattern. host is lowercase without a trailing dot; an IP
// address is in its canonical form; wildcard means "*.host"; anyHost means "*"; port 0 means "*".
type target struct {
	host     string
	wildcard bool
	anyHost  bool
	port     int
}

// normalizeTargets validates allowed-target patterns and returns them in canonical spelling, sorted
// and without duplicates. Errors name the offending position, not the pattern (it is not secret, but
// a pattern can be long).
func normalizeTargets(patterns []string) ([]string, error) {
	if len(patterns) > maxTargets {
		return nil, fmt.Errorf("%w: allowed_targets has %d entries, at most %d are allowed", ErrInvalidRequest, len(patterns), maxTargets)
	}
	out := make([]string, 0, len(patterns))
	for i, p := range patterns {
		t, err := parseTarget(p)
		if err != nil {
			return nil, fmt.Errorf("%w: allowed_targets[%d] %s", ErrInvalidRequest, i, err)
		}
		out = append(out, t.String())
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func parseTarget(p string) (target, error) {
	if len(p) == 0 || len(p) > maxTargetPattern {
		return target{}, fmt.Errorf("must be host:port, 1 to %d characters", maxTargetPattern)
	}
	host, port, err := net.SplitHostPort(p)
	if err != nil || host == "" {
		return target{}, fmt.Errorf(`must be host:port, such as "db.internal:5432", "*.prod.example.com:*" or "[2001:db8::1]:6379"`)
	}
	var t target
	if port != "*" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return target{}, fmt.Errorf(`has a port that is neither "*" nor a number from 1 to 65535`)
		}
		t.port = n
	}
	switch {
	case host == "*":
		t.anyHost = true
		return t, nil
	case strings.HasPrefix(host, "*."):
		t.wildcard = true
		host = host[2:]
	}
	if addr, err := netip.ParseAddr(host); err == nil && !t.wildcard {
		if addr.Zone() != "" {
			return target{}, fmt.Errorf("has an IP address with a zone")
		}
		t.host = addr.Unmap().String()
		return t, nil
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if !validHostName(host) {
		return target{}, fmt.Errorf(`has a host that is not a host name, an IP address, "*" or "*.suffix"`)
	}
	t.host = host
	return t, nil
}

// validHostName accepts dot-separated labels of letters, digits, '-' and '_' (1 to 63 characters each).
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}

// String is the canonical spelling of t.
func (t target) String() string {
	host := t.host
	switch {
	case t.anyHost:
		host = "*"
	case t.wildcard:
		host = "*." + host
	}
	port := "*"
	if t.port != 0 {
		port = strconv.Itoa(t.port)
	}
	return net.JoinHostPort(host, port)
}

// matches reports whether t allows host (normalized by collectorTarget) and port.
func (t target) matches(host string, port int) bool {
	if t.port != 0 && t.port != port {
		return false
	}
	switch {
	case t.anyHost:
		return true
	case t.wildcard:
		return strings.HasSuffix(host, "."+t.host)
	}
	return host == t.host
}

// allowed reports whether any of patterns (canonical, as stored) allows host:port. Patterns that no
// longer parse allow nothing.
func allowed(patterns []string, host string, port int) bool {
	for _, p := range patterns {
		if t, err := parseTarget(p); err == nil && t.matches(host, port) {
			return true
		}
	}
	return false
}

// collectorTarget returns the host (normalized like a pattern's) and port a collector connects to, or
// ok false when it names none the injector can check (no host, an unparsable url).
func collectorTarget(c agentconfig.Collector) (host string, port int, ok bool) {
	switch c.Type {
	case agentconfig.CollectorHTTP:
		u, err := url.Parse(c.URL)
		if err != nil || u.Hostname() == "" {
			return "", 0, false
		}
		host = u.Hostname()
		switch {
		case u.Port() != "":
			if port, err = strconv.Atoi(u.Port()); err != nil {
				return "", 0, false
			}
		case u.Scheme == "https":
			port = 443
		default:
			port = 80
		}
	case agentconfig.CollectorPostgres, agentconfig.CollectorMySQL, agentconfig.CollectorRedis:
		host, port = c.Host, c.Port
		if port == 0 {
			port = defaultPorts[c.Type]
		}
	default:
		return "", 0, false
	}
	if host == "" {
		return "", 0, false
	}
	if addr, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return addr.Unmap().WithZone("").String(), port, true
	}
	return strings.TrimSuffix(strings.ToLower(host), "."), port, true
}

// checkTargets applies the allowed targets of the credentials an item references to each collector
// that references one. credentialTargets maps each credential_id as written to its allowed targets
// (absent or empty: any target). It returns the first refusal, naming the collector's position and
// target (never a secret).
func checkTargets(collectors json.RawMessage, credentialTargets map[string][]string) *failure {
	var cs []agentconfig.Collector
	if err := json.Unmarshal(collectors, &cs); err != nil {
		return &failure{code: protocol.CodeInvalidRequest, rule: "collectors could not be read to check the credentials' allowed targets"}
	}
	for i, c := range cs {
		patterns := credentialTargets[c.CredentialID]
		if c.CredentialID == "" || len(patterns) == 0 {
			continue
		}
		host, port, ok := collectorTarget(c)
		if !ok {
			return &failure{code: protocol.CodeCredentialFailed, credentialID: c.CredentialID,
				rule: fmt.Sprintf("has allowed targets but collectors[%d] names no host to check them against", i)}
		}
		if !allowed(patterns, host, port) {
			return &failure{code: protocol.CodeCredentialFailed, credentialID: c.CredentialID,
				rule: fmt.Sprintf("is not allowed for the target of collectors[%d] (%s)", i, net.JoinHostPort(host, strconv.Itoa(port)))}
		}
	}
	return nil
}
