package metrics

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type reports struct {
	mu   sync.Mutex
	list []Report
}

func (r *reports) add(x Report) { r.mu.Lock(); r.list = append(r.list, x); r.mu.Unlock() }

func (r *reports) last() Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.list[len(r.list)-1]
}

func value(rep Report, name, collector string) (float64, bool) {
	for _, s := range rep.Samples {
		if s.Name == name && (collector == "" || s.Labels["collector"] == collector) {
			return s.Value, true
		}
	}
	return 0, false
}

func listener(t *testing.T) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}

func TestReplacePluginCollectorsSwapsWhatIsCollected(t *testing.T) {
	rep := &reports{}
	task := NewTask(quiet(), testPol, SystemCollectors("/proc", []string{"/"}), func() map[string]string {
		return map[string]string{"env": "test"}
	}, rep.add)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/teapot" {
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer srv.Close()
	l := listener(t)

	task.Run(context.Background())
	r := rep.last()
	if _, ok := value(r, "cpu.busy_percent", ""); !ok {
		t.Fatal("no cpu sample")
	}
	for _, name := range []string{"memory.total_bytes", "load.1m", "disk.total_bytes"} {
		if _, ok := value(r, name, ""); !ok {
			t.Fatalf("no %s sample", name)
		}
	}
	if _, ok := value(r, "tcp.up", ""); ok || r.Labels["env"] != "test" {
		t.Fatal("plugin sample before any collector was configured")
	}

	cfg := fmt.Sprintf(`[{"type":"tcp","name":"svc","address":%q},
		{"type":"http","name":"web","url":%q},
		{"type":"http","name":"tea","url":%q,"expect_status":418},
		{"type":"postgres","name":"pg","host":"127.0.0.1","port":5432,"username":"postgres","database":"test"},
		{"type":"tcp","name":"off","address":"127.0.0.1:1","enabled":false}]`,
		l.Addr().String(), srv.URL, srv.URL+"/teapot")
	if err := task.ReplacePluginCollectors(json.RawMessage(cfg), nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(task.PluginNames(), ","); got != "http/tea,http/web,postgres/pg,tcp/svc" {
		t.Fatalf("plugins %s", got)
	}
	task.Run(context.Background())
	r = rep.last()
	for _, c := range []struct{ name, collector string }{{"tcp.up", "svc"}, {"http.up", "web"}, {"http.up", "tea"}, {"postgres.up", "pg"}} {
		if v, ok := value(r, c.name, c.collector); !ok || v != 1 {
			t.Fatalf("%s{%s} = %v, %v (errors %+v)", c.name, c.collector, v, ok, r.Errors)
		}
	}
	if _, ok := value(r, "memory.total_bytes", ""); !ok {
		t.Fatal("system collectors lost in the swap")
	}

	// Swap again: the old plugins are gone, a failing one shows up as down with an error.
	if err := task.ReplacePluginCollectors(json.RawMessage(`[{"type":"tcp","name":"closed","address":"127.0.0.1:1"}]`), nil); err != nil {
		t.Fatal(err)
	}
	task.Run(context.Background())
	r = rep.last()
	if _, ok := value(r, "http.up", "web"); ok {
		t.Fatal("removed collector still collected")
	}
	if v, ok := value(r, "tcp.up", "closed"); !ok || v != 0 || len(r.Errors) != 1 || task.LastFailures() != 1 {
		t.Fatalf("closed port: %v %v %+v", v, ok, r.Errors)
	}

	// A bad list keeps the running set.
	if err := task.ReplacePluginCollectors(json.RawMessage(`[{"type":"smtp","name":"x"}]`), nil); err == nil {
		t.Fatal("unknown collector type accepted")
	}
	if got := strings.Join(task.PluginNames(), ","); got != "tcp/closed" {
		t.Fatalf("plugins after failed swap %s", got)
	}
	// null removes all plugins.
	if err := task.ReplacePluginCollectors(json.RawMessage(`null`), nil); err != nil || len(task.PluginNames()) != 0 {
		t.Fatalf("null: %v %v", err, task.PluginNames())
	}
}

func TestRedactedCollectorRefused(t *testing.T) {
	task := NewTask(quiet(), testPol, nil, nil, nil)
	err := task.ReplacePluginCollectors(json.RawMessage(`[{"type":"postgres","name":"db","host":"h","password":"[REDACTED]"}]`), nil)
	if err == nil || !strings.Contains(err.Error(), "redacted") {
		t.Fatalf("err = %v", err)
	}
}

// A server that accepts and never answers: the collector timeout ends the check.
func TestCollectorTimeoutHonoured(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	rep := &reports{}
	task := NewTask(quiet(), testPol, nil, nil, rep.add)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	if err := task.ReplacePluginCollectors(json.RawMessage(`[{"type":"postgres","name":"hang","host":"127.0.0.1","port":`+port+`}]`), nil); err != nil {
		t.Fatal(err)
	}
	task.SetTimeout(50 * time.Millisecond)
	if task.Timeout() != 50*time.Millisecond {
		t.Fatal("timeout not set")
	}
	task.Run(context.Background())
	r := rep.last()
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0].Error, "timeout") {
		t.Fatalf("errors %+v", r.Errors)
	}
	// A collector's own timeout wins over the task's.
	if err := task.ReplacePluginCollectors(json.RawMessage(`[{"type":"postgres","name":"hang","host":"127.0.0.1","port":`+port+`,"timeout":"20ms"}]`), nil); err != nil {
		t.Fatal(err)
	}
	task.SetTimeout(time.Hour)
	task.Run(context.Background())
	if r := rep.last(); len(r.Errors) != 1 {
		t.Fatalf("per-collector timeout ignored: %+v", r.Errors)
	}
}

func TestPostgresWrongDatabaseReportsServerError(t *testing.T) {
	c, err := newPostgresCheck(collector(`{"type":"postgres","name":"pg","host":"127.0.0.1","port":5432,"username":"postgres","database":"no_such_db_configsync"}`), testPol)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.Collect(ctx)
	if err == nil || !strings.Contains(err.Error(), "3D000") {
		t.Fatalf("err = %v", err)
	}
	if s[0].Name != "postgres.up" || s[0].Value != 0 {
		t.Fatalf("samples %+v", s)
	}
}

// RFC 7677's SCRAM-SHA-256 example, with PostgreSQL's empty user name swapped for the RFC's "user".
func TestSCRAMVector(t *testing.T) {
	s := newSCRAM("pencil", "rOprNGfwEbeRWgbNEkqO")
	s.user = "user"
	if got := s.clientFirst(); got != "n,,n=user,r=rOprNGfwEbeRWgbNEkqO" {
		t.Fatalf("client-first %s", got)
	}
	final, err := s.clientFinal("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
	if err != nil {
		t.Fatal(err)
	}
	if final != "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=" {
		t.Fatalf("client-final %s", final)
	}
	if !s.verifyServer("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") {
		t.Fatal("server signature rejected")
	}
	if s.verifyServer("v=" + base64.StdEncoding.EncodeToString([]byte("forged"))) {
		t.Fatal("forged signature accepted")
	}
}

func TestMD5Password(t *testing.T) {
	// md5(md5("secret"+"alice") hex + salt) with a fixed salt, computed independently.
	got := md5Password("alice", "secret", []byte{1, 2, 3, 4})
	if len(got) != 35 || !strings.HasPrefix(got, "md5") {
		t.Fatalf("md5 password %q", got)
	}
}

func TestRedisAndMySQLChecksAgainstFakes(t *testing.T) {
	// Redis: AUTH then PING.
	rl, _ := net.Listen("tcp", "127.0.0.1:0")
	defer rl.Close()
	var gotAuth string
	go func() {
		c, err := rl.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 512)
		n, _ := c.Read(buf)
		gotAuth = string(buf[:n])
		io.WriteString(c, "+OK\r\n")
		c.Read(buf)
		io.WriteString(c, "+PONG\r\n")
	}()
	_, rport, _ := net.SplitHostPort(rl.Addr().String())
	rc, err := newRedisCheck(collector(`{"type":"redis","name":"r","host":"127.0.0.1","port":`+rport+`,"password":"pw"}`), testPol)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Collect(context.Background()); err != nil || !strings.Contains(gotAuth, "AUTH") {
		t.Fatalf("redis: %v %q", err, gotAuth)
	}
	// MySQL: a version-10 greeting.
	ml, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ml.Close()
	go func() {
		c, err := ml.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		body := append([]byte{10}, []byte("8.0.36\x00rest")...)
		c.Write(append([]byte{byte(len(body)), 0, 0, 0}, body...))
	}()
	_, mport, _ := net.SplitHostPort(ml.Addr().String())
	mc, _ := newMySQLCheck(collector(`{"type":"mysql","name":"m","host":"127.0.0.1","port":`+mport+`}`), testPol)
	s, err := mc.Collect(context.Background())
	if err != nil || s[0].Labels["server_version"] != "8.0.36" {
		t.Fatalf("mysql: %v %+v", err, s)
	}
}

// Values injected from credentials never reach error text (logged and sent to the backend), even when a
// driver quotes them — here the host, which a credential may carry.
func TestCollectorErrorsScrubInjectedSecrets(t *testing.T) {
	rep := &reports{}
	task := NewTask(quiet(), testPol, nil, nil, rep.add)
	cfg := `[{"type":"tcp","name":"plain","address":"127.0.0.1:1"},{"type":"postgres","name":"db","host":"127.0.0.1","port":1,"username":"monitor-user","password":"pw"}]`
	if err := task.ReplacePluginCollectors(json.RawMessage(cfg), []string{"/1/host", "/1/password", "/1/username"}); err != nil {
		t.Fatal(err)
	}
	task.Run(context.Background())
	r := rep.last()
	if len(r.Errors) != 2 {
		t.Fatalf("errors %+v, want one per collector", r.Errors)
	}
	for _, e := range r.Errors {
		switch e.Collector {
		case "postgres/db":
			if strings.Contains(e.Error, "127.0.0.1") || !strings.Contains(e.Error, "[REDACTED]") {
				t.Errorf("injected host not scrubbed: %q", e.Error)
			}
		case "tcp/plain":
			if !strings.Contains(e.Error, "127.0.0.1:1") {
				t.Errorf("a value that is not a secret was scrubbed: %q", e.Error)
			}
		}
	}
	if err := task.ReplacePluginCollectors(json.RawMessage(cfg), []string{"/7/password"}); err == nil {
		t.Fatal("a secret pointer naming no collector was accepted")
	}
}
