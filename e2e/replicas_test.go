package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// Pull consumers the replicas share (their durable names are the services' own business; the test
// identifies them by stream).
const (
	eventsStream = protocol.EventsStream
	acksStream   = protocol.AcksStream
)

// Round bounds of the sharing phase: at least minSharingRounds writes, more (up to maxSharingRounds)
// until every replica of every service has done some of the work.
const (
	minSharingRounds = 4
	maxSharingRounds = 20
	roundsAfterKill  = 4
	fetchesPerRound  = 4
)

// inFlightWrites are written concurrently while replicas are killed, so several events are in flight
// in different replicas when they die.
var inFlightWrites = map[string]any{
	"collectors":  []map[string]any{{"type": "tcp", "name": "in-flight", "address": "127.0.0.1:9"}},
	"labels":      map[string]any{"static": map[string]any{"phase": "kill"}},
	"healthcheck": map[string]any{"interval_seconds": 15, "timeout_seconds": 3},
	"watch_files": map[string]any{"paths": []string{"/etc"}},
	"tracing":     map[string]any{"enabled": false, "sample_ratio": 0.5},
}

// TestReplicas runs two replicas of every service. While all run, the work is shared (every replica
// serves some fetches, resolves, injects, events and acks) and nothing is doubled (each agent gets each
// push once, each ack is delivered to ack-ingest once). Then replica 2 of every service is SIGKILLed
// while several writes are in flight, and nothing is lost: those writes still reach every agent (a cut
// fan-out redone with the same command ids), every later write reaches every agent exactly once, and
// every ack is stored once.
func TestReplicas(t *testing.T) {
	s := startStack(t, stackOptions{replicas: 2, agents: []string{"host-a", "host-b"}})
	agents := s.agentList()
	s.waitOnline(1)
	credID := s.createCredential(2, "pg-main", map[string]string{"username": "monitor", "password": "e2e-replicas-Zq7"})
	port := testinfra.FreePort(t)
	fetchConns := map[string]*nats.Conn{}
	for _, a := range agents {
		fetchConns[a.agentID] = s.agentConn(a)
	}

	// write puts a new collectors list (round n) through config-api replica api.
	write := func(api, n int) int64 {
		return s.putEnvConfig(api, "collectors", []map[string]any{{
			"type": "postgres", "name": "main", "host": "127.0.0.1", "port": port, "database": "app",
			"interval": fmt.Sprintf("%ds", 10+n), "credential_id": credID,
		}})
	}
	// traffic makes the API, resolver, credential and delivery's fetch endpoint work beyond the pushes:
	// GETs of effective configs through both config-api replicas and fetches as the agents.
	traffic := func(apis []int, version int64) {
		for i, a := range agents {
			var eff effectiveConfig
			s.api(apis[i%len(apis)]).mustDo(t, http.MethodGet, "/api/v1/hosts/"+a.hostID+"/agent-configs/collectors", nil, &eff)
			if eff.Version != version {
				t.Errorf("GET effective collectors of %s: version %d, want %d", a.hostname, eff.Version, version)
			}
		}
		for i := range fetchesPerRound {
			a := agents[i%len(agents)]
			reply, err := s.fetchAs(fetchConns[a.agentID], a)
			if err != nil {
				t.Fatal(err)
			}
			if reply.Versions["collectors"] != version {
				t.Errorf("fetch as %s: collectors v%d, want v%d", a.hostname, reply.Versions["collectors"], version)
			}
		}
	}

	// Phase 1: every replica up; write until each has had a share of the work.
	var before []int64
	var share sharing
	for n := 1; n <= maxSharingRounds; n++ {
		api := 1 + n%2
		v := write(api, n)
		before = append(before, v)
		s.waitApplied(api, convergeTimeout, "collectors", v, agents...)
		traffic([]int{1, 2}, v)
		if n < minSharingRounds {
			continue
		}
		share = s.measureSharing()
		if share.complete() {
			break
		}
	}
	t.Logf("work per replica with every replica up:\n%s", share)
	if !share.complete() {
		t.Errorf("after %d writes some replica did no work:\n%s", len(before), share)
	}
	s.assertExactlyOnce(agents, before, true)

	// Phase 2: write several types at once and SIGKILL replica 2 of every service right away, while
	// their events, fan-outs, resolves, injects and acks are in flight; then keep writing through the
	// surviving config-api.
	for _, kind := range serviceNames {
		s.obs.stopWatching(s.replica(kind, 2).name)
	}
	inFlight := s.writeWhileKilling(inFlightWrites, func() {
		for _, kind := range serviceNames {
			s.replica(kind, 2).proc.kill(t)
		}
	})
	t.Logf("killed replica 2 of every service while writing %s", jsonString(inFlight))
	for _, typ := range sortedKeys(inFlight) {
		s.waitApplied(1, recoverTimeout, typ, inFlight[typ], agents...)
		s.assertInFlightSurvived(agents, typ, inFlight[typ])
	}
	var after []int64
	for n := 101; n < 101+roundsAfterKill; n++ {
		v := write(1, n)
		after = append(after, v)
		s.waitApplied(1, recoverTimeout, "collectors", v, agents...)
		traffic([]int{1}, v)
	}
	s.assertExactlyOnce(agents, after, false)
	latest := maps.Clone(inFlight)
	latest["collectors"] = after[len(after)-1]
	s.assertApplyRows(agents, latest)
	for _, name := range []string{protocol.ResolverServiceName, protocol.CredentialServiceName, "delivery"} {
		if got := s.obs.serviceStats(name, 2); len(got) != 1 {
			t.Errorf("$SRV.STATS.%s after the kill: %d instances answered, want the 1 survivor", name, len(got))
		}
	}
	s.waitConverged(1, recoverTimeout)
	if err := s.alive(); err != nil {
		t.Fatal(err)
	}
}

// sharing is how much work each replica did, per kind of work.
type sharing map[string]map[string]int // work -> replica -> count

func (sh sharing) complete() bool {
	if len(sh) == 0 {
		return false
	}
	for _, per := range sh {
		if len(per) < 2 {
			return false
		}
		for _, n := range per {
			if n == 0 {
				return false
			}
		}
	}
	return true
}

func (sh sharing) String() string {
	var b strings.Builder
	for _, work := range sortedKeys(sh) {
		fmt.Fprintf(&b, "  %-28s", work)
		for _, r := range sortedKeys(sh[work]) {
			fmt.Fprintf(&b, " %s=%d", r, sh[work][r])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// measureSharing collects, per replica: requests served by the micro services' endpoints ($SRV.STATS),
// config-change events and acks handed to it by JetStream (seen on its pull consumer's inbox), and
// events it logged as pushed.
func (s *stack) measureSharing() sharing {
	sh := sharing{}
	add := func(work, replica string, n int) {
		if sh[work] == nil {
			sh[work] = map[string]int{}
		}
		sh[work][replica] += n
	}
	for _, m := range []struct{ service, endpoint string }{
		{protocol.ResolverServiceName, ""},
		{protocol.CredentialServiceName, "inject"},
		{"delivery", "fetch"},
	} {
		work := m.service + " requests"
		if m.endpoint != "" {
			work = m.service + " " + m.endpoint + " requests"
		}
		for _, is := range s.obs.serviceStats(m.service, 2) {
			add(work, is.replica, is.requests(m.endpoint))
		}
	}
	s.obs.resolveOwners()
	for _, d := range s.obs.deliveriesOf(eventsStream) {
		add("delivery events (JetStream)", s.obs.owner(d.inbox), 1)
	}
	for _, d := range s.obs.deliveriesOf(acksStream) {
		add("ack-ingest acks (JetStream)", s.obs.owner(d.inbox), 1)
	}
	for _, svc := range s.services["delivery"] {
		add("delivery 'push done' logs", svc.name, len(svc.proc.logLines("push done")))
	}
	for _, svc := range s.services["config-api"] {
		add("config-api http requests", svc.name, len(svc.proc.logLines("http request")))
	}
	return sh
}

// assertExactlyOnce checks, for each version, that every agent received exactly one command (as seen on
// NATS and in the agent's own log) and published exactly one ack, and that JetStream handed each ack and each event to one replica once
// (strict: also no redelivery at all, for the phase where no replica died).
func (s *stack) assertExactlyOnce(agents []*agent, versions []int64, strict bool) {
	t := s.t
	t.Helper()
	for _, v := range versions {
		for _, a := range agents {
			cmds := s.obs.commandsFor(a.agentID, "collectors", v)
			if len(cmds) != 1 {
				ids := make([]string, len(cmds))
				for i, c := range cmds {
					ids[i] = c.cmd.CommandID
				}
				t.Errorf("%s received %d commands for collectors v%d (ids %v), want exactly 1", a.hostname, len(cmds), v, ids)
			}
			if n := a.appliedCount("collectors", v); n != 1 {
				t.Errorf("%s logged 'config applied' %d times for collectors v%d, want exactly 1", a.hostname, n, v)
			}
			if n := s.obs.acksFor(a.agentID, "collectors", v); n != 1 {
				t.Errorf("%s published %d acks for collectors v%d, want exactly 1", a.hostname, n, v)
			}
		}
	}
	// Acks of these versions as JetStream delivered them to ack-ingest replicas.
	type ackKey struct {
		agentID string
		version int64
	}
	seen := map[ackKey][]jsDelivery{}
	for _, d := range s.obs.deliveriesOf(acksStream) {
		var ack protocol.Ack
		if json.Unmarshal(d.data, &ack) != nil || ack.ConfigType != "collectors" || !slices.Contains(versions, ack.Version) {
			continue
		}
		k := ackKey{ack.AgentID, ack.Version}
		seen[k] = append(seen[k], d)
	}
	for _, v := range versions {
		for _, a := range agents {
			ds := seen[ackKey{a.agentID, v}]
			switch {
			case len(ds) == 0:
				t.Errorf("the ack of %s for collectors v%d was never delivered to an ack-ingest replica", a.hostname, v)
			case len(ds) > 1 || ds[0].numDelivered != 1:
				t.Errorf("the ack of %s for collectors v%d was delivered %d times (last delivery count %d), want once",
					a.hostname, v, len(ds), ds[len(ds)-1].numDelivered)
			}
		}
	}
	if strict {
		for _, stream := range []string{eventsStream, acksStream} {
			bySeq := map[uint64]int{}
			for _, d := range s.obs.deliveriesOf(stream) {
				bySeq[d.streamSeq]++
				if d.numDelivered != 1 {
					t.Errorf("%s message %d was redelivered (delivery %d to %s) while every replica was up", stream, d.streamSeq, d.numDelivered, s.obs.owner(d.inbox))
				}
			}
			for seq, n := range bySeq {
				if n > 1 {
					t.Errorf("%s message %d was handed out %d times while every replica was up", stream, seq, n)
				}
			}
		}
	}
}

// writeWhileKilling writes every config of writes concurrently through config-api replica 1 and calls
// kill as soon as the first write is committed, while the others are being written, relayed and
// fanned out. It returns the version of each write.
func (s *stack) writeWhileKilling(writes map[string]any, kill func()) map[string]int64 {
	s.t.Helper()
	type result struct {
		typ string
		r   apiResponse
		row configRow
	}
	results := make(chan result, len(writes))
	first := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for typ, data := range writes {
		wg.Go(func() {
			r := s.api(1).do(http.MethodPut, "/api/v1/environments/"+s.envID+"/agent-configs/"+typ, map[string]any{"config_data": data})
			res := result{typ: typ, r: r}
			if r.err == nil && r.status == http.StatusOK {
				res.r.err = r.data(&res.row)
			}
			results <- res
			once.Do(func() { close(first) })
		})
	}
	<-first
	kill()
	wg.Wait()
	close(results)
	out := map[string]int64{}
	for res := range results {
		if res.r.err != nil || res.r.status != http.StatusOK || res.row.Version <= 0 {
			s.t.Fatalf("write while killing replicas failed: %s", res.r)
		}
		out[res.typ] = res.row.Version
	}
	return out
}

// assertInFlightSurvived checks a write made just before the kill: it reached every agent, at most
// redelivered as the very same command (same command_id) when its fan-out was cut short.
func (s *stack) assertInFlightSurvived(agents []*agent, configType string, version int64) {
	s.t.Helper()
	for _, a := range agents {
		cmds := s.obs.commandsFor(a.agentID, configType, version)
		ids := map[string]bool{}
		for _, c := range cmds {
			ids[c.cmd.CommandID] = true
		}
		switch {
		case len(cmds) == 0:
			s.t.Errorf("%s never received a command for %s v%d, written just before the kill", a.hostname, configType, version)
		case len(ids) != 1:
			s.t.Errorf("%s received %s v%d as %d different commands %v, want one (a redone fan-out reuses the id)",
				a.hostname, configType, version, len(ids), sortedKeys(ids))
		case len(cmds) > 1:
			s.t.Logf("%s received %s v%d %d times, same command id (a fan-out redone after the kill)", a.hostname, configType, version, len(cmds))
		}
	}
}

// assertApplyRows checks host_config_apply_status directly: exactly one row per host and written type,
// applied at the latest version, and no other rows.
func (s *stack) assertApplyRows(agents []*agent, latest map[string]int64) {
	s.t.Helper()
	for _, a := range agents {
		rows, err := s.db.Query(context.Background(),
			`SELECT config_type, count(*), max(version), max(status) FROM host_config_apply_status WHERE host_id = $1 GROUP BY config_type`,
			a.hostID)
		if err != nil {
			s.t.Fatalf("query host_config_apply_status: %v", err)
		}
		got := map[string]string{}
		for rows.Next() {
			var typ, status string
			var n, v int64
			if err := rows.Scan(&typ, &n, &v, &status); err != nil {
				s.t.Fatalf("scan host_config_apply_status: %v", err)
			}
			got[typ] = fmt.Sprintf("%d row(s) v%d %s", n, v, status)
		}
		if err := rows.Err(); err != nil {
			s.t.Fatalf("query host_config_apply_status: %v", err)
		}
		want := map[string]string{}
		for typ, v := range latest {
			want[typ] = fmt.Sprintf("1 row(s) v%d %s", v, protocol.AckApplied)
		}
		if !maps.Equal(got, want) {
			s.t.Errorf("host_config_apply_status of %s:\n got  %s\n want %s", a.hostname, jsonString(got), jsonString(want))
		}
	}
}
