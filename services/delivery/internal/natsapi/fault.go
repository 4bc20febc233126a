package natsapi

import (
	"context"

	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

// LossyPublisher is a CommandPublisher that silently loses the commands lose says to lose, as a
// network or an agent that is briefly not subscribed would. Fault tests use it to lose pushes on
// purpose and watch anti-entropy repair them; it is never used otherwise.
type LossyPublisher struct {
	deliver.CommandPublisher
	Lose func(agentID string, command []byte) bool
}

// Publish implements deliver.CommandPublisher.
func (p LossyPublisher) Publish(ctx context.Context, agentID string, command []byte) error {
	if p.Lose(agentID, command) {
		return nil
	}
	return p.CommandPublisher.Publish(ctx, agentID, command)
}

// Flush implements deliver.CommandPublisher.
func (p LossyPublisher) Flush(ctx context.Context) error { return p.CommandPublisher.Flush(ctx) }
