package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/configsync/configsync/libs/protocol"
)

// applyStatus is the API's answer to GET .../agent-configs/{type}/status.
type applyStatus protocol.ApplyStatus

// line is the one-line progress summary -watch repeats.
func (s applyStatus) line() string {
	var b strings.Builder
	what := "version"
	if s.Deleted {
		what = "deletion"
	}
	fmt.Fprintf(&b, "%s %s %d: %d/%d applied, %d failed, %d pending, %d offline", s.ConfigType, what, s.Version,
		s.Applied, s.Targets, s.Failed, s.Pending, s.Offline)
	if s.SlowestApplyMS != nil {
		fmt.Fprintf(&b, ", slowest %s", time.Duration(*s.SlowestApplyMS)*time.Millisecond)
	}
	if s.OtherHosts > 0 {
		fmt.Fprintf(&b, " (%d other hosts run a newer override)", s.OtherHosts)
	}
	return b.String()
}

// errWatchTimeout ends -watch when online targets are still pending at the deadline.
var errWatchTimeout = errors.New("timed out")

// status prints how far the current version of a type has been applied; with -watch it prints a
// progress line every -interval until every online target has answered (offline ones cannot) or
// -timeout passes (exit 1).
func (k *commands) status(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	watch := fs.Bool("watch", false, "repeat until every online target has answered")
	timeout := fs.Duration("timeout", 10*time.Minute, "with -watch: give up after this long")
	interval := fs.Duration("interval", 2*time.Second, "with -watch: time between two polls")
	if len(args) < 3 {
		return usagef("status needs env|host <id> <type>")
	}
	if err := fs.Parse(args[3:]); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *interval <= 0 || *timeout <= 0 {
		return usagef("-interval and -timeout must be positive")
	}
	path, err := levelPath(args[:3], 3)
	if err != nil {
		return err
	}
	get := func() (applyStatus, json.RawMessage, error) {
		var raw json.RawMessage
		if err := k.c.do(ctx, http.MethodGet, path+"/status", nil, nil, &raw); err != nil {
			return applyStatus{}, nil, err
		}
		var st applyStatus
		if err := json.Unmarshal(raw, &st); err != nil {
			return applyStatus{}, nil, fmt.Errorf("decode status answer: %w", err)
		}
		return st, raw, nil
	}
	st, raw, err := get()
	if err != nil {
		return err
	}
	if !*watch {
		if k.json {
			return k.writeJSON(raw)
		}
		k.printStatus(st)
		return nil
	}
	deadline := time.Now().Add(*timeout)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		fmt.Fprintln(k.out, st.line())
		if st.Done {
			k.printErrors(st)
			return nil
		}
		if !time.Now().Before(deadline) {
			k.printErrors(st)
			return fmt.Errorf("%w after %s: %d online target(s) still pending", errWatchTimeout, *timeout, st.Pending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if st, _, err = get(); err != nil {
			return err
		}
	}
}

func (k *commands) printStatus(st applyStatus) {
	fmt.Fprintln(k.out, st.line())
	k.printErrors(st)
}

func (k *commands) printErrors(st applyStatus) {
	for _, e := range st.TopErrors {
		fmt.Fprintf(k.out, "  %d host(s) failed: %s\n", e.Hosts, e.Error)
	}
}
