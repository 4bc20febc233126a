// Command vaultdev serves a real, in-memory dev Vault with the Transit secrets engine mounted at
// transit/, for ConfigSync's credential tests and `make run`.
//
// It embeds Vault as a library (no vault binary, no container), listens on 127.0.0.1, and writes
// exactly one JSON line to stdout once every request below would succeed:
//
//	{"addr":"http://127.0.0.1:PORT","token":"<root token>"}
//
// With -approle the line also carries "role_id" and "secret_id" for the AppRole role
// "configsync", whose tokens may encrypt, decrypt, rewrap, rotate and read the Transit key only.
// Vault's own logs go to stderr. It serves until SIGTERM or SIGINT, then shuts down and exits 0.
// Everything lives in memory: keys and tokens die with the process.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// shutdownTimeout bounds how long in-flight requests may hold up shutdown.
const shutdownTimeout = 10 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process exit, so tests can run the command in a child process.
func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("vaultdev", flag.ContinueOnError)
	flags.SetOutput(stderr)
	var opts options
	flags.StringVar(&opts.addr, "addr", "127.0.0.1:0", "listen address; port 0 picks a free port")
	flags.StringVar(&opts.transitKey, "transit-key", "configsync", "Transit key to create at start; empty creates none")
	flags.BoolVar(&opts.appRole, "approle", false, `enable AppRole auth with role "configsync" limited to the Transit key`)
	flags.DurationVar(&opts.tokenTTL, "token-ttl", 20*time.Second, "TTL of tokens from AppRole logins (short, to exercise renewal)")
	flags.DurationVar(&opts.tokenMaxTTL, "token-max-ttl", 10*time.Minute, "max TTL of tokens from AppRole logins")
	logLevel := flags.String("log-level", "warn", "Vault log level on stderr: trace, debug, info, warn, error, off")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "vaultdev: unexpected arguments: %q\n", flags.Args())
		return 2
	}

	level := hclog.LevelFromString(*logLevel)
	if level == hclog.NoLevel {
		fmt.Fprintf(stderr, "vaultdev: unknown -log-level %q\n", *logLevel)
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "vaultdev", Level: level, Output: stderr})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	dev, err := startDevVault(ctx, opts, logger)
	if err != nil {
		fmt.Fprintf(stderr, "vaultdev: start: %v\n", err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(dev.info); err != nil {
		fmt.Fprintf(stderr, "vaultdev: write ready line: %v\n", err)
		return closeDev(dev, stderr, 1)
	}

	select {
	case <-ctx.Done():
		return closeDev(dev, stderr, 0)
	case err := <-dev.served:
		// Serve only returns early on a listener failure; put the error back for close.
		dev.served <- err
		fmt.Fprintf(stderr, "vaultdev: serve: %v\n", err)
		return closeDev(dev, stderr, 1)
	}
}

// closeDev shuts dev down and returns code, or 1 when shutdown fails.
func closeDev(dev *devVault, stderr io.Writer, code int) int {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := dev.close(ctx); err != nil {
		fmt.Fprintf(stderr, "vaultdev: shutdown: %v\n", err)
		return 1
	}
	return code
}
