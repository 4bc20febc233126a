package account

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
)

// Updater is what the subscription calls (Custodian.Update).
type Updater interface {
	Update(ctx context.Context, revoked map[string]time.Time, force bool) (bool, error)
}

// Serve answers protocol.AccountUpdateSubject (queue group protocol.AccountUpdateQueueGroup) with u
// until the subscription is unsubscribed. Requests are strict JSON; failures are answered with an
// unavailable error (config-api retries: its reconciler re-sends the desired list).
func Serve(nc *nats.Conn, u Updater, timeout time.Duration, log *zap.Logger) (*nats.Subscription, error) {
	return nc.QueueSubscribe(protocol.AccountUpdateSubject, protocol.AccountUpdateQueueGroup, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		reply := handle(u, m.Data, timeout, log)
		data, _ := json.Marshal(reply)
		if err := m.Respond(data); err != nil {
			log.Warn("account update reply failed", zap.Error(err))
		}
	})
}

func handle(u Updater, data []byte, timeout time.Duration, log *zap.Logger) protocol.AccountUpdateReply {
	var req protocol.AccountUpdateRequest
	if err := protocol.DecodeStrict(data, &req); err != nil {
		return protocol.AccountUpdateReply{Error: protocol.Errorf(protocol.CodeInvalidRequest, "malformed account update request")}
	}
	revoked := make(map[string]time.Time, len(req.Revocations))
	for pub, at := range req.Revocations {
		revoked[pub] = time.Unix(at, 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pushed, err := u.Update(ctx, revoked, req.Force)
	if err != nil {
		log.Error("account update failed", zap.Int("revocations", len(revoked)), zap.Error(err))
		return protocol.AccountUpdateReply{Error: protocol.Errorf(protocol.CodeUnavailable, "the NATS account could not be updated; retry")}
	}
	if pushed {
		log.Info("account pushed", zap.Int("revocations", len(revoked)), zap.Bool("forced", req.Force))
	}
	return protocol.AccountUpdateReply{Pushed: pushed}
}
