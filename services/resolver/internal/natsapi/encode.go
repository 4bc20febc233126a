package natsapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/configsync/configsync/libs/protocol"
)

// errReplyTooLarge: not even one host's entry fits in the NATS max payload.
var errReplyTooLarge = errors.New("reply too large")

// appendHostIDs appends {"host_id":…,"agent_id":…}, directly when no character needs escaping, else
// the JSON encoding of v (which must encode to the same object).
func appendHostIDs(buf []byte, hostID, agentID string, v any) ([]byte, error) {
	if !protocol.PlainJSONString(hostID) || !protocol.PlainJSONString(agentID) {
		return appendJSON(buf, v)
	}
	buf = append(buf, `{"host_id":"`...)
	buf = append(buf, hostID...)
	buf = append(buf, `","agent_id":"`...)
	buf = append(buf, agentID...)
	return append(buf, `"}`...), nil
}

func appendJSON(buf []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return buf, err
	}
	return append(buf, b...), nil
}

// appendField appends key (`,"name":`) and the JSON encoding of v.
func appendField(buf []byte, key string, v any) ([]byte, error) {
	return appendJSON(append(buf, key...), v)
}

// encodeSetsReply encodes reply within maxBytes (no limit when not positive), each config once. This is
// where a resolve_sets reply meets the NATS max payload: hosts that do not fit are moved to Remaining
// for the caller to ask again, with the configs and sets only they use. A first host that does not fit
// even alone (its set's configs exceed the payload) can never be answered: it is listed in Failed and
// the others in Remaining, so every reply makes progress.
//
// It relies on how Resolver.ResolveSets numbers configs: in order of first use by the sets, so the
// configs of the first k sets are a prefix of Configs.
func encodeSetsReply(reply protocol.ResolveSetsReply, maxBytes int) (json.RawMessage, error) {
	missing, err := json.Marshal(reply.Missing)
	if err != nil {
		return nil, fmt.Errorf("encode missing agents: %w", err)
	}
	var trusted []byte // signing's trusted-key list, sent with every reply
	if reply.TrustedKeys != nil {
		if trusted, err = json.Marshal(reply.TrustedKeys); err != nil {
			return nil, fmt.Errorf("encode trusted keys: %w", err)
		}
	}
	// Room for the object around the lists, the trusted-key list and, should hosts be cut, the agent
	// ids of every host (an upper bound of the remaining list).
	reserve := len(`{"contract":,"configs":[],"sets":[],"missing":,"remaining":[],"trusted_keys":}`) + 20 + len(missing) + len(trusted)
	for _, set := range reply.Sets {
		for _, h := range set.Hosts {
			reserve += len(h.AgentID) + 3
		}
	}
	configs := make([][]byte, 0, len(reply.Configs))
	sets := make([][]byte, 0, len(reply.Sets))
	size := reserve
	answered := 0
	var remaining []string
	failed := slices.Clone(reply.Failed) // a push page cut to the payload names its failed host itself
	cut := func(from int, hosts []protocol.SetHost) {
		for _, h := range hosts {
			remaining = append(remaining, h.AgentID)
		}
		for _, set := range reply.Sets[from:] {
			for _, h := range set.Hosts {
				remaining = append(remaining, h.AgentID)
			}
		}
	}
	for i, set := range reply.Sets {
		used := len(configs)
		for typ, n := range set.Configs {
			if n < 0 || n >= len(reply.Configs) {
				return nil, fmt.Errorf("set %d: %s config index %d of %d", i, typ, n, len(reply.Configs))
			}
			used = max(used, n+1)
		}
		added := configs
		grow := 0
		for _, c := range reply.Configs[len(configs):used] {
			b, err := json.Marshal(c)
			if err != nil {
				return nil, fmt.Errorf("encode %s config: %w", c.ConfigType, err)
			}
			added = append(added, b)
			grow += len(b) + 1
		}
		buf, err := appendSetHead(make([]byte, 0, setSize(set)), set)
		if err != nil {
			return nil, fmt.Errorf("encode set %d: %w", i, err)
		}
		grow += len(buf) + len(`]}`) + 1
		kept := 0
		for k, h := range set.Hosts {
			start := len(buf)
			if k > 0 {
				buf = append(buf, ',')
			}
			if buf, err = appendSetHost(buf, h); err != nil {
				return nil, fmt.Errorf("encode host %s: %w", h.HostID, err)
			}
			if maxBytes > 0 && size+grow+len(buf)-start > maxBytes {
				buf = buf[:start]
				break
			}
			grow += len(buf) - start
			kept++
		}
		if kept == 0 {
			rest := set.Hosts
			if answered == 0 {
				failed = append(failed, protocol.AgentError{AgentID: rest[0].AgentID,
					Error: *protocol.Errorf(protocol.CodeInternal, "a single host's config exceeds the NATS max payload")})
				rest = rest[1:]
			}
			cut(i+1, rest)
			break
		}
		configs, size = added, size+grow
		sets = append(sets, append(buf, `]}`...))
		answered += kept
		if kept < len(set.Hosts) {
			cut(i+1, set.Hosts[kept:])
			break
		}
	}

	buf := make([]byte, 0, size)
	buf = append(buf, `{"contract":`...)
	buf = strconv.AppendInt(buf, int64(reply.Contract), 10)
	buf = append(buf, `,"configs":`...)
	buf = appendList(buf, configs)
	buf = append(buf, `,"sets":`...)
	buf = appendList(buf, sets)
	if len(reply.Missing) > 0 {
		buf = append(buf, `,"missing":`...)
		buf = append(buf, missing...)
	}
	if len(remaining) > 0 {
		if buf, err = appendField(buf, `,"remaining":`, remaining); err != nil {
			return nil, fmt.Errorf("encode remaining agents: %w", err)
		}
	}
	if len(failed) > 0 {
		if buf, err = appendField(buf, `,"failed":`, failed); err != nil {
			return nil, fmt.Errorf("encode failed agents: %w", err)
		}
	}
	if trusted != nil {
		buf = append(buf, `,"trusted_keys":`...)
		buf = append(buf, trusted...)
	}
	if reply.NextAfter != "" {
		if buf, err = appendField(buf, `,"next_after":`, reply.NextAfter); err != nil {
			return nil, fmt.Errorf("encode next_after: %w", err)
		}
	}
	return append(buf, '}'), nil
}

// encodePushReply encodes a resolve_push page within maxBytes (no limit when not positive). A page
// that does not fit is cut in host id order, the page's order: the longest prefix of its hosts that
// fits is sent and NextAfter moves back to its last host, so the next page starts right after it.
// A first host that does not fit even alone (its config exceeds the payload) can never be pushed: it
// is listed in Failed and NextAfter moves past it, so every page makes progress.
func encodePushReply(reply protocol.ResolveSetsReply, maxBytes int) (json.RawMessage, error) {
	body, err := encodeSetsReply(reply, 0)
	if err != nil || maxBytes <= 0 || len(body) <= maxBytes {
		return body, err
	}
	var hosts []protocol.SetHost
	for _, set := range reply.Sets {
		hosts = append(hosts, set.Hosts...)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("push page without hosts: %w for max payload %d", errReplyTooLarge, maxBytes)
	}
	slices.SortFunc(hosts, func(a, b protocol.SetHost) int { return strings.Compare(a.HostID, b.HostID) })
	// The longest fitting prefix, by bisection: prefixes that fit are a range starting at 0.
	fits, best := 0, json.RawMessage(nil)
	lo, hi := 1, len(hosts)-1
	for lo <= hi {
		k := (lo + hi) / 2
		b, err := encodeSetsReply(prefixReply(reply, hosts[:k]), 0)
		if err != nil {
			return nil, err
		}
		if len(b) <= maxBytes {
			fits, best, lo = k, b, k+1
		} else {
			hi = k - 1
		}
	}
	if fits > 0 {
		return best, nil
	}
	first := hosts[0]
	cut := prefixReply(reply, nil)
	cut.Failed = []protocol.AgentError{{AgentID: first.AgentID,
		Error: *protocol.Errorf(protocol.CodeInternal, "a single host's config exceeds the NATS max payload")}}
	cut.NextAfter = first.HostID
	b, err := encodeSetsReply(cut, 0)
	if err == nil && len(b) > maxBytes {
		err = fmt.Errorf("host %s: %w for max payload %d", first.HostID, errReplyTooLarge, maxBytes)
	}
	return b, err
}

// prefixReply is reply with only the given hosts (the first hosts of its page in id order), the
// configs only they use and NextAfter at the last of them.
func prefixReply(reply protocol.ResolveSetsReply, hosts []protocol.SetHost) protocol.ResolveSetsReply {
	keep := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		keep[h.HostID] = true
	}
	out := reply
	out.Configs, out.Sets, out.NextAfter = []protocol.EffectiveConfig{}, []protocol.ConfigSet{}, ""
	if len(hosts) > 0 {
		out.NextAfter = hosts[len(hosts)-1].HostID
	}
	index := map[int]int{}
	for _, set := range reply.Sets {
		var kept []protocol.SetHost
		for _, h := range set.Hosts {
			if keep[h.HostID] {
				kept = append(kept, h)
			}
		}
		if len(kept) == 0 {
			continue
		}
		cs := set
		cs.Hosts, cs.Configs = kept, make(map[string]int, len(set.Configs))
		for _, typ := range slices.Sorted(maps.Keys(set.Configs)) {
			n := set.Configs[typ]
			m, ok := index[n]
			if !ok {
				m = len(out.Configs)
				index[n] = m
				out.Configs = append(out.Configs, reply.Configs[n])
			}
			cs.Configs[typ] = m
		}
		out.Sets = append(out.Sets, cs)
	}
	return out
}

// appendSetHead appends a set's object up to the opening of its hosts list, as json.Marshal writes it,
// directly when no character needs escaping (a push page is mostly sets of one host).
func appendSetHead(buf []byte, set protocol.ConfigSet) ([]byte, error) {
	plain := set.Configs != nil && protocol.PlainJSONString(set.ClientID) && protocol.PlainJSONString(set.EnvironmentID)
	for t := range set.Configs {
		plain = plain && protocol.PlainJSONString(t)
	}
	if !plain {
		head, err := json.Marshal(struct {
			ClientID      string         `json:"client_id"`
			EnvironmentID string         `json:"environment_id"`
			Configs       map[string]int `json:"configs"`
		}{set.ClientID, set.EnvironmentID, set.Configs})
		if err != nil {
			return buf, err
		}
		return append(append(buf, head[:len(head)-1]...), `,"hosts":[`...), nil
	}
	buf = append(buf, `{"client_id":"`...)
	buf = append(buf, set.ClientID...)
	buf = append(buf, `","environment_id":"`...)
	buf = append(buf, set.EnvironmentID...)
	buf = append(buf, `","configs":{`...)
	types := slices.Collect(maps.Keys(set.Configs))
	if len(types) > 1 {
		slices.Sort(types)
	}
	for i, t := range types {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '"')
		buf = append(buf, t...)
		buf = append(buf, `":`...)
		buf = strconv.AppendInt(buf, int64(set.Configs[t]), 10)
	}
	return append(buf, `},"hosts":[`...), nil
}

// setSize is about the length of set's encoding (exact for hosts without characters to escape), so that
// its buffer is allocated once: with signing on, a herd batch's set is tens of kilobytes of identity
// statements, which a growing buffer would allocate and copy about twice over.
func setSize(set protocol.ConfigSet) int {
	n := len(`{"client_id":"","environment_id":"","configs":{},"hosts":[]}`) + len(set.ClientID) + len(set.EnvironmentID)
	for t := range set.Configs {
		n += len(`"":,`) + len(t) + 20
	}
	for _, h := range set.Hosts {
		n += len(`{"host_id":"","agent_id":""},`) + len(h.HostID) + len(h.AgentID)
		if id := h.Identity; id != nil {
			n += len(`,"identity":{"statement":,"key_id":"","signature":}`) + len(id.KeyID) +
				base64Size(id.Statement) + base64Size(id.Signature)
		}
	}
	return n
}

// base64Size is the length of appendBase64's encoding of b (null when nil).
func base64Size(b []byte) int {
	if b == nil {
		return len("null")
	}
	return base64.StdEncoding.EncodedLen(len(b)) + 2
}

// appendSetHost appends h's JSON encoding, directly when no character needs escaping (the bulk of a
// reply is hosts, each with its identity statement when signing is on), as json.Marshal writes it.
func appendSetHost(buf []byte, h protocol.SetHost) ([]byte, error) {
	if h.Identity == nil {
		return appendHostIDs(buf, h.HostID, h.AgentID, h)
	}
	if !protocol.PlainJSONString(h.HostID) || !protocol.PlainJSONString(h.AgentID) {
		return appendJSON(buf, h)
	}
	buf = append(buf, `{"host_id":"`...)
	buf = append(buf, h.HostID...)
	buf = append(buf, `","agent_id":"`...)
	buf = append(buf, h.AgentID...)
	buf = append(buf, `","identity":`...)
	buf, err := h.Identity.AppendJSON(buf)
	if err != nil {
		return buf, err
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
