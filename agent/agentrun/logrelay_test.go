package agentrun

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/agent/internal/logcollect"
	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// Collected logs reach NATS through the agent: the rendered Fluent Bit config posts to the agent's log
// relay, which publishes on the agent's own connection under its applogs subject (allowed by the
// per-agent permissions the embedded server enforces).
func TestCollectedLogsGoThroughTheAgent(t *testing.T) {
	ns := startNATS(t, agentID, 0)
	newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{})
	watcher, err := nats.Connect(ns.ClientURL(), nats.UserInfo(backendUser, password))
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	logs, err := watcher.SubscribeSync(protocol.AgentSubjectPrefix + agentID + ".applogs.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := testConfig(t, ns.ClientURL(), agentID, dir)
	cfg.LogRelayAddr = net.JoinHostPort("127.0.0.1", itoa(freePort(t)))
	r := start(t, cfg)

	// The Fluent Bit config rendered for a log_collection config points its http output at the relay.
	if _, err := r.a.logs.Apply(logcollect.Config{Files: []agentconfig.LogFile{{Name: "nginx", Path: "/var/log/nginx/access.log"}}}); err != nil {
		t.Fatal(err)
	}
	rendered, err := os.ReadFile(filepath.Join(dir, logcollect.FileName))
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(cfg.LogRelayAddr)
	for _, want := range []string{"Name        http", "Port        " + port, "Header_Tag  X-Fluent-Tag"} {
		if !strings.Contains(string(rendered), want) {
			t.Fatalf("rendered config lacks %q:\n%s", want, rendered)
		}
	}

	// What Fluent Bit's http output sends for the nginx input.
	tag := protocol.AgentSubjectPrefix + agentID + ".applogs.nginx"
	req, _ := http.NewRequest(http.MethodPost, "http://"+cfg.LogRelayAddr+"/logs", bytes.NewReader([]byte(`[{"date":1.5,"log":"GET / 200"}]`)))
	req.Header.Set("X-Fluent-Tag", tag)
	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err = http.DefaultClient.Do(req)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("relay answered %d", resp.StatusCode)
	}
	m, err := logs.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no log message on NATS: %v", err)
	}
	if m.Subject != tag || !strings.Contains(string(m.Data), "GET / 200") {
		t.Fatalf("got %s %s", m.Subject, m.Data)
	}
}
