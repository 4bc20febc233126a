package agentidentity

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
)

// Renewer signs fresh JWTs for agents' existing NATS users (hosts.Service.RenewCredentials).
type Renewer interface {
	RenewCredentials(ctx context.Context, agentID, publicKey string) (jwt string, expires time.Time, err error)
}

// maxRenewRequest bounds a renewal request (an agent id and a public key).
const maxRenewRequest = 4 << 10

// ServeRenewals answers agents' credential renewals on protocol.CredsRenewSubjectAll (a queue group
// the config-api replicas share). The agent id is the subject token — what the agent's NATS user may
// publish under — never a payload field, and the answer goes only to that agent's own inbox, so an
// agent can renew only itself and cannot have the answer sent anywhere else.
func ServeRenewals(nc *nats.Conn, r Renewer, timeout time.Duration, log *zap.Logger) (*nats.Subscription, error) {
	return nc.QueueSubscribe(protocol.CredsRenewSubjectAll, protocol.CredsRenewQueueGroup, func(m *nats.Msg) {
		agentID, ok := protocol.AgentIDFromSubject(m.Subject)
		if !ok || !strings.HasPrefix(m.Reply, protocol.InboxPrefix(agentID)+".") {
			return
		}
		reply := renew(r, agentID, m.Data, timeout, log)
		data, _ := json.Marshal(reply)
		if err := m.Respond(data); err != nil {
			log.Warn("creds renew reply failed", zap.String("agent_id", agentID), zap.Error(err))
		}
	})
}

func renew(r Renewer, agentID string, data []byte, timeout time.Duration, log *zap.Logger) protocol.CredsRenewReply {
	if len(data) > maxRenewRequest {
		return protocol.CredsRenewReply{Error: protocol.Errorf(protocol.CodeInvalidRequest, "request too large")}
	}
	var req protocol.CredsRenewRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return protocol.CredsRenewReply{Error: protocol.Errorf(protocol.CodeInvalidRequest, "malformed request")}
	}
	if req.AgentID != agentID {
		return protocol.CredsRenewReply{Error: protocol.Errorf(protocol.CodeInvalidRequest, "agent_id does not match the subject")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	token, expires, err := r.RenewCredentials(ctx, agentID, req.PublicKey)
	switch {
	case err == nil:
		log.Info("agent creds renewed", zap.String("agent_id", agentID), zap.Time("expires_at", expires))
		return protocol.CredsRenewReply{JWT: token, ExpiresAt: expires}
	case fault.Is(err, fault.NotFound):
		log.Warn("agent creds renewal refused", zap.String("agent_id", agentID))
		return protocol.CredsRenewReply{Error: protocol.Errorf(protocol.CodeNotFound, "no active host holds these credentials; re-enrol the host")}
	case errors.Is(err, context.DeadlineExceeded):
		return protocol.CredsRenewReply{Error: protocol.Errorf(protocol.CodeUnavailable, "try again later")}
	default:
		log.Error("agent creds renewal failed", zap.String("agent_id", agentID), zap.Error(err))
		return protocol.CredsRenewReply{Error: protocol.Errorf(protocol.CodeUnavailable, "try again later")}
	}
}
