package natsapi

import (
	"encoding/json"
	"fmt"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// encodeAgentsReply encodes reply within maxBytes (no limit when not positive), each config and host
// once. The hosts that do not fit are moved to Remaining for the caller to ask again, with the configs
// only they use. It fails only when not even the first host fits.
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
	var remaining []string
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
			if i == 0 {
				return nil, fmt.Errorf("host %s: %w for max payload %d", h.Host.HostID, resolve.ErrReplyTooLarge, maxBytes)
			}
			for _, r := range reply.Hosts[i:] {
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
