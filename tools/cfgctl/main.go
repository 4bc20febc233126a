// Command cfgctl is the ConfigSync operator CLI over the REST API: environment configs, host overrides,
// effective configs with their source, hosts and their apply status, drift, history, rollback, dry runs,
// staged rollouts, host registration (NATS credentials to 0600 files, never to stdout) and credentials
// (metadata only).
//
// The API URL and token come from flags, else CONFIGSYNC_API_URL / CONFIGSYNC_TOKEN, else the file named by
// CONFIGSYNC_CONFIG, else .data/devstack.env (written by `make run`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes scripts can rely on.
const (
	exitOK       = 0
	exitFailure  = 1 // transport or server error
	exitUsage    = 2 // bad command line
	exitNotFound = 3 // the object does not exist (or belongs to another client)
	exitConflict = 4 // lost update (412) or conflict (409)
	exitInvalid  = 5 // the API rejected the input (400, 413)
	exitAuth     = 6 // missing or rejected token
	exitDrift    = 7 // `drift` found hosts that differ from what they should run
)

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

const usage = `cfgctl — ConfigSync operator CLI

Usage: cfgctl [-api URL] [-token TOKEN] [-o table|json] <command> [args]

Environment configs:
  env list    <envID>
  env get     <envID> <type>
  env put     <envID> <type> -f FILE [-if-match VERSION] [-dry-run]
  env delete  <envID> <type> [-if-match VERSION]
Host overrides and effective configs:
  host get    <hostID> <type> [-explain]     effective config with its source
  host put    <hostID> <type> -f FILE [-if-match VERSION] [-dry-run]
  host delete <hostID> <type> [-if-match VERSION]
  host show   <hostID>                       host, heartbeat state and apply status
Fleet:
  hosts       <envID> [-selector SEL]         hosts with heartbeat, hash, versions, online, labels
  hosts register       <envID> <hostname> [-agent-id ID] [-label k=v]... [-creds-out PATH [-force]]
                                             register one host; its NATS credentials go to PATH (0600);
                                             -agent-id needs an admin token (the server chooses ids)
  hosts register-batch <envID> -f HOSTSFILE [-creds-dir DIR [-force]]
                                             register many, 1,000 per request (all or none per chunk);
                                             credentials go to DIR/<agent_id>.creds (0600)
  hosts revoke         <envID> <hostID>...   revoke hosts, 1,000 per request (one NATS account update each)
  hosts reissue-creds  <hostID> -creds-out PATH [-force]
                                             new NATS credentials for a host (re-enrolment; old ones revoked)
  hosts label <hostID> k=v... k-...          set (k=v) or remove (k-) one host's inventory labels
  hosts label -env <envID> -selector SEL k=v... k-...
                                             the same on every matching host, 1,000 per request
  drift       <envID> [-selector SEL]        hosts whose hash or versions differ (exit 7 when any)
  status      env|host <id> <type> [-watch [-timeout 10m] [-interval 2s]]
                                             how far the current version is applied: targets applied,
                                             failed (top errors), pending, offline, slowest apply; -watch
                                             repeats the line until every online target answered (exit 1
                                             on timeout)
Staged rollouts of an environment config (stages count from 0):
  rollout start   <envID> <type> -f FILE [-plan PLANFILE] [-stages "1,5%,25%,100%"] [-bake 5m]
                  [-auto-revert] [-if-match VERSION]
                                             start one (no plan flags: the API's default plan);
                                             -stages/-bake/-auto-revert replace the plan file's fields
  rollout status  <envID> <type> [rolloutID] [-watch [-interval 2s] [-timeout 10m]]
                                             one rollout (no id: the newest) with per-stage counts;
                                             -watch prints a line per stage per poll until it is no
                                             longer running: exit 0 completed, 1 paused/aborted/reverted
                                             or timeout
  rollout list    <envID> <type> [-limit 20] rollouts, newest first
  rollout pause|resume|promote|abort <envID> <type> <rolloutID>
                                             promote skips the remaining bake (the gate still holds);
                                             abort puts reached hosts back on the previous revision
History:
  history     env|host <id> <type>
  rollback    env|host <id> <type> <revision>
Registry:
  types                                      config types with merge strategy
Credentials (metadata only; secret values are read from SECRETFILE, never from arguments):
  credentials list   <clientID>
  credentials create <clientID> <name> -f SECRETFILE [-env envID] [-target HOST:PORT ...]
  credentials rotate <clientID> <credID> [-f SECRETFILE] [-target HOST:PORT ... | -clear-targets]
                                             without -f: re-encrypt under the newest key; -target
                                             (repeatable) replaces the allowed targets
  credentials delete <clientID> <credID> [-force]        in use: exit 4 unless -force

FILE is JSON or YAML holding the config data ("-" reads standard input).
HOSTSFILE has one host a line, "hostname" or "hostname agent_id" (agent ids: admin tokens only, for
importing hosts whose agents already run with an id); blank lines and # comments are skipped.
PLANFILE is JSON or YAML: {"stages": [{"hosts": 1}, {"percent": 5, "selector": "role=web"}, {"percent": 100}],
"bake_seconds": 300, "gate": {"max_failed": 0, "max_failed_ratio": 0, "max_unhealthy": 0,
"min_applied_ratio": 0.95}, "auto_revert": false}; the last stage must be 100% without selector.
SECRETFILE is a YAML or JSON map of field to value, e.g. {"username": "monitor", "password": "..."}.
HOST:PORT is an allowed target the credential may be injected for: host name, IP ([v6] in brackets),
"*.suffix" or "*", and a port or "*" (e.g. db.internal:5432, *.prod.example.com:*); none: any target.
NATS credentials are written only to -creds-out / -creds-dir files and never printed, except that
-o json prints the API's raw answer, credentials included; without a file they are shown once and lost.
Exit codes: 0 ok, 1 failure, 2 usage, 3 not found, 4 conflict/412, 5 invalid input, 6 auth, 7 drift.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cfgctl:", err)
		os.Exit(exitCode(err))
	}
}

type options struct {
	api, token, output string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runIO(ctx, args, os.Stdin, stdout, stderr)
}

// runIO is run with its standard input given, so tests can feed "-f -".
func runIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cfgctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	var o options
	fs.StringVar(&o.api, "api", "", "API base URL (default $CONFIGSYNC_API_URL)")
	fs.StringVar(&o.token, "token", "", "bearer token (default $CONFIGSYNC_TOKEN)")
	fs.StringVar(&o.output, "o", "table", "output: table or json")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if o.output != "table" && o.output != "json" {
		return usagef("-o must be table or json, not %q", o.output)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return usagef("no command")
	}
	settings, err := loadSettings(o.api, o.token)
	if err != nil {
		return err
	}
	c := newClient(settings.API, settings.Token)
	cmd := &commands{c: c, in: stdin, out: stdout, errOut: stderr, json: o.output == "json"}
	return cmd.dispatch(ctx, rest)
}
