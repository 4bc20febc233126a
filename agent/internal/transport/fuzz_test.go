package transport

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/protocol"
)

// FuzzFetchReply answers the agent's config fetch with arbitrary bytes over a real (embedded)
// nats-server: Fetch never panics and never returns a nil reply without an error; it succeeds exactly
// when the bytes decode into a fetch reply that carries no error.
func FuzzFetchReply(f *testing.F) {
	for _, seed := range []string{
		`{"configs":{"labels":{"static":{"env":"prod"}}},"versions":{"labels":3},"secret_fields":{"collectors":["/0/password"]}}`,
		`{"error":{"code":"not_found","message":"unknown agent"}}`,
		`{"error":{}}`, `{"error":null}`, `{"configs":[]}`, `{"versions":{"labels":"3"}}`,
		`{}`, `null`, `[]`, ``, `{`, "\xff",
	} {
		f.Add([]byte(seed))
	}
	const agentID = "agent-fuzz"
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		f.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		f.Fatal("nats-server not ready")
	}
	f.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })

	backend, err := nats.Connect(srv.ClientURL())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(backend.Close)
	var (
		mu    sync.Mutex
		reply []byte
	)
	if _, err := backend.Subscribe(protocol.FetchSubject(agentID), func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		_ = m.Respond(reply)
	}); err != nil {
		f.Fatal(err)
	}
	if err := backend.Flush(); err != nil {
		f.Fatal(err)
	}
	c, err := Connect(Options{AgentID: agentID, URL: srv.ClientURL(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(c.nc.Close)

	f.Fuzz(func(t *testing.T, data []byte) {
		mu.Lock()
		reply = data
		mu.Unlock()
		// The bound only guards a hung test; nothing asserts on timing.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, err := c.Fetch(ctx)
		var want protocol.FetchReply
		ok := json.Unmarshal(data, &want) == nil && want.Error == nil
		switch {
		case err == nil && got == nil:
			t.Fatal("nil reply without an error")
		case err == nil && !ok:
			t.Fatalf("reply %q accepted", data)
		case err != nil && ok:
			t.Fatalf("reply %q refused: %v", data, err)
		}
	})
}
