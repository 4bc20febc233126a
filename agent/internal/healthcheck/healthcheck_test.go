package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRunnerTimeoutFromConfig(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var reps []Report
	r := NewRunner(slog.New(slog.NewTextHandler(io.Discard, nil)), []Check{
		{Name: "fine", Func: func(context.Context) error { return nil }},
		{Name: "broken", Func: func(context.Context) error { return errors.New("disk gone") }},
		{Name: "slow", Func: func(ctx context.Context) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}},
	}, func(rep Report) { reps = append(reps, rep) })
	interval, timeout, err := Parse(json.RawMessage(`{"interval_seconds":30,"timeout_seconds":1}`))
	if err != nil || interval != 30*time.Second || timeout != time.Second {
		t.Fatalf("parse %v %v %v", interval, timeout, err)
	}
	r.UpdateConfig(20 * time.Millisecond) // the slow check now times out
	r.Run(context.Background())
	rep := reps[0]
	if rep.Status != "degraded" || rep.TimeoutMS != 20 {
		t.Fatalf("report %+v", rep)
	}
	got := map[string]Result{}
	for _, c := range rep.Checks {
		got[c.Name] = c
	}
	if !got["fine"].OK || got["broken"].Error != "disk gone" || !strings.Contains(got["slow"].Error, "timed out") {
		t.Fatalf("checks %+v", got)
	}
	if i, tm, _ := Parse(nil); i != DefaultInterval || tm != DefaultTimeout {
		t.Fatal("defaults")
	}
}
