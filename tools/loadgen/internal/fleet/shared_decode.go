package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/configsync/configsync/libs/protocol"
)

// Decoding every command and fetch reply was about half of loadgen's own CPU (its -cpuprofile during a
// 10,000-agent herd and push), and loadgen shares the machine with the stack it measures. What the
// backend sends the agents of one config set is the same bytes but for an agent-specific part:
// delivery writes a command as `{"command_id":"<per agent>"` followed by one shared encoding, and a
// fetch reply as one shared encoding with `,"identity":<per agent>}` appended. So each distinct shared
// part is decoded once and the per-agent part on its own; the result is what decoding the whole message
// gives (tests compare both).

// sharedDecodes holds decoded messages by their shared bytes (a few distinct ones at a time).
type sharedDecodes[T any] struct {
	mu sync.Mutex
	m  map[string]T
}

const maxSharedDecodes = 64

func (c *sharedDecodes[T]) get(key []byte) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[string(key)]
	return v, ok
}

func (c *sharedDecodes[T]) put(key []byte, v T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxSharedDecodes {
		c.m = map[string]T{}
	}
	c.m[string(key)] = v
}

var (
	sharedCommands sharedDecodes[protocol.Command]
	sharedReplies  sharedDecodes[protocol.FetchReply]
)

const commandIDHead = `{"command_id":"`

func decodeCommand(data []byte) (protocol.Command, error) {
	if rest, ok := bytes.CutPrefix(data, []byte(commandIDHead)); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 && !bytes.Contains(rest[i+1:], []byte(`"command_id"`)) {
			id, shared := string(rest[:i]), rest[i+1:]
			if cmd, ok := sharedCommands.get(shared); ok {
				cmd.CommandID = id
				return cmd, nil
			}
			cmd, err := decodeWhole[protocol.Command](data)
			if err == nil && cmd.CommandID == id {
				sharedCommands.put(shared, cmd)
			}
			if err != nil {
				return cmd, fmt.Errorf("decode command: %w", err)
			}
			return cmd, nil
		}
	}
	cmd, err := decodeWhole[protocol.Command](data)
	if err != nil {
		return cmd, fmt.Errorf("decode command: %w", err)
	}
	return cmd, nil
}

const identityMember = `,"identity":`

// decodeFetchReply decodes a fetch reply; the shared part of a reply with an identity is decoded once.
func decodeFetchReply(data []byte) (protocol.FetchReply, error) {
	if i := bytes.LastIndex(data, []byte(identityMember)); i > 0 && data[len(data)-1] == '}' {
		// The identity by protocol.Signed.DecodeJSON (what json.Unmarshal gives, without reflection: one
		// per agent); a null one leaves the reply without, as in a whole decode.
		idData := data[i+len(identityMember) : len(data)-1]
		id := new(protocol.Signed)
		if err := id.DecodeJSON(idData); err == nil {
			if string(bytes.TrimSpace(idData)) == "null" {
				id = nil
			}
			shared := data[:i]
			if r, ok := sharedReplies.get(shared); ok {
				r.Identity = id
				return r, nil
			}
			if r, err := decodeWhole[protocol.FetchReply](append(shared[:len(shared):len(shared)], '}')); err == nil && r.Identity == nil {
				sharedReplies.put(shared, r)
			}
		}
	}
	return decodeWhole[protocol.FetchReply](data)
}

func decodeWhole[T any](data []byte) (T, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}
