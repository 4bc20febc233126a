package deliver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// commandTemplate is a config_update command encoded once for many agents: only command_id differs
// per agent, so the (possibly large) payload is encoded once and its bytes reused.
type commandTemplate struct {
	rest []byte // the encoded command after `{"command_id":""`
}

const commandIDPrefix = `{"command_id":"`

func newCommandTemplate(configType string, version int64, payload json.RawMessage, secretFields []string, statement *protocol.Signed, issuedAt time.Time) (commandTemplate, error) {
	if agentconfig.IsNull(payload) {
		payload = json.RawMessage("null")
	}
	b, err := json.Marshal(protocol.Command{
		Type:         protocol.CommandConfigUpdate,
		ConfigType:   configType,
		Version:      version,
		Payload:      payload,
		SecretFields: secretFields,
		IssuedAt:     issuedAt,
		Statement:    statement,
	})
	if err != nil {
		return commandTemplate{}, fmt.Errorf("encode command: %w", err)
	}
	head := []byte(commandIDPrefix + `"`)
	if !bytes.HasPrefix(b, head) {
		return commandTemplate{}, fmt.Errorf("encode command: unexpected layout")
	}
	return commandTemplate{rest: b[len(head):]}, nil
}

// appendCommand appends the command with commandID (a UUID: no escaping needed) to buf.
func (t commandTemplate) appendCommand(buf []byte, commandID string) []byte {
	buf = append(buf, commandIDPrefix...)
	buf = append(buf, commandID...)
	buf = append(buf, '"')
	return append(buf, t.rest...)
}

// commandNamespace seeds command ids. An id is derived from the agent, type and version — what the
// command delivers (a host's effective config of a type at a version never changes) — so the same
// content carries the same id however often it is sent: a fan-out redone after a crash, a redelivered
// event, an anti-entropy repair (agents may use ids to drop duplicates).
var commandNamespace = uuid.MustParse("8f6b7c1e-3d4a-5b6c-9d8e-7f6a5b4c3d2e")

func commandID(agentID, configType string, version int64) string {
	return uuid.NewSHA1(commandNamespace, fmt.Appendf(nil, "%s\x00%s\x00%d", agentID, configType, version)).String()
}
