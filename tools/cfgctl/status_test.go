package main

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestStatusWatchPrintsUntilEveryOnlineTargetAnswered: -watch prints one line per poll and stops at
// the first answer with nothing pending, offline targets notwithstanding.
func TestStatusWatchPrintsUntilEveryOnlineTargetAnswered(t *testing.T) {
	answers := []string{
		`{"config_type":"labels","version":7,"targets":3,"applied":0,"failed":0,"pending":2,"offline":1,"top_errors":[],"slowest_apply_ms":null,"done":false}`,
		`{"config_type":"labels","version":7,"targets":3,"applied":1,"failed":0,"pending":1,"offline":1,"top_errors":[],"slowest_apply_ms":40,"done":false}`,
		`{"config_type":"labels","version":7,"targets":3,"applied":1,"failed":1,"pending":0,"offline":1,"top_errors":[{"error":"policy: label command","hosts":1}],"slowest_apply_ms":1500,"done":true}`,
	}
	var polls atomic.Int32
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"GET /api/v1/environments/e1/agent-configs/labels/status": func(w http.ResponseWriter) {
			i := min(int(polls.Add(1))-1, len(answers)-1)
			io.WriteString(w, `{"data":`+answers[i]+`}`)
		},
	})
	out, err := runCLI(t, srv, "status", "env", "e1", "labels", "-watch", "-interval", "1ms")
	if err != nil {
		t.Fatalf("watch: %v\n%s", err, out)
	}
	want := "labels version 7: 0/3 applied, 0 failed, 2 pending, 1 offline\n" +
		"labels version 7: 1/3 applied, 0 failed, 1 pending, 1 offline, slowest 40ms\n" +
		"labels version 7: 1/3 applied, 1 failed, 0 pending, 1 offline, slowest 1.5s\n" +
		"  1 host(s) failed: policy: label command\n"
	if out != want || len(*got) != 3 {
		t.Fatalf("%d polls, output:\n%s\nwant:\n%s", len(*got), out, want)
	}
}

// TestStatusWatchTimesOut: while a target stays pending, -watch ends with an error at -timeout.
func TestStatusWatchTimesOut(t *testing.T) {
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"GET /api/v1/hosts/h1/agent-configs/labels/status": data(`{"config_type":"labels","version":3,"targets":1,"pending":1,"top_errors":[],"done":false}`),
	})
	out, err := runCLI(t, srv, "status", "host", "h1", "labels", "-watch", "-interval", "1ms", "-timeout", "20ms")
	if !errors.Is(err, errWatchTimeout) || exitCode(err) != exitFailure || !strings.Contains(err.Error(), "1 online target(s) still pending") {
		t.Fatalf("err %v (exit %d)", err, exitCode(err))
	}
	if len(*got) < 2 || strings.Count(out, "\n") != len(*got) {
		t.Fatalf("%d polls, output:\n%s", len(*got), out)
	}
	// Without -watch: one answer; bad arguments are usage errors.
	if out, err := runCLI(t, srv, "status", "host", "h1", "labels"); err != nil || out != "labels version 3: 0/1 applied, 0 failed, 1 pending, 0 offline\n" {
		t.Fatalf("one-shot status: %v %q", err, out)
	}
	for _, args := range [][]string{{"status", "env", "e1"}, {"status", "group", "e1", "labels"}, {"status", "env", "e1", "labels", "-watch", "-timeout", "0s"}} {
		if _, err := runCLI(t, srv, args...); exitCode(err) != exitUsage {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
