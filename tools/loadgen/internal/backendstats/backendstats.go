// Package backendstats reads what the ConfigSync services expose about their own work over NATS: the
// request counters of their nats.go micro endpoints ($SRV.STATS) and the progress of the JetStream
// consumers that ack-ingest reads acks and heartbeats from.
package backendstats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/configsync/configsync/libs/protocol"
)

// Durable consumer names of ack-ingest (services/ack-ingest/internal/natsapi; internal there, so
// repeated here: a rename there makes ConsumerProgress fail loudly, not silently).
const (
	AcksDurable       = "configsync-ack-ingest-acks"
	HeartbeatsDurable = "configsync-ack-ingest-heartbeats"
)

// EndpointCount is the sum over every instance of a micro service of one endpoint's counters.
type EndpointCount struct {
	Instances int   `json:"instances"`
	Requests  int64 `json:"requests"`
	Errors    int64 `json:"errors"`
}

// Endpoint gathers $SRV.STATS.<service> answers and sums the counters of the endpoint named endpoint.
// Every replica answers and nothing says how many there are: it collects for wait, or until expect
// instances have answered when expect > 0 (a count learnt from an earlier call).
func Endpoint(ctx context.Context, nc *nats.Conn, service, endpoint string, wait time.Duration, expect int) (EndpointCount, error) {
	subject, err := micro.ControlSubject(micro.StatsVerb, service, "")
	if err != nil {
		return EndpointCount{}, err
	}
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return EndpointCount{}, fmt.Errorf("backendstats: %w", err)
	}
	defer sub.Unsubscribe() //nolint:errcheck
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return EndpointCount{}, fmt.Errorf("backendstats: %w", err)
	}
	var out EndpointCount
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-timer.C:
			if out.Instances == 0 {
				return out, fmt.Errorf("backendstats: no %s instance answered %s", service, subject)
			}
			return out, nil
		case m := <-ch:
			var st micro.Stats
			if err := json.Unmarshal(m.Data, &st); err != nil {
				continue
			}
			out.Instances++
			for _, e := range st.Endpoints {
				if e.Name == endpoint {
					out.Requests += int64(e.NumRequests)
					out.Errors += int64(e.NumErrors)
				}
			}
			if expect > 0 && out.Instances >= expect {
				return out, nil
			}
		}
	}
}

// CredentialInjects reads the credential service's inject endpoint counters (see Endpoint for expect).
func CredentialInjects(ctx context.Context, nc *nats.Conn, expect int) (EndpointCount, error) {
	return Endpoint(ctx, nc, protocol.CredentialServiceName, "inject", 300*time.Millisecond, expect)
}

// ConsumerProgress is how far a durable consumer and its stream have got.
type ConsumerProgress struct {
	// StreamLastSeq counts every message the stream ever stored.
	StreamLastSeq uint64 `json:"stream_last_seq"`
	// Delivered counts deliveries to the consumer (redeliveries included); AckFloor the consumer
	// sequence below which every delivery has been acknowledged, i.e. written by ack-ingest.
	Delivered     uint64 `json:"delivered"`
	AckFloor      uint64 `json:"ack_floor"`
	NumPending    uint64 `json:"num_pending"`
	NumAckPending int    `json:"num_ack_pending"`
}

// Consumer reads a durable consumer's progress.
func Consumer(ctx context.Context, js jetstream.JetStream, stream, durable string) (ConsumerProgress, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return ConsumerProgress{}, fmt.Errorf("backendstats: stream %s: %w", stream, err)
	}
	si, err := s.Info(ctx)
	if err != nil {
		return ConsumerProgress{}, fmt.Errorf("backendstats: stream %s: %w", stream, err)
	}
	c, err := s.Consumer(ctx, durable)
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return ConsumerProgress{}, fmt.Errorf("backendstats: ack-ingest consumer %s not found on %s (renamed?): %w", durable, stream, err)
		}
		return ConsumerProgress{}, fmt.Errorf("backendstats: consumer %s: %w", durable, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return ConsumerProgress{}, fmt.Errorf("backendstats: consumer %s: %w", durable, err)
	}
	return ConsumerProgress{
		StreamLastSeq: si.State.LastSeq,
		Delivered:     ci.Delivered.Consumer,
		AckFloor:      ci.AckFloor.Consumer,
		NumPending:    ci.NumPending,
		NumAckPending: ci.NumAckPending,
	}, nil
}
