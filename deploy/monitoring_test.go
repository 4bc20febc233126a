package deploy

import (
	"encoding/json"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

// metricsPort is the port of addr (METRICS_ADDR), failing t when it has none or shares HTTP_ADDR's.
func metricsPort(t *testing.T, where, metricsAddr, httpAddr string) string {
	t.Helper()
	_, mp, err := net.SplitHostPort(metricsAddr)
	if err != nil || mp == "" {
		t.Errorf("%s: METRICS_ADDR %q has no port (metrics would be off): %v", where, metricsAddr, err)
		return ""
	}
	if _, hp, _ := net.SplitHostPort(httpAddr); hp == mp {
		t.Errorf("%s: METRICS_ADDR %q shares the public HTTP_ADDR port", where, metricsAddr)
	}
	return mp
}

// TestComposePrometheusScrapesEveryService: every service replica serves /metrics on METRICS_ADDR
// (not on HTTP_ADDR), and deploy/prometheus/prometheus.yml scrapes each of the five services there.
func TestComposePrometheusScrapesEveryService(t *testing.T) {
	p := loadCompose(t)
	ports := map[string]string{}
	for _, name := range sortedServiceNames(p) {
		svc := p.Services[name]
		// The long-running services (bootstrap-token runs the config-api image once and exits).
		if bin := composeBinary(t, svc); !slices.Contains(services, bin) || name != bin {
			continue
		}
		get := func(k string) string {
			if v := svc.Environment[k]; v != nil {
				return *v
			}
			return ""
		}
		ports[name] = metricsPort(t, "compose service "+name, get("METRICS_ADDR"), get("HTTP_ADDR"))
	}
	raw, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			MetricsPath string `json:"metrics_path"`
			DNS         []struct {
				Names []string `json:"names"`
				Type  string   `json:"type"`
				Port  int      `json:"port"`
			} `json:"dns_sd_configs"`
		} `json:"scrape_configs"`
	}
	if err := sigsyaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	scraped := map[string]string{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, d := range sc.DNS {
			for _, n := range d.Names {
				scraped[n] = strconv.Itoa(d.Port)
				if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
					t.Errorf("prometheus.yml scrapes %s on %s, want /metrics", n, sc.MetricsPath)
				}
			}
		}
	}
	for _, s := range services {
		if scraped[s] == "" {
			t.Errorf("prometheus.yml does not scrape %s", s)
		} else if scraped[s] != ports[s] {
			t.Errorf("prometheus.yml scrapes %s on port %s, METRICS_ADDR listens on %s", s, scraped[s], ports[s])
		}
	}
}

// TestKubernetesPodsAreAnnotatedForScraping: every Deployment's pods carry prometheus.io/scrape, port
// and path annotations matching METRICS_ADDR, and declare that container port.
func TestKubernetesPodsAreAnnotatedForScraping(t *testing.T) {
	m := renderBase(t)
	for _, svc := range services {
		d, ok := m.deployments[svc]
		if !ok || len(d.Spec.Template.Spec.Containers) != 1 {
			t.Errorf("no single-container Deployment %s", svc)
			continue
		}
		where := "Deployment " + svc
		c := d.Spec.Template.Spec.Containers[0]
		env := containerEnv(t, m, where, c)
		port := metricsPort(t, where, env["METRICS_ADDR"], env["HTTP_ADDR"])
		a := d.Spec.Template.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != port || a["prometheus.io/path"] != "/metrics" {
			t.Errorf("%s: pod annotations %v, want prometheus.io/scrape true, port %s, path /metrics", where, a, port)
		}
		declared := false
		for _, cp := range c.Ports {
			declared = declared || strconv.Itoa(int(cp.ContainerPort)) == port
		}
		if !declared {
			t.Errorf("%s declares no container port %s", where, port)
		}
	}
}

// TestGrafanaDashboard: the dashboard is valid JSON whose panels query the families an on-call needs
// (fleet online, drift, push latency, fetch errors, ingest lag, outbox age, how full the JetStream
// streams are and the consumers' backlog), all ConfigSync names.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana/dashboards/configsync.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	used := map[string]bool{}
	name := regexp.MustCompile(`configsync_[a-z_]+`)
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			for _, n := range name.FindAllString(q.Expr, -1) {
				used[n] = true
			}
		}
	}
	for _, want := range []string{
		"configsync_fleet_hosts_online", "configsync_fleet_hosts_drifted", "configsync_fleet_hosts_failed_apply",
		"configsync_consumer_handle_duration_seconds_bucket", "configsync_rpc_requests_total",
		"configsync_consumer_lag_seconds_bucket", "configsync_outbox_oldest_age_seconds",
		"configsync_stream_bytes", "configsync_stream_max_bytes", "configsync_consumer_pending_messages",
	} {
		if !used[want] {
			t.Errorf("the dashboard never queries %s", want)
		}
	}
	if d.UID == "" {
		t.Error("the dashboard has no uid (provisioning would duplicate it)")
	}
}
