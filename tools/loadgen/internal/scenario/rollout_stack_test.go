package scenario

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/configsync/configsync/tools/loadgen/internal/configapi"
	"github.com/configsync/configsync/tools/loadgen/internal/fleet"
)

// TestRolloutScenariosAgainstDevstack runs both rollout scenarios with 200 agents against the real
// services (devstack as a child process): the clean rollout completes and every agent acknowledged its
// version; with every agent but the canary refusing the config the gate pauses it before its last stage,
// with their error; the abort brings every reached agent a newer version; and no agent outside the
// started stages was ever sent the version. It checks what happened, never how fast.
func TestRolloutScenariosAgainstDevstack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	backend, _ := devstackBackend(ctx, t)
	// A percentage stage takes the hosts whose bucket (a hash) falls in it, so 5% of 60 hosts can be
	// none; 5% of 200 is empty about once in 27,000 runs (0.95^199), and stage 1 must hold a host for the
	// failing rollout to pause there.
	const agents = 200
	var log bytes.Buffer
	runner := New(Options{
		Agents: agents, Conns: 3, Subscriptions: fleet.Wildcard,
		Scenarios:    map[string]bool{Rollout: true, RolloutFail: true},
		FetchTimeout: 10 * time.Second, HeartbeatInterval: 5 * time.Second, Timeout: 2 * time.Minute,
		Credentials: 1, RegisterConcurrency: 4, FailRatio: 1, // every agent but the canary refuses: stage 1 fails whatever hosts it takes
	}, backend, &log)
	res, err := runner.Run(ctx)
	if err != nil {
		// The fleet's counters say whether a connection broke (reconnects) and what the agents sent.
		fleetStats := "none"
		if res != nil {
			fleetStats = fmt.Sprintf("%+v", res.Fleet)
		}
		t.Fatalf("run: %v\nfleet: %s\nprogress:\n%s", err, fleetStats, log.String())
	}
	clean := res.Rollout
	if clean == nil || clean.State != configapi.RolloutCompleted || len(clean.Stages) != 3 || clean.AllAcked <= 0 {
		t.Fatalf("rollout = %+v\n%s", clean, log.String())
	}
	reached := 0
	for _, s := range clean.Stages {
		if s.State != "passed" || s.Started < 0 || s.Passed < s.Started {
			t.Errorf("clean stage %+v", s)
		}
		reached += s.Targeted
	}
	if clean.Stages[0].Targeted != 1 || reached != agents || clean.Received != agents || clean.Reached != agents {
		t.Errorf("clean rollout: canary %d hosts, stages hold %d, %d agents received it (want 1, %d, %d)",
			clean.Stages[0].Targeted, reached, clean.Received, agents, agents)
	}
	failing := res.RolloutFail
	if failing == nil || failing.State != configapi.RolloutPaused || failing.CurrentStage >= failing.LastStage {
		t.Fatalf("rollout-fail = %+v\n%s", failing, log.String())
	}
	stage := failing.Stages[failing.CurrentStage]
	if stage.Failed == 0 || len(stage.TopErrors) == 0 || !strings.Contains(stage.TopErrors[0].Error, "labels: dynamic[0].command: policy: commands: uname") {
		t.Errorf("the paused stage = %+v", stage)
	}
	if failing.Received > failing.Reached {
		t.Errorf("%d agents received the failing version, the started stages hold %d", failing.Received, failing.Reached)
	}
	if ab := failing.Abort; ab == nil || ab.Reverted != ab.Reached || ab.Reached != failing.Received {
		t.Errorf("abort = %+v (received %d)", ab, failing.Received)
	}
	if clean.Commands < agents || failing.Commands < int64(failing.Reached) {
		t.Errorf("commands: %d during the clean rollout, %d during the failing one (reached %d)", clean.Commands, failing.Commands, failing.Reached)
	}
	if res.Fleet.Refused < int64(stage.Failed) {
		t.Errorf("the fleet refused %d configs, the stage counts %d failed", res.Fleet.Refused, stage.Failed)
	}
}
