package scenario

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/configsync/configsync/tools/loadgen/internal/backendstats"
	"github.com/configsync/configsync/tools/loadgen/internal/configapi"
	"github.com/configsync/configsync/tools/loadgen/internal/fleet"
	"github.com/configsync/configsync/tools/loadgen/internal/localstack"
	"github.com/configsync/configsync/tools/loadgen/internal/observe"
)

// TestScenariosAgainstDevstack runs every scenario with 50 agents against the real services: devstack
// built and started as a child process on a throwaway database of the PostgreSQL on 127.0.0.1:5432
// (CONFIGSYNC_TEST_ADMIN_DATABASE_URL overrides it). It checks what was persisted and counted, never
// how fast: speed is what `make bench` is for.
func TestScenariosAgainstDevstack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	backend, stack := devstackBackend(ctx, t)
	api := backend.API
	const agents = 50
	var log bytes.Buffer
	runner := New(Options{
		Agents: agents, Conns: 3, Subscriptions: fleet.Wildcard,
		Scenarios: map[string]bool{Push: true, Herd: true, Heartbeat: true},
		Jitter:    500 * time.Millisecond, FetchTimeout: 10 * time.Second, HeartbeatInterval: 10 * time.Second,
		HeartbeatRate: 200, Duration: time.Second, Timeout: time.Minute, Pushes: 2, Credentials: 2,
		RegisterConcurrency: 8,
	}, backend, &log)
	res, err := runner.Run(ctx)
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, log.String())
	}

	if res.Registration.Hosts != agents {
		t.Errorf("registered %d hosts", res.Registration.Hosts)
	}
	h := res.Herd
	if h == nil || h.OK != agents || h.Failed != 0 || h.TypeErrors != 0 || h.Latency.Count != agents {
		t.Fatalf("herd = %+v", h)
	}
	// Registration had the resolver sign one identity statement per host (and perhaps the environment's
	// configs, when their write had no host to fan out to).
	if res.RegistrationSignatures < agents || res.RegistrationSignatures > agents+10 {
		t.Errorf("registration signatures = %d, want one identity per host (%d) plus at most the environment's configs", res.RegistrationSignatures, agents)
	}
	// The hosts' identities were signed when they were registered, so the herd signs none of them; the
	// environment's configs may be signed by the herd or already by the fan-out of their write.
	if h.Signatures < 0 || h.Signatures > 10 {
		t.Errorf("herd signatures = %d, want no identity (signed at registration) and at most the environment's configs", h.Signatures)
	}
	// delivery injects one batch of waiting fetches per request: at least one, at most one per fetch.
	if h.Injects < 1 || h.Injects > agents {
		t.Errorf("herd inject requests = %d, want between 1 and one per fetch (%d)", h.Injects, agents)
	}
	p := res.Push
	if p == nil || !p.Complete || len(p.Runs) != 2 {
		t.Fatalf("push = %+v", p)
	}
	for i, run := range p.Runs {
		if run.Applied != agents || run.Failed != 0 || run.Received.Count != agents || run.Persisted.Count != agents {
			t.Errorf("push %d = %+v", i+1, run)
		}
		// One environment-wide push injects the environment's collectors once: each distinct
		// credential is decrypted once, whatever the number of agents.
		if run.Injects != 1 || run.Decrypts != 2 {
			t.Errorf("push %d: %d inject requests, %d decrypts; want 1 and 2", i+1, run.Injects, run.Decrypts)
		}
		// devstack signs: the push's one distinct config costs one signature, not one per agent.
		if run.Signatures != 1 {
			t.Errorf("push %d: %d signatures, want 1", i+1, run.Signatures)
		}
	}
	if p.Runs[1].Version <= p.Runs[0].Version {
		t.Errorf("versions %d then %d", p.Runs[0].Version, p.Runs[1].Version)
	}
	hb := res.Heartbeat
	if hb == nil || hb.Sent == 0 || hb.Landed == 0 || hb.Processed == 0 {
		t.Fatalf("heartbeat = %+v", hb)
	}
	f := res.Fleet
	if f.Commands != 2*agents || f.Applied != 2*agents || f.AcksSent != 2*agents || f.Foreign != 0 || f.Malformed != 0 {
		t.Errorf("fleet = %+v", f)
	}
	// Every process of the stack is reported: devstack's services and its nats-server process.
	if len(res.Memory) != 2 || len(stack.PIDs()) != 2 {
		t.Errorf("memory = %+v, want devstack's two processes %v", res.Memory, stack.PIDs())
	}
	for i, m := range res.Memory {
		if m.HWM == 0 || i >= len(stack.PIDs()) || m.PID != stack.PIDs()[i] {
			t.Errorf("memory[%d] = %+v, want the peak RSS of pid %v", i, m, stack.PIDs())
		}
		wantRole := RoleServices
		if m.PID == stack.NATSPID {
			wantRole = RoleNATSServer
		}
		if stack.NATSPID <= 0 || m.Role != wantRole {
			t.Errorf("memory[%d] = %+v, want role %q (nats-server pid %d)", i, m, wantRole, stack.NATSPID)
		}
	}
	if res.Herd.CPU["services"] <= 0 {
		t.Errorf("no services CPU accounted: %+v", res.Herd.CPU)
	}
	// The hosts report what the agents hold: the pushed collectors version.
	seen := 0
	if err := api.AllHosts(ctx, res.EnvironmentID, func(hst configapi.Host) {
		if hst.Online && hst.ConfigVersions["collectors"] == p.Runs[1].Version && hst.ApplyStatus["collectors"].Version == p.Runs[1].Version {
			seen++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if seen != agents {
		t.Errorf("%d of %d hosts report the last pushed collectors version", seen, agents)
	}
}

// devstackBackend starts devstack as a child process on a throwaway database of the PostgreSQL on
// 127.0.0.1:5432 and returns the Backend of it; everything is stopped when the test ends.
func devstackBackend(ctx context.Context, t *testing.T) (Backend, *localstack.Stack) {
	t.Helper()
	admin := "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	var progress bytes.Buffer
	// CONFIGSYNC_TEST_DEVSTACK_LOG_LEVEL (say info) makes devstack log more when chasing a failure.
	stack, err := localstack.Start(ctx, localstack.Options{AdminDatabaseURL: admin, Progress: &progress,
		LogLevel: os.Getenv("CONFIGSYNC_TEST_DEVSTACK_LOG_LEVEL")})
	if err != nil {
		t.Fatalf("start devstack: %v\n%s", err, progress.String())
	}
	t.Cleanup(func() {
		if err := stack.Stop(); err != nil {
			t.Errorf("stop devstack: %v", err)
		}
	})
	// Cleanups run last-registered first: a failed test gets devstack's log tail while its temporary
	// directory still exists, whichever assertion failed.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("devstack log (%s), last lines:\n%s", stack.LogPath(), stack.LogTail(200))
		// CONFIGSYNC_TEST_DEVSTACK_LOG_DIR keeps a failed test's whole devstack log there.
		if dir := os.Getenv("CONFIGSYNC_TEST_DEVSTACK_LOG_DIR"); dir != "" {
			dst := filepath.Join(dir, fmt.Sprintf("%s-%d.log", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano()))
			if raw, err := os.ReadFile(stack.LogPath()); err != nil {
				t.Logf("keep devstack log: %v", err)
			} else if err := os.WriteFile(dst, raw, 0o600); err != nil {
				t.Logf("keep devstack log: %v", err)
			} else {
				t.Logf("devstack log kept in %s", dst)
			}
		}
	})
	if stack.DatabaseURL == "" {
		t.Fatalf("no throwaway database on %s (PostgreSQL must run there for this test):\n%s", admin, progress.String())
	}

	api := configapi.New(stack.APIURL, stack.Token, 8)
	if err := api.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	obs, err := observe.NewPostgres(ctx, stack.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(obs.Close)
	if stack.NATSCA == "" {
		t.Fatal("devstack wrote no CONFIGSYNC_NATS_CA: its NATS must serve TLS")
	}
	nc, err := nats.Connect(stack.NATSURL, nats.UserCredentials(stack.CredsFile), nats.RootCAs(stack.NATSCA))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(stack.DatabaseURL)
	dbName := strings.TrimPrefix(u.Path, "/")
	backend := Backend{
		API: api, Observer: obs, NATSURL: stack.NATSURL, CredsFile: stack.CredsFile, NATSCA: stack.NATSCA, Control: nc, JS: js,
		Processes: stack.PIDs(), NATSServer: stack.NATSPID, Alive: stack.Alive,
		CPUGroups: CPUGroups(stack.PIDs(), stack.NATSPID, dbName),
		Signatures: func(ctx context.Context) (int64, error) {
			return backendstats.Signatures(ctx, http.DefaultClient, stack.MetricsURL)
		},
	}
	return backend, stack
}
