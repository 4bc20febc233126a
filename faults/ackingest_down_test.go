package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// TestAckIngestDownWhileAgentsReport stops ack-ingest, has agents acknowledge a push and send several
// heartbeats while it is away, and starts a new ack-ingest.
//
// Setup: everything in-process with five fake agents. In-process is faithful here: an ack-ingest that
// is down, crashed or stopped is simply not consuming, and what has to hold is that agents' plain NATS
// publishes are kept by the CONFIGSYNC_ACKS and CONFIGSYNC_HEARTBEATS streams until a consumer returns.
//
// Proves: nothing is written while it is down, and afterwards every ack lands in
// host_config_apply_status and every host carries its latest heartbeat (hash, per-type versions),
// with the ack stream drained.
func TestAckIngestDownWhileAgentsReport(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startResolver(nil)
	s.startCredential(nil)
	s.startDelivery(nil)
	ingest := s.startAckIngest()
	s.startRelay()
	api := s.startAPI()
	ten := api.newTenant("ack-ingest-down")
	hosts := api.registerHosts(ten.EnvID, "node", 5)
	fakes := newFakeAgents(t, s.nc, hosts)
	s.bringOnline(fakes, hosts)

	ingest.shutdown(t)

	const typ = "labels"
	v := api.putEnv(ten.EnvID, typ, `{"static":{"tier":"gold"}}`)
	waitReceived(t, 30*time.Second, fakes, typ, v) // each fake acknowledges what it receives
	for round := 1; round <= 3; round++ {
		for _, a := range fakes {
			a.heartbeat(t, fmt.Sprintf("hash-%s-%d", a.id[:8], round), map[string]int64{typ: v, "intervals": int64(round)})
		}
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testinfra.EventuallyNoError(t, 10*time.Second, func() error {
		n := s.streamMsgs(protocol.AcksStream)
		if n >= uint64(len(fakes)) {
			return nil
		}
		return fmt.Errorf("%d acks stored", n)
	}, "the acks to wait in CONFIGSYNC_ACKS")
	for _, h := range hosts {
		if a := s.applyStatus(h.ID, typ); a.Found {
			t.Fatalf("an ack was written while ack-ingest was down: %+v", a)
		}
	}

	s.startAckIngest()
	s.waitApplied(30*time.Second, hosts, typ, v)
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		for i, h := range hosts {
			hash, versions := s.heartbeatState(h.ID)
			want := fmt.Sprintf("hash-%s-3", fakes[i].id[:8])
			if hash != want || versions[typ] != v || versions["intervals"] != 3 {
				return fmt.Errorf("host %s: hash %q versions %v, want %q", h.ID, hash, versions, want)
			}
		}
		return nil
	}, "every host's latest heartbeat to be stored")
	testinfra.EventuallyNoError(t, 20*time.Second, func() error {
		n := s.streamMsgs(protocol.AcksStream)
		if n == 0 {
			return nil
		}
		return fmt.Errorf("%d acks left", n)
	}, "the ack stream to be drained")
}

// streamMsgs is the number of messages in a stream.
func (s *stack) streamMsgs(stream string) uint64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		s.t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		s.t.Fatalf("stream %s info: %v", stream, err)
	}
	return info.State.Msgs
}

// heartbeatState is what the host's last stored heartbeat reported.
func (s *stack) heartbeatState(hostID string) (string, map[string]int64) {
	s.t.Helper()
	var hash *string
	var raw []byte
	if err := s.db.QueryRow(context.Background(), `SELECT config_hash, config_versions FROM hosts WHERE id = $1`, hostID).Scan(&hash, &raw); err != nil {
		s.t.Fatalf("read host: %v", err)
	}
	versions := map[string]int64{}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &versions)
	}
	if hash == nil {
		return "", versions
	}
	return *hash, versions
}
