package testinfra

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// RequestAsAgent sends a request the way agent agentID does: with its reply inbox under
// _INBOX.<agentID>. (delivery answers an agent's fetch only there). nc may be any connection allowed to
// read that inbox (a test's unrestricted user, say); it fails with nats.ErrTimeout when no reply comes
// and nats.ErrNoResponders when nobody subscribes to subject.
func RequestAsAgent(nc *nats.Conn, agentID, subject string, data []byte, timeout time.Duration) (*nats.Msg, error) {
	inbox := "_INBOX." + agentID + "." + strings.TrimPrefix(nats.NewInbox(), "_INBOX.")
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, data); err != nil {
		return nil, err
	}
	msg, err := sub.NextMsg(timeout)
	if err != nil {
		return nil, err
	}
	if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
		return nil, nats.ErrNoResponders
	}
	return msg, nil
}
