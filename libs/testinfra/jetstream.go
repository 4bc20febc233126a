package testinfra

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream returns a JetStream context on nc. When setup is not nil it runs first, within 10 seconds:
// the caller passes natsconn.EnsureStreams for ConfigSync's streams (testinfra does not import the
// platform, whose own tests use testinfra).
func JetStream(t testing.TB, nc *nats.Conn, setup func(context.Context, jetstream.JetStream) error) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("testinfra: JetStream: %v", err)
	}
	if setup != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := setup(ctx, js); err != nil {
			t.Fatalf("testinfra: JetStream set-up: %v", err)
		}
	}
	return js
}
