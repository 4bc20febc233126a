package testinfra

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Drained returns nil once the stream holds at least published messages (its last sequence) and the
// durable consumer has settled (acked or terminated) every message the stream holds so far, else what
// is still open: the condition to wait for (EventuallyNoError) before looking at what a consumer did.
// published is what the caller sent with core NATS publishes: a flushed publish has reached the server,
// not necessarily the stream, which stores it from a queue of its own; 0 when every message was
// published with a JetStream acknowledgement (stored before it returned).
func Drained(ctx context.Context, js jetstream.JetStream, stream, durable string, published uint64) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	cons, err := st.Consumer(ctx, durable)
	if err != nil {
		return err
	}
	// Stream and Consumer fetched their infos (in that order): the cached copies are current.
	sinfo, info := st.CachedInfo(), cons.CachedInfo()
	if sinfo.State.LastSeq < published {
		return fmt.Errorf("%s holds %d of the %d messages published", stream, sinfo.State.LastSeq, published)
	}
	if info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream >= sinfo.State.LastSeq {
		return nil
	}
	return fmt.Errorf("%s: ack pending %d, pending %d, ack floor %d of %d", durable, info.NumAckPending, info.NumPending, info.AckFloor.Stream, sinfo.State.LastSeq)
}
