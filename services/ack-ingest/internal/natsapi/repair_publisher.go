package natsapi

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
)

// RepairPublisher implements ingest.RepairPublisher with core NATS publishes on
// protocol.RepairSubject (delivery's queue group takes each request once). Best effort: a lost request
// is asked again after the backoff, at a later heartbeat.
type RepairPublisher struct{ nc *nats.Conn }

var _ ingest.RepairPublisher = (*RepairPublisher)(nil)

// NewRepairPublisher returns a publisher on nc.
func NewRepairPublisher(nc *nats.Conn) *RepairPublisher { return &RepairPublisher{nc: nc} }

// PublishRepair implements ingest.RepairPublisher.
func (p *RepairPublisher) PublishRepair(_ context.Context, req protocol.RepairRequest) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode repair request: %w", err)
	}
	if err := p.nc.Publish(protocol.RepairSubject, data); err != nil {
		return fmt.Errorf("publish repair request: %w", err)
	}
	return nil
}
