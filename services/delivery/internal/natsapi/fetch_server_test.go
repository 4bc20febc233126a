package natsapi

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

// Workers answer fetches after the micro handler has returned; a burst of refused fetches (answered
// at once by the workers) must each get its error reply, and, under -race, must not race with micro's
// bookkeeping of the request.
func TestConcurrentRefusedFetches(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	log, _ := testinfra.Logger(t)
	// Refused requests never reach the fetcher's upstreams.
	s := NewFetchServer(deliver.NewFetcher(nil, nil, log), FetchOptions{BatchOptions: natsrpc.BatchOptions{Workers: 8}}, log)
	if err := s.Start(nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	client := srv.Connect(t)
	var wg sync.WaitGroup
	errs := make(chan string, 400)
	for i := range 400 {
		wg.Go(func() {
			body := []byte(`{"agent_id":7}`)
			if i%2 == 0 {
				body = []byte(`{"agent_id":"someone-else"}`)
			}
			// The bound only guards a hung test; nothing asserts on timing.
			msg, err := testinfra.RequestAsAgent(client, agent, protocol.FetchSubject(agent), body, 30*time.Second)
			if err != nil {
				errs <- err.Error()
				return
			}
			var r protocol.FetchReply
			code := msg.Header.Get(micro.ErrorCodeHeader)
			if err := json.Unmarshal(msg.Data, &r); err != nil || r.Error == nil || r.Error.Code != code || code == "" {
				errs <- string(msg.Data)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
