package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/natsauth/tlsgen"
	"github.com/configsync/configsync/libs/platform/metrics/metricstest"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/resolver"
)

// TestStackSharesOneRegistry starts the devstack composition (five service modules in one fx app)
// with its metrics listener: no duplicate registration, every service's build info and its families on
// the one listener, the URL written to devstack.env, and nothing on the API port. The banner `make run`
// prints names the console's URL, and signing in there with the printed token opens the console.
func TestStackSharesOneRegistry(t *testing.T) {
	// environment() sets what is unset; restore the test process's environment afterwards.
	for _, k := range []string{"LOG_LEVEL", "LOG_FORMAT", "DATABASE_URL", "DATABASE_MAX_CONNS", "NATS_URL", "NATS_CREDS",
		"NATS_INBOX_PREFIX", "NATS_TLS_CA", "HTTP_ADDR", "METRICS_ADDR", "CREDENTIAL_CIPHER", "CONFIGSYNC_KEYRING_FILE",
		"CONFIGSYNC_KEYRING_CREATE", "NATS_AUTHORITY_FILE", "NATS_SYSTEM_CREDS", "RESOLVER_SIGNING_KEY_FILE", "RESOLVER_VAULT_ADDR"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	dataDir := t.TempDir()
	log := zap.NewNop()
	auth, err := loadOrCreateAuthority(filepath.Join(dataDir, "nats-authority.json"), log)
	if err != nil {
		t.Fatal(err)
	}
	tlsFiles, err := tlsgen.Ensure(filepath.Join(dataDir, "tls"), "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	natsAddr := testinfra.FreeAddr(t)
	ns, err := startNATS(natsAddr, dataDir, auth, tlsFiles)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	var banner bytes.Buffer
	s := &stack{
		opts:    options{httpAddr: testinfra.FreeAddr(t), metrics: "127.0.0.1:0", noAgent: true, logLevel: "warn"},
		dataDir: dataDir, natsURL: "nats://" + natsAddr, natsCA: tlsFiles.CA,
		databaseURL: testinfra.PostgresURL(t), auth: auth, log: log, out: &banner,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	if s.metrics == nil {
		t.Fatal("no metrics listener")
	}
	signInWithBanner(t, banner.String())
	url := s.metrics.URL()
	sc := metricstest.Get(t, url)
	for _, svc := range []string{"config-api", "resolver", "credential", "delivery", "ack-ingest"} {
		if sc.Value("configsync_build_info", map[string]string{"service": svc}) != 1 {
			t.Errorf("no configsync_build_info for %s on the shared listener", svc)
		}
	}
	// Seeding went through the API: its requests are there, by route template.
	if got := sc.Value("configsync_http_requests_total", map[string]string{"route": "/api/v1/clients", "method": "POST", "code": "201"}); got < 1 {
		t.Errorf("seeding's POST /api/v1/clients not counted (%v)", got)
	}
	metricstest.Eventually(t, "fleet gauges of the demo host", func() bool {
		return metricstest.Get(t, url).Value("configsync_fleet_hosts", nil) >= 1
	})
	env, err := os.ReadFile(s.envFile())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(env), "export CONFIGSYNC_METRICS_URL="+url+"\n") {
		t.Errorf("devstack.env does not name %s:\n%s", url, env)
	}
	// The signing key was generated on this first start (0600) and its public key written for agents
	// and outside clients as CONFIGSYNC_TRUST_PUBLIC_KEYS.
	keyFile := filepath.Join(dataDir, "signing.key")
	if info, err := os.Stat(keyFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("signing key %s: %v, %v; want a 0600 file", keyFile, info, err)
	}
	trust, err := resolver.PublicKeys(ctx, resolver.Config{SigningKeyFile: keyFile}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(env), "export CONFIGSYNC_TRUST_PUBLIC_KEYS="+trust+"\n") {
		t.Errorf("devstack.env does not export the signing key's public key %s:\n%s", trust, env)
	}
	resp, err := http.Get("http://" + s.opts.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the API port serves /metrics: HTTP %s", strconv.Itoa(resp.StatusCode))
	}
}

// signInWithBanner does what the banner tells a new user: open the printed console URL and sign in with
// the printed token (as the sign-in form posts it).
func signInWithBanner(t *testing.T, banner string) {
	t.Helper()
	console := regexp.MustCompile(`(?m)^  console    (http://\S+/ui/) `).FindStringSubmatch(banner)
	token := regexp.MustCompile(`(?m)^  token      (\S+) `).FindStringSubmatch(banner)
	if console == nil || token == nil {
		t.Fatalf("the banner does not print the console URL and the token:\n%s", banner)
	}
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string) (*http.Response, string) {
		t.Helper()
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	// The printed URL sends a browser without a session to the sign-in form.
	resp, _ := get(console[1])
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("GET %s without a session: %d", console[1], resp.StatusCode)
	}
	signin, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	resp, form := get(signin.String())
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(form)
	if resp.StatusCode != http.StatusOK || csrf == nil {
		t.Fatalf("sign-in form: %d\n%s", resp.StatusCode, form)
	}
	origin, _ := url.Parse(console[1])
	req, _ := http.NewRequest(http.MethodPost, origin.Scheme+"://"+origin.Host+"/ui/signin",
		strings.NewReader(url.Values{"token": {token[1]}, "csrf": {csrf[1]}, "next": {"/ui/"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", origin.Scheme+"://"+origin.Host)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("sign-in with the printed token: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, page := get(console[1]); resp.StatusCode != http.StatusOK || !strings.Contains(page, "Fleet overview") || !strings.Contains(page, "devstack-admin") {
		t.Fatalf("the console after signing in with the printed token: %d\n%s", resp.StatusCode, page)
	}
}
