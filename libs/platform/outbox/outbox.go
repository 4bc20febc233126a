// Package outbox is ConfigSync's transactional outbox. Writers Insert an event in the same transaction
// as the change it announces; the Relay publishes committed rows to JetStream.
//
// Delivery guarantee: every committed row is published at least once, and in practice exactly once:
//   - a relay claims rows with SELECT ... FOR UPDATE SKIP LOCKED and keeps them locked until the
//     transaction marking them published commits, so concurrent relays never work on the same row;
//   - each message carries Nats-Msg-Id "outbox-<id>", so if a relay dies after JetStream acknowledged a
//     message but before its commit, the republished copy is dropped by the stream's duplicate window.
//
// A rolled-back writer transaction leaves no row, so nothing is published. The relay wakes on the
// NOTIFY the row's trigger sends at commit (channel configsync_outbox) and polls as a fallback.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/configsync/configsync/libs/platform/outbox/sqlcdb"
	"github.com/configsync/configsync/libs/platform/tracing"
	"github.com/configsync/configsync/libs/protocol"
)

// NotifyChannel is the PostgreSQL channel the outbox trigger notifies on insert.
const NotifyChannel = "configsync_outbox"

// MsgIDPrefix prefixes the outbox id in each message's Nats-Msg-Id header.
const MsgIDPrefix = "outbox-"

// MsgID returns the Nats-Msg-Id of outbox row id.
func MsgID(id int64) string { return MsgIDPrefix + strconv.FormatInt(id, 10) }

// MaxPayload is the largest payload Insert accepts: NATS' default max_payload (1 MiB) less room for
// headers. A larger row could never be published and, since a relay publishes in id order and stops at
// the first failure, would hold back every later row.
const MaxPayload = 1<<20 - 4<<10

// ErrInvalidSubject reports a subject the relay could never publish to the events stream.
var ErrInvalidSubject = errors.New("outbox: subject must be a literal subject under " + protocol.EventsSubjects)

// Insert adds an event to the outbox inside the caller's transaction and returns its id. payload is
// marshalled to JSON unless it already is JSON ([]byte or json.RawMessage). The subject must fall under
// configsync.events.> (the CONFIGSYNC_EVENTS stream) and the payload fit MaxPayload: a row JetStream
// can never accept would be retried forever.
func Insert(ctx context.Context, tx pgx.Tx, subject string, payload any) (int64, error) {
	if err := validSubject(subject); err != nil {
		return 0, err
	}
	data, err := protocol.EncodeJSON(payload)
	if err != nil {
		return 0, fmt.Errorf("outbox: marshal payload: %w", err)
	}
	if !json.Valid(data) {
		return 0, errors.New("outbox: payload is not valid JSON")
	}
	if len(data) > MaxPayload {
		return 0, fmt.Errorf("outbox: payload of %d bytes exceeds %d", len(data), MaxPayload)
	}
	p := sqlcdb.InsertOutboxParams{Subject: subject, Payload: data}
	if tp := tracing.Traceparent(ctx); tp != "" {
		p.Traceparent = &tp // the relay continues this trace into the published message
	}
	id, err := sqlcdb.New(tx).InsertOutbox(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("outbox: insert: %w", err)
	}
	return id, nil
}

func validSubject(subject string) error {
	prefix := strings.TrimSuffix(protocol.EventsSubjects, ">")
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok || rest == "" {
		return ErrInvalidSubject
	}
	for tok := range strings.SplitSeq(rest, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return ErrInvalidSubject
		}
	}
	return nil
}
