package configapi_test

import (
	"net/http"
	"net/url"
	"testing"
)

// benchHosts is the size of the environment the console benchmark renders.
const benchHosts = 10_000

// seedFleet fills tenant tn's environment up to n hosts straight in SQL (registration through the API
// would take minutes): every host has heartbeat state, the expected config hash and three acknowledged
// types, and inventory labels (role, region, rack); every 50th has a failed apply, every 7th an old
// heartbeat, every 100th a labels override (so it reports a labels version behind its effective one and
// the environment's hash: drifted); the environment has three configs.
func seedFleet(h *harness, tn tenant, n int) {
	env := tn.env.String()
	for _, doc := range []struct{ typ, data string }{
		{"labels", `{"static": {"team": "payments", "tier": "web"}}`},
		{"intervals", `{"heartbeat": "30s", "metrics": "60s"}`},
		{"watch_files", `{"paths": ["/etc", "/opt"], "exclude_patterns": ["*.log"]}`},
	} {
		h.must(http.StatusOK, "PUT", "/api/v1/environments/"+env+"/agent-configs/"+doc.typ, h.admin, `{"config_data": `+doc.data+`}`)
	}
	// The hash an agent holding the environment's configs reports: the drift report's expected hash for
	// the tenant's one host (which has not reported yet).
	var report struct {
		Hosts []struct {
			ExpectedHash string `json:"expected_hash"`
		} `json:"hosts"`
	}
	h.must(http.StatusOK, "GET", "/api/v1/environments/"+env+"/drift", h.admin, nil).data(h.t, &report)
	if len(report.Hosts) != 1 || report.Hosts[0].ExpectedHash == "" {
		h.t.Fatalf("drift report of the fresh environment: %+v", report)
	}
	h.exec(`INSERT INTO hosts (client_id, environment_id, hostname, agent_id, agent_version, config_hash, config_version,
	            config_versions, last_heartbeat_at, inventory_labels)
	        SELECT $1, $2, 'web-' || lpad(i::text, 5, '0') || '.example.internal', 'bench-agent-' || i, '1.0.0',
	               $4, 3, '{"labels": 1, "intervals": 2, "watch_files": 3}',
	               CASE WHEN i % 7 = 0 THEN now() - interval '1 hour' ELSE now() END,
	               jsonb_build_object('role', (ARRAY['web', 'db'])[i % 2 + 1], 'region', (ARRAY['eu', 'us', 'ap'])[i % 3 + 1],
	                                  'rack', 'r' || lpad((i % 100)::text, 3, '0'))
	        FROM generate_series(1, $3::int) AS i`, tn.client, tn.env, n-1, report.Hosts[0].ExpectedHash)
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at)
	        SELECT h.id, t.typ, t.v,
	               CASE WHEN t.typ = 'watch_files' AND h.agent_id ~ '[05]0$' THEN 'failed' ELSE 'applied' END,
	               CASE WHEN t.typ = 'watch_files' AND h.agent_id ~ '[05]0$' THEN 'path /opt denied by policy' END, now()
	        FROM hosts h CROSS JOIN (VALUES ('labels', 1), ('intervals', 2), ('watch_files', 3)) AS t(typ, v)
	        WHERE h.environment_id = $1`, tn.env)
	h.exec(`INSERT INTO host_configs (host_id, config_type, config_data, version, updated_by)
	        SELECT id, 'labels', '{"static": {"rack": "r1"}}', nextval('config_version_seq'), 'bench'
	        FROM hosts WHERE environment_id = $1 AND agent_id ~ '00$'`, tn.env)
	h.exec(`ANALYZE`)
}

// BenchmarkConsolePages renders every console page (server time: the request through the handler, as
// an httptest round trip on loopback) over an environment of 10,000 hosts, on real PostgreSQL with the
// real resolver and credential services.
//
//	go test -run '^$' -bench ConsolePages -benchtime 20x .
func BenchmarkConsolePages(b *testing.B) {
	h, tn := newTenantHarness(b, "bench")
	seedFleet(h, tn, benchHosts)
	if n := h.count(`SELECT count(*) FROM hosts WHERE environment_id = $1`, tn.env); n != benchHosts {
		b.Fatalf("seeded %d hosts, want %d", n, benchHosts)
	}
	var host string
	if err := h.pool.QueryRow(b.Context(), `SELECT id::text FROM hosts WHERE agent_id = 'bench-agent-500'`).Scan(&host); err != nil {
		b.Fatal(err)
	}
	// The fleet stats the overview shows and the drifted filter reads, as the fleet metrics lease holder
	// computes them each period (its cost is measured below, not per page).
	h.refreshFleetStats()
	if n := h.count(`SELECT count(*) FROM host_drift WHERE environment_id = $1`, tn.env); n < benchHosts/100 {
		b.Fatalf("%d drifted hosts after the drift pass, want at least the %d with overrides", n, benchHosts/100)
	}
	c := h.signIn(h.admin)
	env := tn.env.String()
	after := url.Values{"env": {env}, "after": {"web-05000.example.internal"}, "after_id": {host}}.Encode()
	pages := []struct{ name, path string }{
		{"overview", "/ui/"},
		{"overview_fragment", "/ui/fragments/overview/" + env},
		{"hosts_first_page", "/ui/hosts?env=" + env},
		{"hosts_deep_page", "/ui/hosts?" + after},
		{"hosts_failed_filter", "/ui/hosts?env=" + env + "&status=failed"},
		{"hosts_drifted_filter", "/ui/hosts?env=" + env + "&status=drifted"},
		{"hosts_hostname_filter", "/ui/hosts?env=" + env + "&hostname=web-09"},
		{"hosts_label_filter", "/ui/hosts?env=" + env + "&" + url.Values{"selector": {"role=web,region in (eu,us)"}}.Encode()},
		{"hosts_label_filter_rare", "/ui/hosts?env=" + env + "&" + url.Values{"selector": {"rack in (r042,r043),role=db"}}.Encode()},
		{"host_detail", "/ui/hosts/" + host},
		{"env_editor", "/ui/environments/" + env + "/configs/labels"},
		{"host_editor", "/ui/hosts/" + host + "/configs/labels"},
		{"revisions", "/ui/environments/" + env + "/configs/labels/revisions"},
		{"apply_progress", "/ui/environments/" + env + "/configs/watch_files/progress"},
		{"host_apply_progress", "/ui/hosts/" + host + "/configs/labels/progress"},
		{"credentials", "/ui/credentials?client=" + tn.client.String()},
		{"audit", "/ui/audit"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				if r := c.get(p.path); r.status != http.StatusOK {
					b.Fatalf("GET %s: %d: %s", p.path, r.status, r.body)
				}
			}
		})
	}
	// The periodic computation of every environment's fleet stats, the drift report of 10,000 hosts
	// included (not a page: the lease holder runs it once per CONFIGAPI_FLEET_METRICS_INTERVAL).
	b.Run("fleet_stats_refresh", func(b *testing.B) {
		for b.Loop() {
			h.refreshFleetStats()
		}
	})
	// A staged rollout of intervals whose first stage holds half the environment (5,000 hosts): its
	// detail page counts every stage's hosts from their acks and heartbeats; the list shows it too.
	var ro struct {
		ID string `json:"id"`
	}
	h.must(http.StatusCreated, "POST", "/api/v1/environments/"+env+"/agent-configs/intervals/rollouts", h.admin,
		`{"config_data": {"heartbeat": "20s", "metrics": "60s"}, "plan": {"stages": [{"percent": 50}, {"percent": 100}], "bake_seconds": 3600}}`).data(b, &ro)
	for _, p := range []struct{ name, path string }{
		{"rollout_detail", "/ui/environments/" + env + "/configs/intervals/rollouts/" + ro.ID},
		{"rollouts_list", "/ui/environments/" + env + "/configs/intervals/rollouts"},
	} {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				if r := c.get(p.path); r.status != http.StatusOK {
					b.Fatalf("GET %s: %d: %s", p.path, r.status, r.body)
				}
			}
		})
	}
	// The dry run of an environment change (10,000 affected hosts, 50 shown with their diff).
	b.Run("dry_run", func(b *testing.B) {
		form := url.Values{"config_data": {`{"static": {"team": "checkout"}}`}}
		for b.Loop() {
			if r := c.post("/ui/environments/"+env+"/configs/labels/dry-run", form); r.status != http.StatusOK {
				b.Fatalf("dry run: %d: %s", r.status, r.body)
			}
		}
	})
}
