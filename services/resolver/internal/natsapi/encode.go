package natsapi

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/configsync/configsync/libs/protocol"
)

// errReplyTooLarge: not even one host's entry fits in the NATS max payload.
var errReplyTooLarge = errors.New("reply too large")

// nextAfterReserve is room kept for `,"next_after":"<uuid>"` when budgeting a batch page.
const nextAfterReserve = 64

// encodeBatchReply encodes a resolve_batch page within maxBytes (no limit when not positive). Hosts
// that do not fit are left for the next page: the page is cut after the last host that fits and
// NextAfter moves back to it. It fails only when the environment's config or the first host alone
// does not fit.
func encodeBatchReply(reply protocol.ResolveBatchReply, maxBytes int) (json.RawMessage, error) {
	head, err := json.Marshal(struct {
		EnvironmentID string                   `json:"environment_id"`
		ClientID      string                   `json:"client_id"`
		ConfigType    string                   `json:"config_type"`
		Environment   protocol.EffectiveConfig `json:"environment"`
	}{reply.EnvironmentID, reply.ClientID, reply.ConfigType, reply.Environment})
	if err != nil {
		return nil, fmt.Errorf("encode batch reply: %w", err)
	}
	budget := -1
	if maxBytes > 0 {
		budget = maxBytes - len(head) - len(`,"hosts":[]}`) - nextAfterReserve
		if budget < 0 {
			return nil, fmt.Errorf("environment config: %w for max payload %d", errReplyTooLarge, maxBytes)
		}
	}
	buf := make([]byte, 0, len(head)+len(reply.Hosts)*96+nextAfterReserve)
	buf = append(buf, head[:len(head)-1]...)
	buf = append(buf, `,"hosts":[`...)
	nextAfter := reply.NextAfter
	for i, h := range reply.Hosts {
		start := len(buf)
		if i > 0 {
			buf = append(buf, ',')
		}
		if buf, err = appendBatchHost(buf, h); err != nil {
			return nil, fmt.Errorf("encode host %s: %w", h.HostID, err)
		}
		if budget < 0 {
			continue
		}
		if size := len(buf) - start; size <= budget {
			budget -= size
			continue
		}
		if i == 0 {
			return nil, fmt.Errorf("host %s: %w for max payload %d", h.HostID, errReplyTooLarge, maxBytes)
		}
		buf, nextAfter = buf[:start], reply.Hosts[i-1].HostID
		break
	}
	buf = append(buf, ']')
	if nextAfter != "" {
		b, err := json.Marshal(nextAfter)
		if err != nil {
			return nil, fmt.Errorf("encode next_after: %w", err)
		}
		buf = append(buf, `,"next_after":`...)
		buf = append(buf, b...)
	}
	return append(buf, '}'), nil
}

// appendBatchHost appends h's JSON encoding. Hosts without an override are the bulk of a page, so
// they are written directly when no character needs escaping.
func appendBatchHost(buf []byte, h protocol.BatchHost) ([]byte, error) {
	if h.Override == nil && plainJSON(h.HostID) && plainJSON(h.AgentID) {
		buf = append(buf, `{"host_id":"`...)
		buf = append(buf, h.HostID...)
		buf = append(buf, `","agent_id":"`...)
		buf = append(buf, h.AgentID...)
		return append(buf, `"}`...), nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return buf, err
	}
	return append(buf, b...), nil
}

// plainJSON reports whether s encodes as a JSON string without escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// encodeAgentsReply encodes reply within maxBytes (no limit when not positive), each config and host
// once. The hosts that do not fit are moved to Remaining for the caller to ask again, with the configs
// only they use. A first host that does not fit even alone can never be answered: it is listed in
// Failed (internal) and the others in Remaining, so every reply makes progress.
//
// It relies on how Resolver.ResolveAgents numbers configs: in order of first use by the hosts, so the
// configs of the first k hosts are a prefix of Configs.
func encodeAgentsReply(reply protocol.ResolveAgentsReply, maxBytes int) (json.RawMessage, error) {
	missing, err := json.Marshal(reply.Missing)
	if err != nil {
		return nil, fmt.Errorf("encode missing agents: %w", err)
	}
	// Room for the object around the lists and, should hosts be cut, the agent ids of every host (an
	// upper bound of the remaining list).
	reserve := len(`{"configs":[],"hosts":[],"missing":,"remaining":[]}`) + len(missing)
	for _, h := range reply.Hosts {
		reserve += len(h.Host.AgentID) + 3
	}
	configs := make([][]byte, 0, len(reply.Configs))
	hosts := make([][]byte, 0, len(reply.Hosts))
	size := reserve
	var (
		remaining []string
		failed    []protocol.AgentError
	)
	for i, h := range reply.Hosts {
		grow := 0
		used := len(configs)
		for _, n := range h.Configs {
			if n < 0 || n >= len(reply.Configs) {
				return nil, fmt.Errorf("host %s: config index %d of %d", h.Host.HostID, n, len(reply.Configs))
			}
			used = max(used, n+1)
		}
		added := configs
		for _, c := range reply.Configs[len(configs):used] {
			b, err := json.Marshal(c)
			if err != nil {
				return nil, fmt.Errorf("encode %s config: %w", c.ConfigType, err)
			}
			added = append(added, b)
			grow += len(b) + 1
		}
		b, err := json.Marshal(h)
		if err != nil {
			return nil, fmt.Errorf("encode host %s: %w", h.Host.HostID, err)
		}
		grow += len(b) + 1
		if maxBytes > 0 && size+grow > maxBytes {
			rest := reply.Hosts[i:]
			if i == 0 {
				failed = append(failed, protocol.AgentError{AgentID: h.Host.AgentID,
					Error: *protocol.Errorf(protocol.CodeInternal, "a single host's config exceeds the NATS max payload")})
				rest = rest[1:]
			}
			for _, r := range rest {
				remaining = append(remaining, r.Host.AgentID)
			}
			break
		}
		configs, size = added, size+grow
		hosts = append(hosts, b)
	}

	buf := make([]byte, 0, size)
	buf = append(buf, `{"configs":`...)
	buf = appendList(buf, configs)
	buf = append(buf, `,"hosts":`...)
	buf = appendList(buf, hosts)
	if len(reply.Missing) > 0 {
		buf = append(buf, `,"missing":`...)
		buf = append(buf, missing...)
	}
	if len(remaining) > 0 {
		r, err := json.Marshal(remaining)
		if err != nil {
			return nil, fmt.Errorf("encode remaining agents: %w", err)
		}
		buf = append(buf, `,"remaining":`...)
		buf = append(buf, r...)
	}
	if len(failed) > 0 {
		f, err := json.Marshal(failed)
		if err != nil {
			return nil, fmt.Errorf("encode failed agents: %w", err)
		}
		buf = append(buf, `,"failed":`...)
		buf = append(buf, f...)
	}
	return append(buf, '}'), nil
}

// appendList appends the encoded items as a JSON array.
func appendList(buf []byte, items [][]byte) []byte {
	buf = append(buf, '[')
	for i, b := range items {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, b...)
	}
	return append(buf, ']')
}
