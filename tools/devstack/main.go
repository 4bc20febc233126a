// Command devstack is `make run`: the whole ConfigSync system from one command for trying it out and for
// development — a nats-server with JetStream (devstack's own binary in a child process, see natsproc.go),
// per-agent JWT auth and TLS only (a local CA under .data/tls), PostgreSQL (DATABASE_URL,
// else the server on 127.0.0.1:5432, else a private cluster under .data), the local keyring, all five
// service modules in one fx app, and one agent. State lives under .data, so a second run reuses it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"go.uber.org/zap"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

// servicesGCPercent is the services' process's GC target percent by default. Their live heap is small
// (13-15 MB in a 15,000-agent herd, about 43 MB at 100,000 agents) and a herd allocates fast, so at the
// runtime's 100 the process collects many times a second, and the cycles' assists and dedicated
// workers fall on the fetches: a 50,000-agent herd's p99 (median of 9-11 runs) went from 64 to 143 ms
// when nats-server moved out of this process and its heap stopped pacing the services' collections,
// and came back to 78 ms at 400 (tools/loadgen/README.md). nats-server's process holds hundreds of MB
// of connection state and collects at its own target, natsGCPercent.
const servicesGCPercent = 400

// natsGCPercent is the nats-server process's GC target percent by default, as deploy/nats runs the
// server (GOGC). Its live heap is mostly per-connection state (about 25 KB per TLS client: 380 MB at
// 15,000 agent connections) that a boot herd does not free, and at the runtime's 100 a herd's
// allocations start a cycle over all of it every few seconds: under contention one took 1.3 s, 1.2 s
// of it mark assists charged to the goroutines reading the connections, and every fetch that began in
// it waited. At 400 the next cycle after the connect storm is about four live heaps of allocation
// away: in four interleaved pairs of 15,000-connection herds, p99 106-909 ms at 100 and 40-68 ms at
// 400, for about 10% more peak RSS (README "nats-server at fleet scale").
const natsGCPercent = 400

type options struct {
	dataDir  string
	httpAddr string
	metrics  string
	natsAddr string
	noAgent  bool
	logLevel string
	pprof    string
	natsOnly bool
	gcPct    int
	// natsGCPct is the nats-server process's GC target percent (-nats-gogc).
	natsGCPct int
}

func run() error {
	var o options
	flag.StringVar(&o.dataDir, "data", ".data", "directory for all state (database cluster, NATS store, agent cache, keys)")
	flag.StringVar(&o.httpAddr, "http", "127.0.0.1:8080", "config-api listen address")
	flag.StringVar(&o.metrics, "metrics", "127.0.0.1:9090", "address of the services' shared /metrics listener (empty: off)")
	flag.StringVar(&o.natsAddr, "nats", "127.0.0.1:4322", "nats-server listen address (the server runs in a child process)")
	flag.BoolVar(&o.noAgent, "no-agent", false, "do not start the demo agent")
	flag.StringVar(&o.logLevel, "log-level", "info", "log level of the services (debug, info, warn, error)")
	flag.StringVar(&o.pprof, "pprof", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060) for the services' process (the nats-server runs in its own); off by default")
	flag.BoolVar(&o.natsOnly, "nats-only", false, "run only the nats-server of -data on -nats, until stdin closes (devstack starts itself this way)")
	flag.IntVar(&o.gcPct, "services-gogc", servicesGCPercent, "GC target percent of the services' process (0: the runtime's, from GOGC or 100)")
	flag.IntVar(&o.natsGCPct, "nats-gogc", natsGCPercent, "GC target percent of the nats-server process (0: the runtime's, from GOGC or 100)")
	flag.Parse()
	if o.natsOnly {
		return runNATSOnly(o)
	}
	if o.gcPct > 0 {
		debug.SetGCPercent(o.gcPct)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dataDir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dataDir, err)
	}
	log, err := zap.NewDevelopment()
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck

	pg, err := provisionPostgres(ctx, dataDir, log)
	if err != nil {
		return err
	}
	defer pg.Stop()
	log.Info("postgres ready", zap.String("source", pg.Source))

	auth, tlsFiles, err := natsFiles(dataDir, o.natsAddr, log)
	if err != nil {
		return err
	}
	ns, err := startNATSProcess(o.natsAddr, dataDir, o.natsGCPct, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := ns.stop(10 * time.Second); err != nil {
			log.Warn("nats-server process", zap.Error(err))
		}
	}()
	natsURL := "nats://" + o.natsAddr
	log.Info("nats ready", zap.String("url", natsURL), zap.String("ca", tlsFiles.CA))

	if o.pprof != "" {
		if err := servePprof(o.pprof, log); err != nil {
			return err
		}
	}
	stack := &stack{opts: o, dataDir: dataDir, natsURL: natsURL, natsCA: tlsFiles.CA, databaseURL: pg.URL, auth: auth, log: log}
	if err := stack.start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("stopping")
	stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := stack.stop(stopCtx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
