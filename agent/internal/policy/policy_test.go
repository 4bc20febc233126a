package policy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func build(t *testing.T, cfg Config, own Secrets) *Policy {
	t.Helper()
	p, err := New(cfg, own)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// refusedBy fails unless err is a policy refusal of rule whose text contains want.
func refusedBy(t *testing.T, err error, rule, want string) {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("want a %s refusal, got %v", rule, err)
	}
	if pe.Rule != rule || !strings.Contains(err.Error(), want) {
		t.Fatalf("want a %s refusal containing %q, got %q", rule, want, err)
	}
}

func mustAllow(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("want allowed, got %v", err)
	}
}

// realTemp is a temp dir with its own symlinks resolved (so expected paths compare equal).
func realTemp(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultReadRules(t *testing.T) {
	dir := realTemp(t)
	creds := filepath.Join(dir, "agent.creds")
	p := build(t, DefaultConfig(), Secrets{CredsFile: creds, DataDir: filepath.Join(dir, "data"), ConfigFile: "/etc/configsync/agent.yaml"})
	mustAllow(t, p.CheckRead("/etc/hostname"))
	mustAllow(t, p.CheckRead("/var/log/syslog"))
	mustAllow(t, p.CheckRead("/opt/app/version"))
	mustAllow(t, p.CheckRead("/etc/ssh/ssh_host_ed25519_key.pub"))
	for _, denied := range []string{"/etc/shadow", "/etc/gshadow", "/etc/ssh/ssh_host_ed25519_key", "/root/.bashrc",
		"/etc/ssl/private/server.key", "/etc/configsync/agent.yaml", "/etc/sudoers.d/x"} {
		refusedBy(t, p.CheckRead(denied), RuleReadPaths, "is denied")
	}
	refusedBy(t, p.CheckRead("/proc/self/environ"), RuleReadPaths, "is denied")
	withProc := build(t, Config{ReadPaths: []string{"/proc"}}, Secrets{})
	for _, denied := range []string{"/proc/self/environ", "/proc/thread-self/environ", "/proc/1/task/1/mem", "/proc/self/root/etc/shadow", "/proc/kcore"} {
		refusedBy(t, withProc.CheckRead(denied), RuleReadPaths, "is denied")
	}
	mustAllow(t, withProc.CheckRead("/proc/self/status"))
	refusedBy(t, p.CheckRead(creds), RuleReadPaths, "denied (the agent's own files)")
	refusedBy(t, p.CheckRead(filepath.Join(dir, "data", "config.cache.json")), RuleReadPaths, "denied (the agent's own files)")
	refusedBy(t, p.CheckRead("/home/u/.bash_history"), RuleReadPaths, "outside policy.read_paths")
	refusedBy(t, p.CheckRead("etc/hostname"), RuleReadPaths, "not an absolute path")
	refusedBy(t, p.CheckRead("/etc/../root/x"), RuleReadPaths, "resolved to /root/x) is denied")
	if got := p.CheckRead("/etc/shadow").Error(); got != "policy: read_paths: /etc/shadow is denied (built-in deny list)" {
		t.Fatalf("error text %q", got)
	}

	none := build(t, Config{}, Secrets{})
	refusedBy(t, none.CheckRead("/etc/hostname"), RuleReadPaths, "file reads are off")
}

// TestReadEscapes: allowed by the policy, refused again when the path escapes through .. or a symlink,
// including a symlink followed by .. (which a lexical Clean would get wrong).
func TestReadEscapes(t *testing.T) {
	dir := realTemp(t)
	allowed := filepath.Join(dir, "allowed")
	write(t, filepath.Join(allowed, "file"), "ok")
	write(t, filepath.Join(allowed, "secret.d", "key"), "k")
	write(t, filepath.Join(dir, "outside", "secret"), "s")
	write(t, filepath.Join(dir, "file"), "outside too")
	if err := os.Symlink("../outside", filepath.Join(allowed, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "outside", "secret"), filepath.Join(allowed, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("secret.d", filepath.Join(allowed, "alias")); err != nil {
		t.Fatal(err)
	}
	p := build(t, Config{ReadPaths: []string{allowed}, DenyPaths: []string{filepath.Join(allowed, "secret.d")}}, Secrets{})

	mustAllow(t, p.CheckRead(filepath.Join(allowed, "file")))
	mustAllow(t, p.CheckRead(filepath.Join(allowed, "not-yet", "created")))
	mustAllow(t, p.CheckRead(filepath.Join(allowed, "x", "..", "file")))
	refusedBy(t, p.CheckRead(allowed+"/../outside/secret"), RuleReadPaths, "outside policy.read_paths")
	refusedBy(t, p.CheckRead(filepath.Join(allowed, "link", "secret")), RuleReadPaths, "resolved to "+filepath.Join(dir, "outside", "secret"))
	refusedBy(t, p.CheckRead(filepath.Join(allowed, "abs")), RuleReadPaths, "outside policy.read_paths")
	// link -> ../outside, then ..: the kernel lands in dir, so this is dir/file, outside.
	refusedBy(t, p.CheckRead(allowed+"/link/../file"), RuleReadPaths, "resolved to "+filepath.Join(dir, "file"))
	refusedBy(t, p.CheckRead(filepath.Join(allowed, "secret.d", "key")), RuleReadPaths, "denied (policy.deny_paths)")
	refusedBy(t, p.CheckRead(filepath.Join(allowed, "alias", "key")), RuleReadPaths, "denied (policy.deny_paths)")
	refusedBy(t, p.CheckRead(allowed+"/nope/../../outside/secret"), RuleReadPaths, "outside")

	// Resolve agrees with the kernel (EvalSymlinks) wherever the path exists.
	for _, name := range []string{allowed + "/link/../file", allowed + "/alias/key", allowed + "/abs", allowed + "/./link/./secret"} {
		want, err := filepath.EvalSymlinks(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Resolve(name)
		if err != nil || got != want {
			t.Fatalf("Resolve(%s) = %q, %v; want %q", name, got, err, want)
		}
	}
	if err := os.Symlink("loop", filepath.Join(dir, "loop")); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(filepath.Join(dir, "loop", "x")); err == nil {
		t.Fatal("a symlink loop resolved")
	}
}

func TestReadPatterns(t *testing.T) {
	p := build(t, DefaultConfig(), Secrets{DataDir: "/var/lib/configsync-agent"})
	mustAllow(t, p.CheckReadPattern("/var/log/app/*.log"))
	mustAllow(t, p.CheckReadPattern("/var/log/*/access.log"))
	mustAllow(t, p.CheckReadPattern("/etc/nginx/*.conf"))
	refusedBy(t, p.CheckReadPattern("/etc/*"), RuleReadPaths, "could match /etc/shadow")
	refusedBy(t, p.CheckReadPattern("/etc/sha*"), RuleReadPaths, "could match /etc/shadow")
	refusedBy(t, p.CheckReadPattern("/etc/ssh/*"), RuleReadPaths, "could match /etc/ssh/ssh_host_*_key")
	refusedBy(t, p.CheckReadPattern("/var/*/x.log"), RuleReadPaths, "outside policy.read_paths")
	refusedBy(t, p.CheckReadPattern("/*/log/x.log"), RuleReadPaths, "could match /root")
	refusedBy(t, p.CheckReadPattern("/var/log/../../root/*.log"), RuleReadPaths, `".." is not allowed`)
	refusedBy(t, p.CheckReadPattern("/var/log/*/../../../etc/shadow"), RuleReadPaths, `".." is not allowed`)
	refusedBy(t, p.CheckReadPattern("/home/*/app.log"), RuleReadPaths, "outside policy.read_paths")

	dir := realTemp(t)
	write(t, filepath.Join(dir, "logs", "a.log"), "")
	if err := os.Symlink("/etc", filepath.Join(dir, "logs", "etc")); err != nil {
		t.Fatal(err)
	}
	q := build(t, Config{ReadPaths: []string{filepath.Join(dir, "logs")}}, Secrets{})
	mustAllow(t, q.CheckReadPattern(filepath.Join(dir, "logs", "*.log")))
	refusedBy(t, q.CheckReadPattern(filepath.Join(dir, "logs", "etc", "*")), RuleReadPaths, "resolved to /etc/*")
	// A symlink below the wildcard: the literal prefix is fine, the match is not.
	write(t, filepath.Join(dir, "secret", "x.log"), "s")
	if err := os.Symlink(filepath.Join(dir, "secret"), filepath.Join(dir, "logs", "app")); err != nil {
		t.Fatal(err)
	}
	refusedBy(t, q.CheckReadPattern(filepath.Join(dir, "logs", "*", "x.log")), RuleReadPaths,
		"matches "+filepath.Join(dir, "logs", "app", "x.log")+": "+filepath.Join(dir, "logs", "app", "x.log")+" (resolved to")
}

func TestOpenFile(t *testing.T) {
	dir := realTemp(t)
	write(t, filepath.Join(dir, "f"), "hello")
	p := build(t, Config{ReadPaths: []string{dir}}, Secrets{})
	f, st, err := p.OpenFile(filepath.Join(dir, "f"))
	if err != nil || st.Size() != 5 {
		t.Fatalf("open: %v", err)
	}
	f.Close()

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		f, _, err := p.OpenFile(fifo)
		if f != nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("FIFO opened: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("opening a FIFO blocked")
	}

	// A final component swapped for a symlink after the walk saw a file is not followed.
	if err := os.Symlink(filepath.Join(dir, "f"), filepath.Join(dir, "swapped")); err != nil {
		t.Fatal(err)
	}
	if f, _, err := p.OpenResolved(filepath.Join(dir, "swapped")); err == nil {
		f.Close()
		t.Fatal("OpenResolved followed a symlink")
	}
	if _, _, err := p.OpenFile("/etc/shadow"); !IsRefusal(err) {
		t.Fatalf("/etc/shadow: %v", err)
	}
}

func TestCommands(t *testing.T) {
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Fatal("no echo in PATH")
	}
	realEcho, _ := filepath.EvalSymlinks(echo)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("no sh in PATH")
	}

	none := build(t, DefaultConfig(), Secrets{})
	_, err = none.CheckCommand([]string{"echo", "x"})
	refusedBy(t, err, RuleCommands, "command labels are off")

	p := build(t, Config{Commands: []string{echo}}, Secrets{})
	c, err := p.CheckCommand([]string{"echo", "a b", "c"})
	mustAllow(t, err)
	if c.Path != realEcho || len(c.Args) != 3 || c.Args[0] != echo || c.Args[1] != "a b" {
		t.Fatalf("command %+v", c)
	}
	_, err = p.CheckCommand([]string{"sh", "-c", "echo x"})
	refusedBy(t, err, RuleCommands, "is not listed in policy.commands")
	_, err = p.CheckCommand([]string{"./echo"})
	refusedBy(t, err, RuleCommands, "relative path")

	dir := realTemp(t)
	// A symlink to the listed executable resolves to it: allowed, and run as the entry listed.
	if err := os.Symlink(realEcho, filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	c, err = p.CheckCommand([]string{filepath.Join(dir, "alias"), "x"})
	mustAllow(t, err)
	if c.Args[0] != echo {
		t.Fatalf("args %v", c.Args)
	}
	// A symlink named like a listed command but pointing at a shell is refused.
	if err := os.Symlink(sh, filepath.Join(dir, "echo")); err != nil {
		t.Fatal(err)
	}
	_, err = p.CheckCommand([]string{filepath.Join(dir, "echo"), "-c", "id"})
	refusedBy(t, err, RuleCommands, "resolved to")

	withShell := build(t, Config{Commands: []string{sh}}, Secrets{})
	_, err = withShell.CheckCommand([]string{"sh", "-c", "echo x"})
	mustAllow(t, err)

	if _, err := New(Config{Commands: []string{"echo"}}, Secrets{}); err == nil {
		t.Fatal("a relative command entry was accepted")
	}
}

func TestEnvAndLimits(t *testing.T) {
	p := build(t, DefaultConfig(), Secrets{})
	refusedBy(t, p.CheckEnv("HOME"), RuleEnv, "HOME is not listed")
	q := build(t, Config{Env: []string{"ZONE"}, Limits: Limits{MinInterval: time.Millisecond, MaxFileSize: 10}}, Secrets{})
	mustAllow(t, q.CheckEnv("ZONE"))
	refusedBy(t, q.CheckEnv("ZONE2"), RuleEnv, "ZONE2")

	refusedBy(t, p.CheckInterval(time.Second), RuleLimits, "below the minimum 5s")
	mustAllow(t, p.CheckInterval(5*time.Second))
	mustAllow(t, p.CheckInterval(0))
	mustAllow(t, q.CheckInterval(2*time.Millisecond))
	refusedBy(t, p.CheckFileSize(1<<30), RuleLimits, "above the cap 1048576")
	refusedBy(t, q.CheckFileSize(11), RuleLimits, "above the cap 10")
	if l := p.Limits(); l.MaxFiles != DefaultMaxFiles || l.LabelTimeout != DefaultLabelTimeout || p.UploadFileContents() {
		t.Fatalf("defaults %+v", l)
	}
}

func TestNetworkRules(t *testing.T) {
	p := build(t, DefaultConfig(), Secrets{})
	for _, denied := range []string{"169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254", "fe80::1"} {
		refusedBy(t, p.CheckHost(denied, 80), RuleNetwork, "is denied")
	}
	mustAllow(t, p.CheckHost("127.0.0.1", 5432))
	mustAllow(t, p.CheckHost("db.example", 5432))
	mustAllow(t, p.CheckAddress("10.1.2.3:6379"))

	q := build(t, Config{Network: Network{Allow: []string{"10.0.0.0/8", "db.internal"}, Ports: []int{5432}, Deny: []string{"10.9.0.0/16"}}}, Secrets{})
	mustAllow(t, q.CheckHost("10.1.2.3", 5432))
	refusedBy(t, q.CheckHost("10.1.2.3", 22), RuleNetwork, "port 22")
	refusedBy(t, q.CheckHost("192.0.2.1", 5432), RuleNetwork, "not in policy.network.allow")
	refusedBy(t, q.CheckHost("10.9.1.1", 5432), RuleNetwork, "is denied (10.9.0.0/16)")
	mustAllow(t, q.checkIP(netip.MustParseAddr("192.0.2.1"), 5432, true))                       // a listed name
	refusedBy(t, q.checkIP(netip.MustParseAddr("10.9.0.1"), 5432, true), RuleNetwork, "denied") // deny wins

	if _, err := New(Config{Network: Network{Allow: []string{"not a host!"}}}, Secrets{}); err == nil {
		t.Fatal("a bad allow entry was accepted")
	}
}

// TestDialTimeCheck: the address a name resolves to is checked before connecting, so DNS cannot
// smuggle a denied address in; a denied address is refused without a connection attempt.
func TestDialTimeCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	open := build(t, DefaultConfig(), Secrets{})
	c, err := open.DialContext(ctx, "tcp", "127.0.0.1:"+port)
	mustAllow(t, err)
	c.Close()
	<-accepted

	deny := build(t, Config{Network: Network{Deny: []string{"127.0.0.0/8", "::1"}}}, Secrets{})
	// The name is allowed as written; only the resolved address is denied.
	mustAllow(t, deny.CheckHost("localhost", 80))
	_, err = deny.DialContext(ctx, "tcp", net.JoinHostPort("localhost", port))
	refusedBy(t, err, RuleNetwork, "is denied")

	_, err = open.DialContext(ctx, "tcp", "169.254.169.254:80")
	refusedBy(t, err, RuleNetwork, "169.254.169.254 is denied (169.254.0.0/16)")
	select {
	case <-accepted:
		t.Fatal("a refused dial reached the listener")
	default:
	}
}

// TestRedirectToMetadata: an allowed server redirecting to the metadata endpoint does not get the
// client there.
func TestRedirectToMetadata(t *testing.T) {
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		switch r.URL.Path {
		case "/meta":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/meta-v6":
			http.Redirect(w, r, "http://[fd00:ec2::254]/latest/meta-data/", http.StatusFound)
		default:
			fmt.Fprint(w, "ok")
		}
	}))
	defer srv.Close()
	p := build(t, DefaultConfig(), Secrets{})
	client := p.HTTPClient()
	defer client.CloseIdleConnections()
	resp, err := client.Get(srv.URL + "/ok")
	mustAllow(t, err)
	resp.Body.Close()
	for _, path := range []string{"/meta", "/meta-v6"} {
		_, err = client.Get(srv.URL + path)
		refusedBy(t, err, RuleNetwork, "is denied")
	}
	if hits != 3 {
		t.Fatalf("server hits %d", hits)
	}
}
