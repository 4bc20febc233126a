package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/configsync/configsync/agent/internal/policy"
)

func refusal(t *testing.T, err error, want string) {
	t.Helper()
	var pe *policy.Error
	if !errors.As(err, &pe) || pe.Rule != policy.RuleNetwork && pe.Rule != policy.RuleLimits || !strings.Contains(err.Error(), want) {
		t.Fatalf("want a policy refusal containing %q, got %v", want, err)
	}
}

// TestMetadataEndpointRefused: an http collector aimed at 169.254.169.254 is refused by default — when
// the config is applied, at dial time (no connection attempt), and when an allowed server redirects
// there.
func TestMetadataEndpointRefused(t *testing.T) {
	task := NewTask(quiet(), testPol, nil, nil, nil)
	err := task.ReplacePluginCollectors(json.RawMessage(`[{"type":"http","name":"imds","url":"http://169.254.169.254/latest/meta-data/"}]`), nil)
	refusal(t, err, "collectors[0] (http/imds): url: policy: network: 169.254.169.254 is denied")
	if len(task.PluginNames()) != 0 {
		t.Fatal("refused collector installed")
	}
	for _, target := range []string{`"host":"169.254.169.254"`, `"host":"fd00:ec2::254"`} {
		err := task.ReplacePluginCollectors(json.RawMessage(`[{"type":"redis","name":"r",`+target+`}]`), nil)
		refusal(t, err, "is denied")
	}
	err = task.ReplacePluginCollectors(json.RawMessage(`[{"type":"tcp","name":"t","address":"169.254.169.254:80"}]`), nil)
	refusal(t, err, "is denied")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Past the config check (a name can resolve anywhere): the dial itself refuses.
	direct, err := newHTTPCheck(collector(`{"type":"http","name":"imds","url":"http://169.254.169.254/latest/meta-data/"}`), testPol)
	if err != nil {
		t.Fatal(err)
	}
	_, err = direct.Collect(ctx)
	refusal(t, err, "169.254.169.254 is denied (169.254.0.0/16)")

	hits := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.URL.Path
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam/", http.StatusFound)
	}))
	defer srv.Close()
	if err := task.ReplacePluginCollectors(json.RawMessage(`[{"type":"http","name":"redir","url":"`+srv.URL+`/start"}]`), nil); err != nil {
		t.Fatal(err)
	}
	redir, _ := newHTTPCheck(collector(`{"type":"http","name":"redir","url":"`+srv.URL+`/start"}`), testPol)
	_, err = redir.Collect(ctx)
	refusal(t, err, "169.254.169.254 is denied")
	if got := <-hits; got != "/start" || len(hits) != 0 {
		t.Fatalf("server saw %q and %d more", got, len(hits))
	}
}

// TestDialChecksResolvedAddress: a collector naming a host is checked on the address the name
// resolves to, so DNS cannot smuggle a denied address past the policy.
func TestDialChecksResolvedAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	deny, err := policy.New(policy.Config{Network: policy.Network{Deny: []string{"127.0.0.0/8", "::1"}}}, policy.Secrets{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	task := NewTask(quiet(), deny, nil, nil, nil)
	// The name passes the config check; the resolved loopback address is refused at dial time.
	if err := task.ReplacePluginCollectors(json.RawMessage(`[{"type":"tcp","name":"t","address":"localhost:`+port+`"}]`), nil); err != nil {
		t.Fatal(err)
	}
	c, _ := newTCPCheck(collector(`{"type":"tcp","name":"t","address":"localhost:`+port+`"}`), deny)
	_, err = c.Collect(ctx)
	refusal(t, err, "is denied")
	open, _ := newTCPCheck(collector(`{"type":"tcp","name":"t","address":"127.0.0.1:`+port+`"}`), testPol)
	if _, err := open.Collect(ctx); err != nil {
		t.Fatalf("default policy: %v", err)
	}

	only, _ := policy.New(policy.Config{Network: policy.Network{Allow: []string{"10.0.0.0/8"}, Ports: []int{5432}}}, policy.Secrets{})
	task = NewTask(quiet(), only, nil, nil, nil)
	refusal(t, task.ReplacePluginCollectors(json.RawMessage(`[{"type":"postgres","name":"p","host":"192.0.2.1"}]`), nil), "not in policy.network.allow")
	refusal(t, task.ReplacePluginCollectors(json.RawMessage(`[{"type":"redis","name":"r","host":"10.0.0.1"}]`), nil), "port 6379")
	refusal(t, task.ReplacePluginCollectors(json.RawMessage(`[{"type":"postgres","name":"p","host":"10.0.0.1","interval":"1s"}]`), nil), "below the minimum")
	if err := task.ReplacePluginCollectors(json.RawMessage(`[{"type":"postgres","name":"p","host":"10.0.0.1"}]`), nil); err != nil {
		t.Fatal(err)
	}
}
