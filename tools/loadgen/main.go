// Command loadgen is ConfigSync's fleet simulator: N agents in one process speaking the real protocol
// over a few multiplexed NATS connections, registered through the API and run through the benchmark
// scenarios (environment-wide push, thundering herd of startup fetches, sustained heartbeats, staged
// rollouts with and without agents refusing the config) against the real services. It prints
// throughput, latency percentiles, errors and the services' peak RSS against the targets, as a table or
// as JSON (-json).
//
// By default it builds tools/devstack and runs it as a private child process (temporary data directory,
// free ports, a throwaway database); -api/-token/-nats/-creds (or -devstack-env) target a running
// stack instead. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/configsync/configsync/tools/loadgen/internal/backendstats"
	"github.com/configsync/configsync/tools/loadgen/internal/configapi"
	"github.com/configsync/configsync/tools/loadgen/internal/fleet"
	"github.com/configsync/configsync/tools/loadgen/internal/localstack"
	"github.com/configsync/configsync/tools/loadgen/internal/observe"
	"github.com/configsync/configsync/tools/loadgen/internal/report"
	"github.com/configsync/configsync/tools/loadgen/internal/scenario"
)

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

type flags struct {
	agents, conns, pushes, credentials, registerConcurrency, natsGOGC int
	subscriptions, scenarios                                          string
	jitter, fetchTimeout, heartbeatInterval                           time.Duration
	retryFor                                                          time.Duration
	failRatio                                                         float64
	duration, timeout                                                 time.Duration
	heartbeatRate, dropPushes                                         float64
	jsonOut, strict, keep, analyze, signing, compareSigning           bool
	machine                                                           string

	api, token, natsURL, natsCA, creds, database, devstackEnv, servicePIDs     string
	devstackBin, pgAdmin, logLevel, resolverMetrics, devstackPprof, cpuProfile string
}

func parseFlags() flags {
	var f flags
	flag.IntVar(&f.agents, "agents", 1000, "number of simulated agents (hosts registered through the API)")
	flag.IntVar(&f.conns, "conns", 8, "NATS connections the agents are multiplexed over")
	flag.StringVar(&f.subscriptions, "subscriptions", string(fleet.Wildcard), "how agents receive commands: wildcard (one configsync.cmd.* queue subscription per connection) or per-agent (one subscription per agent)")
	flag.StringVar(&f.scenarios, "scenarios", "push,herd,heartbeat", "scenarios to run: push, herd, heartbeat, rollout, rollout-fail (comma separated)")
	flag.DurationVar(&f.jitter, "jitter", 5*time.Second, "herd: the boot window agents fetch within")
	flag.DurationVar(&f.fetchTimeout, "fetch-timeout", 10*time.Second, "herd: one fetch's timeout (a timeout is a failure)")
	flag.DurationVar(&f.retryFor, "retry-for", 2*time.Minute, "herd: agents whose startup fetch failed retry as the agent does (retry_after_ms, else 1-60 s backoff) for this long from the boot; 0: no retries")
	flag.DurationVar(&f.heartbeatInterval, "heartbeat-interval", 30*time.Second, "each agent's background heartbeat period (keeps hosts online; 0 disables)")
	flag.Float64Var(&f.heartbeatRate, "heartbeat-rate", 15000, "heartbeat scenario: heartbeats per second offered, fleet-wide")
	flag.DurationVar(&f.duration, "duration", 10*time.Second, "heartbeat scenario: how long the rate is sustained")
	flag.DurationVar(&f.timeout, "timeout", 5*time.Minute, "bound on each wait (hosts online, acks persisted, heartbeats landed)")
	flag.IntVar(&f.pushes, "pushes", 3, "push scenario: environment-wide pushes, one after the other")
	flag.Float64Var(&f.dropPushes, "drop-pushes", 0, "push scenario: percentage (0-100) of pushes the simulated agents lose; they keep heartbeating what they hold, so anti-entropy must repair them, and the push is measured to full convergence")
	flag.Float64Var(&f.failRatio, "fail-ratio", 0.05, "rollout-fail scenario: share (0-1) of agents whose simulated policy refuses the rolled-out config (acked failed); agent 0, the canary, never does")
	flag.IntVar(&f.credentials, "credentials", 3, "push scenario: distinct credentials the pushed collectors reference")
	flag.IntVar(&f.registerConcurrency, "register-concurrency", 4, "host registration batches in flight (POST /environments/{id}/hosts/batch, up to 1000 hosts each)")
	flag.BoolVar(&f.analyze, "analyze", true, "run ANALYZE on the hosts table after registration (needs the database; false shows the cold-statistics behaviour of a just-registered fleet)")
	flag.BoolVar(&f.jsonOut, "json", false, "print the result as JSON on stdout (progress stays on stderr)")
	flag.BoolVar(&f.strict, "strict", false, "exit 2 when a target is missed")
	flag.StringVar(&f.machine, "machine", "", "machine description for the report header (default: OS/arch and CPU count)")

	flag.StringVar(&f.api, "api", "", "config-api base URL of a running stack (e.g. http://127.0.0.1:8080); empty starts a private devstack")
	flag.StringVar(&f.token, "token", "", "admin API token of the running stack")
	flag.StringVar(&f.natsURL, "nats", "", "NATS URL of the running stack")
	flag.StringVar(&f.natsCA, "nats-ca", "", "CA file the NATS servers' TLS certificates are verified with (devstack: CONFIGSYNC_NATS_CA)")
	flag.StringVar(&f.creds, "creds", "", "NATS credentials file allowed to act as the whole fleet (devstack: <data>/bench.creds, an unrestricted user)")
	flag.StringVar(&f.database, "database", "", "PostgreSQL URL of the running stack: exact persist times and cheap polling (else the API's host list is polled)")
	flag.StringVar(&f.devstackEnv, "devstack-env", "", "read -api, -token, -nats (and -creds beside it) from a running devstack's devstack.env")
	flag.StringVar(&f.servicePIDs, "service-pids", "", "comma-separated pids of the service processes whose RSS to report (running stack)")
	flag.StringVar(&f.devstackBin, "devstack-bin", "", "prebuilt tools/devstack binary (default: go build it)")
	flag.StringVar(&f.pgAdmin, "pg-admin", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL maintenance database where the private devstack's throwaway database is created (ignored when DATABASE_URL is set)")
	flag.StringVar(&f.logLevel, "log-level", "warn", "private devstack: the services' log level")
	flag.BoolVar(&f.keep, "keep", false, "private devstack: keep its data directory, log and database")
	flag.StringVar(&f.cpuProfile, "cpuprofile", "", "write loadgen's own CPU profile to this file")
	flag.IntVar(&f.natsGOGC, "devstack-nats-gogc", 0, "private devstack: GC target percent of its nats-server process (0: devstack's default; -1: the runtime's)")
	flag.StringVar(&f.devstackPprof, "devstack-pprof", "", "private devstack: serve net/http/pprof on this address (e.g. 127.0.0.1:6060) to profile the services during the run")
	flag.BoolVar(&f.signing, "signing", true, "private devstack: the resolver signs configs (false: no signing key, to measure what signing costs)")
	flag.BoolVar(&f.compareSigning, "compare-signing", false, "private devstack: run the scenarios twice back to back, signing on then off (a fresh devstack and database each), and print both reports and a comparison")
	flag.StringVar(&f.resolverMetrics, "resolver-metrics", "", "running stack: the resolver's Prometheus /metrics URL, to count the signatures each phase makes (the private devstack's is found by itself)")
	flag.Parse()
	return f
}

func run() (int, error) {
	f := parseFlags()
	if f.cpuProfile != "" {
		// loadgen's own CPU (reported per operation as "loadgen"): profiled to keep the simulator cheap,
		// since it shares the machine with the stack it measures.
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return 0, err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return 0, err
		}
		defer pprof.StopCPUProfile()
	}
	scenarios, err := scenario.ParseScenarios(f.scenarios)
	if err != nil {
		return 0, err
	}
	if f.agents < 1 {
		return 0, errors.New("-agents must be at least 1")
	}
	if f.dropPushes < 0 || f.dropPushes > 100 {
		return 0, errors.New("-drop-pushes must be a percentage between 0 and 100")
	}
	if f.failRatio < 0 || f.failRatio > 1 {
		return 0, errors.New("-fail-ratio must be between 0 and 1")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	machine := firstNonEmpty(f.machine, report.DefaultMachine())

	if f.compareSigning {
		if f.api != "" || f.devstackEnv != "" {
			return 0, errors.New("-compare-signing runs private devstacks; it cannot target a running stack (-api, -devstack-env)")
		}
		on, err := runOnce(ctx, f, scenarios, true)
		if err != nil {
			if on != nil {
				report.Text(os.Stdout, on, machine)
			}
			return 1, fmt.Errorf("signing on: %w", err)
		}
		off, err := runOnce(ctx, f, scenarios, false)
		if err != nil {
			if off != nil {
				report.Text(os.Stdout, off, machine)
			}
			return 1, fmt.Errorf("signing off: %w", err)
		}
		if f.jsonOut {
			if err := report.CompareJSON(os.Stdout, on, off, machine); err != nil {
				return 0, err
			}
		} else {
			fmt.Fprintln(os.Stdout, "\n== signing on ==")
			report.Text(os.Stdout, on, machine)
			fmt.Fprintln(os.Stdout, "\n== signing off ==")
			report.Text(os.Stdout, off, machine)
			report.CompareText(os.Stdout, on, off)
		}
		return strictExit(f, on, off)
	}

	res, runErr := runOnce(ctx, f, scenarios, f.signing)
	switch {
	case res == nil:
	case f.jsonOut:
		if err := report.JSON(os.Stdout, res, machine); err != nil {
			return 0, err
		}
	default:
		report.Text(os.Stdout, res, machine)
	}
	if runErr != nil {
		return 1, runErr
	}
	return strictExit(f, res)
}

// strictExit is 2 with an error when -strict is set and a result missed a target.
func strictExit(f flags, results ...*scenario.Result) (int, error) {
	if !f.strict {
		return 0, nil
	}
	for _, res := range results {
		for _, c := range report.Checks(res) {
			if c.Verdict == "MISS" {
				return 2, fmt.Errorf("target missed: %s %s", c.Scenario, c.Metric)
			}
		}
	}
	return 0, nil
}

// runOnce runs the scenarios against the stack f names, or a private devstack (signing on or off).
func runOnce(ctx context.Context, f flags, scenarios map[string]bool, signing bool) (*scenario.Result, error) {
	progress := os.Stderr
	signingMode := ""

	if f.devstackEnv != "" {
		vals, err := localstack.ReadEnvFile(f.devstackEnv)
		if err != nil {
			return nil, fmt.Errorf("-devstack-env: %w", err)
		}
		f.api = firstNonEmpty(f.api, vals["CONFIGSYNC_API_URL"])
		f.token = firstNonEmpty(f.token, vals["CONFIGSYNC_TOKEN"])
		f.natsURL = firstNonEmpty(f.natsURL, vals["CONFIGSYNC_NATS_URL"])
		f.natsCA = firstNonEmpty(f.natsCA, vals["CONFIGSYNC_NATS_CA"])
		f.creds = firstNonEmpty(f.creds, filepath.Join(filepath.Dir(f.devstackEnv), "bench.creds"))
	}
	backend := scenario.Backend{}
	var pids []int
	metricsURL := f.resolverMetrics
	if f.api == "" {
		fmt.Fprintf(progress, "private devstack, signing %s\n", onOff(signing))
		stack, err := localstack.Start(ctx, localstack.Options{Binary: f.devstackBin, AdminDatabaseURL: f.pgAdmin, LogLevel: f.logLevel,
			KeepData: f.keep, NoSigning: !signing, Pprof: f.devstackPprof, NATSGCPercent: f.natsGOGC, Progress: progress})
		if err != nil {
			return nil, err
		}
		defer func() {
			fmt.Fprintln(progress, "stopping devstack ...")
			if err := stack.Stop(); err != nil {
				fmt.Fprintln(progress, "loadgen: stop devstack:", err)
			}
			if f.keep {
				fmt.Fprintf(progress, "kept %s (log %s)\n", stack.Dir, stack.LogPath())
			}
		}()
		f.api, f.token, f.natsURL, f.natsCA, f.creds = stack.APIURL, stack.Token, stack.NATSURL, stack.NATSCA, stack.CredsFile
		f.database = firstNonEmpty(f.database, stack.DatabaseURL)
		pids = stack.PIDs()
		backend.NATSServer = stack.NATSPID
		backend.Alive = stack.Alive
		metricsURL = stack.MetricsURL
		signingMode = onOff(signing)
	} else {
		if f.token == "" || f.natsURL == "" {
			return nil, errors.New("-api needs -token and -nats (or -devstack-env)")
		}
		for _, p := range strings.Split(f.servicePIDs, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			pid, err := strconv.Atoi(p)
			if err != nil {
				return nil, fmt.Errorf("-service-pids: %q is not a pid", p)
			}
			pids = append(pids, pid)
		}
	}
	backend.Processes = pids
	dbName := databaseName(f.database)
	backend.CPUGroups = scenario.CPUGroups(pids, backend.NATSServer, dbName)
	backend.NATSURL, backend.CredsFile, backend.NATSCA = f.natsURL, f.creds, f.natsCA
	if metricsURL != "" {
		httpClient := &http.Client{Timeout: 5 * time.Second}
		backend.Signatures = func(ctx context.Context) (int64, error) {
			return backendstats.Signatures(ctx, httpClient, metricsURL)
		}
	}

	api := configapi.New(f.api, f.token, max(f.registerConcurrency, 4))
	readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err := api.Ready(readyCtx)
	cancel()
	if err != nil {
		return nil, err
	}
	backend.API = api
	if f.database != "" {
		obs, err := observe.NewPostgres(ctx, f.database)
		if err != nil {
			return nil, err
		}
		defer obs.Close()
		backend.Observer = obs
	} else {
		backend.Observer = observe.NewAPI(api)
	}

	ncOpts := []nats.Option{nats.Name("configsync-loadgen-control")}
	if f.creds != "" {
		ncOpts = append(ncOpts, nats.UserCredentials(f.creds))
	}
	if f.natsCA != "" {
		ncOpts = append(ncOpts, nats.RootCAs(f.natsCA))
	}
	nc, err := nats.Connect(f.natsURL, ncOpts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", f.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	backend.Control, backend.JS = nc, js

	runner := scenario.New(scenario.Options{
		Agents: f.agents, Conns: f.conns, Subscriptions: fleet.SubscriptionMode(f.subscriptions), Scenarios: scenarios, FailRatio: f.failRatio,
		Jitter: f.jitter, RetryFor: f.retryFor, FetchTimeout: f.fetchTimeout, HeartbeatInterval: f.heartbeatInterval,
		HeartbeatRate: f.heartbeatRate, Duration: f.duration, Timeout: f.timeout, Pushes: f.pushes, DropPushes: f.dropPushes / 100,
		Credentials: f.credentials, RegisterConcurrency: f.registerConcurrency, Analyze: f.analyze, Real: realOptions(),
		Signing: signingMode,
	}, backend, progress)
	return runner.Run(ctx)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// databaseName is the database of a postgres:// URL ("" when none or not a URL).
func databaseName(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil || u.Scheme == "" {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
