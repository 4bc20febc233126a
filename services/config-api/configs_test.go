package configapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/platform/outbox"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

type configRow struct {
	ID            uuid.UUID       `json:"id"`
	EnvironmentID *uuid.UUID      `json:"environment_id"`
	HostID        *uuid.UUID      `json:"host_id"`
	ConfigType    string          `json:"config_type"`
	ConfigData    json.RawMessage `json:"config_data"`
	Version       int64           `json:"version"`
	DeletedAt     *string         `json:"deleted_at"`
}

type effective struct {
	ConfigType         string          `json:"config_type"`
	ConfigData         json.RawMessage `json:"config_data"`
	Version            int64           `json:"version"`
	Source             string          `json:"source"`
	EnvironmentVersion *int64          `json:"environment_version"`
	HostVersion        *int64          `json:"host_version"`
	Provenance         json.RawMessage `json:"provenance"`
}

func jsonEqual(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got is not JSON: %s", got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want is not JSON: %s", want)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Fatalf("JSON differs:\n got %s\nwant %s", gb, wb)
	}
}

// TestSpecPutEnvironmentConfigExample is the spec's PUT example, answer shape included.
func TestSpecPutEnvironmentConfigExample(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	path := envConfigPath(a.env, "watch_files")
	body := `{"config_data": {"paths": ["/etc", "/opt"], "exclude_patterns": ["*.log"]}}`
	r := h.must(200, "PUT", path, a.token, body)

	var raw struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "environment_id", "config_type", "config_data", "version"} {
		if _, ok := raw.Data[k]; !ok {
			t.Errorf("PUT answer lacks %q: %s", k, r.body)
		}
	}
	var row configRow
	r.data(t, &row)
	if row.ConfigType != "watch_files" || row.EnvironmentID == nil || *row.EnvironmentID != a.env || row.Version < 1 {
		t.Fatalf("unexpected row %+v", row)
	}
	jsonEqual(t, row.ConfigData, `{"paths": ["/etc", "/opt"], "exclude_patterns": ["*.log"]}`)
	if got := r.header.Get("ETag"); got != strconv.Quote(strconv.FormatInt(row.Version, 10)) {
		t.Fatalf("ETag %q for version %d", got, row.Version)
	}

	g := h.must(200, "GET", path, a.token, nil)
	var got configRow
	g.data(t, &got)
	if got.Version != row.Version || g.header.Get("ETag") != r.header.Get("ETag") {
		t.Fatalf("GET %+v (ETag %s) differs from PUT %+v", got, g.header.Get("ETag"), row)
	}
	var list []configRow
	h.must(200, "GET", "/api/v1/environments/"+a.env.String()+"/agent-configs", a.token, nil).data(t, &list)
	if len(list) != 1 || list[0].ConfigType != "watch_files" {
		t.Fatalf("list = %+v", list)
	}
}

// TestHostResolutionCases covers the spec's four resolution cases through the real resolver.
func TestHostResolutionCases(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	envPath := func(typ string) string { return "/api/v1/environments/" + a.env.String() + "/agent-configs/" + typ }
	hostPath := func(typ string) string { return "/api/v1/hosts/" + a.host.String() + "/agent-configs/" + typ }

	// Environment only.
	var envRow configRow
	h.must(200, "PUT", envPath("intervals"), a.token, map[string]any{"config_data": map[string]any{"metrics": "30s", "heartbeat": "15s"}}).data(t, &envRow)
	var ec effective
	r := h.must(200, "GET", hostPath("intervals"), a.token, nil)
	r.data(t, &ec)
	if ec.Source != "environment" || ec.Version != envRow.Version {
		t.Fatalf("environment only: %+v", ec)
	}
	jsonEqual(t, ec.ConfigData, `{"metrics": "30s", "heartbeat": "15s"}`)
	if r.header.Get("ETag") != strconv.Quote(strconv.FormatInt(ec.Version, 10)) {
		t.Fatalf("ETag %q", r.header.Get("ETag"))
	}

	// Host override only.
	var hostRow configRow
	h.must(200, "PUT", hostPath("healthcheck"), a.token, map[string]any{"config_data": map[string]any{"interval_seconds": 60, "timeout_seconds": 5}}).data(t, &hostRow)
	h.must(200, "GET", hostPath("healthcheck"), a.token, nil).data(t, &ec)
	if ec.Source != "host_override" || ec.Version != hostRow.Version {
		t.Fatalf("host only: %+v", ec)
	}
	jsonEqual(t, ec.ConfigData, `{"interval_seconds": 60, "timeout_seconds": 5}`)

	// Both: shallow merge, host keys win, version is the max.
	h.must(200, "PUT", hostPath("intervals"), a.token, map[string]any{"config_data": map[string]any{"metrics": "10s"}}).data(t, &hostRow)
	h.must(200, "GET", hostPath("intervals")+"?explain=true", a.token, nil).data(t, &ec)
	if ec.Source != "merged" || ec.Version != hostRow.Version {
		t.Fatalf("merged: %+v", ec)
	}
	jsonEqual(t, ec.ConfigData, `{"metrics": "10s", "heartbeat": "15s"}`)
	if ec.Provenance == nil || ec.EnvironmentVersion == nil || *ec.EnvironmentVersion != envRow.Version || *ec.HostVersion != hostRow.Version {
		t.Fatalf("explain=true lacks provenance or versions: %+v", ec)
	}
	// Collectors merge by {type, name} through the real resolver.
	h.must(200, "PUT", envPath("collectors"), a.token, map[string]any{"config_data": []any{
		map[string]any{"type": "mysql", "name": "primary", "host": "db1", "port": 3306},
		map[string]any{"type": "redis", "name": "cache", "host": "r1", "port": 6379},
	}})
	h.must(200, "PUT", hostPath("collectors"), a.token, map[string]any{"config_data": []any{
		map[string]any{"type": "mysql", "name": "primary", "host": "db1", "port": 3306, "interval": "30s"},
	}})
	h.must(200, "GET", hostPath("collectors"), a.token, nil).data(t, &ec)
	jsonEqual(t, ec.ConfigData, `[{"type":"mysql","name":"primary","host":"db1","port":3306,"interval":"30s"},{"type":"redis","name":"cache","host":"r1","port":6379}]`)

	// Neither.
	r = h.must(404, "GET", hostPath("tracing"), a.token, nil)
	if r.errCode(t) != "not_found" {
		t.Fatalf("neither: %s", r.body)
	}

	// All effective configs of the host.
	var all []effective
	h.must(200, "GET", "/api/v1/hosts/"+a.host.String()+"/agent-configs", a.token, nil).data(t, &all)
	var types []string
	for _, e := range all {
		types = append(types, e.ConfigType+"="+e.Source)
	}
	if got := strings.Join(types, ","); got != "collectors=merged,healthcheck=host_override,intervals=merged" {
		t.Fatalf("host configs = %s", got)
	}
}

// TestTombstoneVersioning: deleting an override keeps a tombstone with a new version, so the host's
// effective version still increases and the source reverts to the environment.
func TestTombstoneVersioning(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	envPath := envConfigPath(a.env, "watch_files")
	hostPath := hostConfigPath(a.host, "watch_files")

	h.must(200, "PUT", envPath, a.token, `{"config_data": {"paths": ["/etc"]}}`)
	var over configRow
	h.must(200, "PUT", hostPath, a.token, `{"config_data": {"paths": ["/srv"]}}`).data(t, &over)
	var before effective
	h.must(200, "GET", hostPath, a.token, nil).data(t, &before)

	var tomb configRow
	r := h.must(200, "DELETE", hostPath, a.token, nil)
	r.data(t, &tomb)
	if tomb.Version <= over.Version || string(tomb.ConfigData) != "null" || tomb.DeletedAt == nil {
		t.Fatalf("tombstone %+v after override v%d", tomb, over.Version)
	}
	var after effective
	h.must(200, "GET", hostPath, a.token, nil).data(t, &after)
	if after.Source != "environment" || after.Version <= before.Version || after.Version != tomb.Version {
		t.Fatalf("after delete: %+v (before v%d, tombstone v%d)", after, before.Version, tomb.Version)
	}
	jsonEqual(t, after.ConfigData, `{"paths": ["/etc"]}`)

	// Deleting again: there is no override any more.
	h.must(404, "DELETE", hostPath, a.token, nil)

	// Environment delete: a tombstone too, GET is 404 and the host sees nothing.
	var envTomb configRow
	h.must(200, "DELETE", envPath, a.token, nil).data(t, &envTomb)
	if envTomb.Version <= tomb.Version {
		t.Fatalf("env tombstone v%d not after v%d", envTomb.Version, tomb.Version)
	}
	if code := h.must(404, "GET", envPath, a.token, nil).errCode(t); code != "not_found" {
		t.Fatal(code)
	}
	h.must(404, "GET", hostPath, a.token, nil)
	var list []configRow
	h.must(200, "GET", "/api/v1/environments/"+a.env.String()+"/agent-configs", a.token, nil).data(t, &list)
	if len(list) != 0 {
		t.Fatalf("deleted config still listed: %+v", list)
	}
	// Writing again after a tombstone gets a newer version still.
	var again configRow
	h.must(200, "PUT", envPath, a.token, `{"config_data": {"paths": ["/var"]}}`).data(t, &again)
	if again.Version <= envTomb.Version {
		t.Fatalf("rewrite v%d not after tombstone v%d", again.Version, envTomb.Version)
	}
}

// TestLostUpdate: two PUTs with the same If-Match, at the same time: exactly one wins.
func TestLostUpdate(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	for _, path := range configPaths(a, "labels") {
		r := h.must(200, "PUT", path, a.token, `{"config_data": {"static": {"team": "a"}}}`)
		tag := r.header.Get("ETag")
		if path[len("/api/v1/"):][0] == 'h' {
			tag = h.must(200, "GET", path, a.token, nil).header.Get("ETag")
		}
		statuses := make([]int, 2)
		var wg sync.WaitGroup
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := fmt.Sprintf(`{"config_data": {"static": {"team": "writer-%d"}}}`, i)
				statuses[i] = h.do("PUT", path, a.token, body, "If-Match", tag).status
			}()
		}
		wg.Wait()
		if !(statuses[0] == 200 && statuses[1] == 412 || statuses[0] == 412 && statuses[1] == 200) {
			t.Fatalf("%s: statuses %v, want one 200 and one 412", path, statuses)
		}
		// A stale tag on DELETE is refused too; the current one works.
		if code := h.must(412, "DELETE", path, a.token, nil, "If-Match", tag).errCode(t); code != "precondition_failed" {
			t.Fatal(code)
		}
		cur := h.must(200, "GET", path, a.token, nil).header.Get("ETag")
		h.must(200, "DELETE", path, a.token, nil, "If-Match", cur)
	}
}

// TestOneOutboxRowPerWrite: every successful write queues exactly one config-changed event in its
// transaction; refused writes queue none.
func TestOneOutboxRowPerWrite(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	envPath := envConfigPath(a.env, "tracing")
	hostPath := hostConfigPath(a.host, "tracing")
	outbox := func() int { return h.count(`SELECT count(*) FROM outbox`) }

	steps := []struct {
		method, path, body string
		status             int
		deleted            bool
		scope              string
	}{
		{"PUT", envPath, `{"config_data": {"enabled": true, "sample_ratio": 0.5}}`, 200, false, protocol.ScopeEnvironment},
		{"PUT", envPath, `{"config_data": {"enabled": true, "sample_ratio": 7}}`, 400, false, ""},
		{"PUT", envPath + "?dry_run=true", `{"config_data": {"enabled": false}}`, 200, false, ""},
		{"PUT", hostPath, `{"config_data": {"sample_ratio": 0.1}}`, 200, false, protocol.ScopeHost},
		{"DELETE", hostPath, ``, 200, true, protocol.ScopeHost},
		{"DELETE", hostPath, ``, 404, false, ""},
		{"DELETE", envPath, ``, 200, true, protocol.ScopeEnvironment},
	}
	for i, s := range steps {
		before := outbox()
		var body any
		if s.body != "" {
			body = s.body
		}
		h.must(s.status, s.method, s.path, a.token, body)
		added := outbox() - before
		if s.scope == "" {
			if added != 0 {
				t.Fatalf("step %d (%s %s -> %d) queued %d events", i, s.method, s.path, s.status, added)
			}
			continue
		}
		if added != 1 {
			t.Fatalf("step %d (%s %s) queued %d events, want 1", i, s.method, s.path, added)
		}
		var subject string
		var payload []byte
		if err := h.pool.QueryRow(t.Context(), `SELECT subject, payload FROM outbox ORDER BY id DESC LIMIT 1`).Scan(&subject, &payload); err != nil {
			t.Fatal(err)
		}
		var ev protocol.ConfigChanged
		if err := json.Unmarshal(payload, &ev); err != nil {
			t.Fatal(err)
		}
		if subject != protocol.ConfigChangedSubject || ev.Scope != s.scope || ev.Deleted != s.deleted ||
			ev.ConfigType != "tracing" || ev.ClientID != a.client.String() || ev.EnvironmentID != a.env.String() ||
			ev.Version < 1 || ev.EventID == "" || ev.Actor != "acme-ops" {
			t.Fatalf("step %d: event %s %+v", i, subject, ev)
		}
		if s.scope == protocol.ScopeHost && (ev.HostID != a.host.String() || ev.AgentID != a.agentID) {
			t.Fatalf("step %d: host event without host: %+v", i, ev)
		}
	}
	if n := h.count(`SELECT count(*) FROM config_revisions`); n != 4 {
		t.Fatalf("%d revisions, want 4", n)
	}
}

// TestWriteReachesJetStream: the event a write queues is what the relay publishes on
// configsync.events.config.changed, once, with the outbox id as Nats-Msg-Id.
func TestWriteReachesJetStream(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	var row configRow
	h.must(200, "PUT", hostConfigPath(a.host, "healthcheck"), a.token,
		`{"config_data": {"interval_seconds": 30}}`).data(t, &row)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(h.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := natsconn.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	log, _ := testinfra.Logger(t)
	n, err := outbox.NewRelay(h.pool, js, log, outbox.RelayOptions{}).RelayOnce(ctx)
	if err != nil || n != 1 {
		t.Fatalf("relayed %d, %v; want 1", n, err)
	}
	stream, err := js.Stream(ctx, protocol.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, protocol.ConfigChangedSubject)
	if err != nil {
		t.Fatal(err)
	}
	var ev protocol.ConfigChanged
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Scope != protocol.ScopeHost || ev.AgentID != a.agentID || ev.Version != row.Version || ev.ConfigType != "healthcheck" {
		t.Fatalf("published %+v", ev)
	}
	if msg.Header.Get(jetstream.MsgIDHeader) == "" {
		t.Fatal("published without a Nats-Msg-Id")
	}
}

// TestRevisionsAndRollback: history of both levels, rollback as a new write.
func TestRevisionsAndRollback(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	for _, base := range configPaths(a, "log_shipping") {
		var v1, v2 configRow
		h.must(200, "PUT", base, a.token, `{"config_data": {"enabled": true, "level": "warn"}}`).data(t, &v1)
		h.must(200, "PUT", base, a.token, `{"config_data": {"enabled": true, "level": "debug"}}`).data(t, &v2)
		h.must(200, "DELETE", base, a.token, nil)

		var revs []struct {
			Revision      int64           `json:"revision"`
			Action        string          `json:"action"`
			ConfigData    json.RawMessage `json:"config_data"`
			OldConfigData json.RawMessage `json:"old_config_data"`
			Actor         string          `json:"actor"`
		}
		h.must(200, "GET", base+"/revisions", a.token, nil).data(t, &revs)
		if len(revs) != 3 || revs[0].Action != "delete" || revs[1].Action != "put" || revs[2].Revision != v1.Version || revs[2].Actor != "acme-ops" {
			t.Fatalf("%s revisions: %+v", base, revs)
		}
		jsonEqual(t, revs[1].OldConfigData, `{"enabled": true, "level": "warn"}`)
		if string(revs[0].ConfigData) != "null" {
			t.Fatalf("delete revision has data %s", revs[0].ConfigData)
		}

		var rb configRow
		h.must(200, "POST", base+"/rollback", a.token, map[string]any{"revision": v1.Version}).data(t, &rb)
		if rb.Version <= v2.Version {
			t.Fatalf("rollback version %d not newer than %d", rb.Version, v2.Version)
		}
		jsonEqual(t, rb.ConfigData, `{"enabled": true, "level": "warn"}`)
		h.must(200, "GET", base+"/revisions?limit=1", a.token, nil).data(t, &revs)
		if len(revs) != 1 || revs[0].Action != "rollback" || revs[0].Revision != rb.Version {
			t.Fatalf("after rollback: %+v", revs)
		}
		// Rolling back to a deletion, or to nothing, is refused.
		var all []struct {
			Revision int64  `json:"revision"`
			Action   string `json:"action"`
		}
		h.must(200, "GET", base+"/revisions", a.token, nil).data(t, &all)
		h.must(400, "POST", base+"/rollback", a.token, map[string]any{"revision": all[1].Revision})
		h.must(404, "POST", base+"/rollback", a.token, map[string]any{"revision": 999999})
		h.must(400, "POST", base+"/rollback", a.token, `{"revision": 1, "force": true}`)
	}
}

// TestDryRun: the effective config for affected hosts without writing anything.
func TestDryRun(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	var second idObj
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts", a.token, map[string]any{"hostname": "acme-web-2"}).data(t, &second)
	h.must(200, "PUT", hostConfigPath(second.ID, "agent_settings"), a.token, `{"config_data": {"log_level": "debug"}}`)
	before := h.count(`SELECT count(*) FROM outbox`)

	type dry struct {
		DryRun     bool `json:"dry_run"`
		TotalHosts int  `json:"total_hosts"`
		Hosts      []struct {
			HostID     uuid.UUID       `json:"host_id"`
			Hostname   string          `json:"hostname"`
			ConfigData json.RawMessage `json:"config_data"`
			Source     string          `json:"source"`
		} `json:"hosts"`
	}
	var d dry
	h.must(200, "PUT", "/api/v1/environments/"+a.env.String()+"/agent-configs/agent_settings?dry_run=true", a.token,
		`{"config_data": {"log_level": "info", "memory_limit_mb": 256}}`).data(t, &d)
	if !d.DryRun || d.TotalHosts != 2 || len(d.Hosts) != 2 {
		t.Fatalf("dry run: %+v", d)
	}
	if d.Hosts[0].Hostname != "acme-web-1" || d.Hosts[0].Source != "environment" || d.Hosts[1].Source != "merged" {
		t.Fatalf("dry run hosts: %+v", d.Hosts)
	}
	jsonEqual(t, d.Hosts[1].ConfigData, `{"log_level": "debug", "memory_limit_mb": 256}`)

	h.must(200, "PUT", "/api/v1/hosts/"+a.host.String()+"/agent-configs/agent_settings?dry_run=true", a.token,
		`{"config_data": {"collector_timeout": "5s"}}`).data(t, &d)
	if d.TotalHosts != 1 || d.Hosts[0].Source != "host_override" {
		t.Fatalf("host dry run: %+v", d)
	}
	h.must(400, "PUT", "/api/v1/hosts/"+a.host.String()+"/agent-configs/agent_settings?dry_run=true", a.token,
		`{"config_data": {"nope": 1}}`)
	if n := h.count(`SELECT count(*) FROM outbox`); n != before {
		t.Fatalf("dry runs wrote %d events", n-before)
	}
	h.must(404, "GET", envConfigPath(a.env, "agent_settings"), a.token, nil)
}
