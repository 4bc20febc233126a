package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// rollout is the API's rollout object (GET .../rollouts/{id} and every action's answer).
type rollout struct {
	ID              string         `json:"id"`
	EnvironmentID   string         `json:"environment_id"`
	ConfigType      string         `json:"config_type"`
	State           string         `json:"state"`
	Reason          string         `json:"reason"`
	PreviousVersion *int64         `json:"previous_version"`
	Version         int64          `json:"version"`
	FinalVersion    int64          `json:"final_version"` // completed or reverted: the environment's version then
	CurrentStage    int            `json:"current_stage"`
	Stages          []rolloutStage `json:"stages"`
	CreatedAt       string         `json:"created_at"`
	UpdatedAt       string         `json:"updated_at"`
	CreatedBy       string         `json:"created_by"`
}

// rolloutStage is one stage of a rollout with its counts.
type rolloutStage struct {
	Index       int     `json:"index"`
	Hosts       int     `json:"hosts"`
	Percent     float64 `json:"percent"`
	Selector    string  `json:"selector"`
	BakeSeconds int64   `json:"bake_seconds"`
	State       string  `json:"state"`
	StartedAt   *string `json:"started_at"`
	PassedAt    *string `json:"passed_at"`
	Targeted    int     `json:"targeted"`
	Applied     int     `json:"applied"`
	Failed      int     `json:"failed"`
	Pending     int     `json:"pending"`
	Offline     int     `json:"offline"`
	Unhealthy   int     `json:"unhealthy"`
	TopErrors   []struct {
		Error string `json:"error"`
		Hosts int    `json:"hosts"`
	} `json:"top_errors"`
}

// Rollout states (ROLLOUT_API.md): running and paused are active, the others final.
const (
	rolloutRunning   = "running"
	rolloutPaused    = "paused"
	rolloutCompleted = "completed"
)

// errRolloutNotCompleted ends `rollout status -watch` (exit 1) when the rollout stopped short of
// completed: paused (by its gate or an operator), aborted or reverted.
var errRolloutNotCompleted = errors.New("rollout did not complete")

// rolloutsPath is the rollouts collection of an environment config.
func rolloutsPath(env, typ string) string {
	return "/api/v1/environments/" + url.PathEscape(env) + "/agent-configs/" + url.PathEscape(typ) + "/rollouts"
}

// rolloutCmd dispatches `cfgctl rollout <verb> ...`.
func (k *commands) rolloutCmd(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("rollout needs a verb: start, status, list, pause, resume, promote or abort")
	}
	switch verb := args[0]; verb {
	case "start":
		return k.rolloutStart(ctx, args[1:])
	case "status":
		return k.rolloutStatus(ctx, args[1:])
	case "list":
		return k.rolloutList(ctx, args[1:])
	case "pause", "resume", "promote", "abort":
		return k.rolloutAction(ctx, verb, args[1:])
	default:
		return usagef("unknown rollout verb %q: use start, status, list, pause, resume, promote or abort", verb)
	}
}

// rolloutStart starts a rollout: POST .../rollouts with config_data and, when any plan flag is given,
// a plan (the -plan file, with -stages, -bake and -auto-revert replacing its fields). Without a plan
// the API applies its default one.
func (k *commands) rolloutStart(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rollout start", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("f", "", "config data file (JSON or YAML, - for stdin)")
	planFile := fs.String("plan", "", "plan file (JSON or YAML): stages, bake_seconds, gate, auto_revert")
	stages := fs.String("stages", "", `stages as a list: a host count or a cumulative percentage, e.g. "1,5%,25%,100%"`)
	bake := fs.Duration("bake", -1, "bake time of every stage (e.g. 5m; whole seconds)")
	autoRevert := fs.Bool("auto-revert", false, "revert the reached hosts when a gate fails")
	ifMatch := fs.String("if-match", "", "expected current version of the environment config (412 when it moved)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("rollout start needs <envID> <type> -f FILE")
	}
	if *file == "" {
		return usagef("rollout start needs -f FILE (the new config data)")
	}
	if *planFile == "-" && *file == "-" {
		return usagef("-f and -plan cannot both read standard input")
	}
	data, err := readConfigFile(k.in, *file)
	if err != nil {
		return err
	}
	var plan map[string]any
	if *planFile != "" {
		v, err := readConfigFile(k.in, *planFile)
		if err != nil {
			return err
		}
		if plan, err = asObject(v); err != nil {
			return usagef("%s: the plan must be an object (stages, bake_seconds, gate, auto_revert): %v", *planFile, err)
		}
	}
	setPlan := func(key string, v any) {
		if plan == nil {
			plan = map[string]any{}
		}
		plan[key] = v
	}
	if *stages != "" {
		list, err := parseStages(*stages)
		if err != nil {
			return err
		}
		setPlan("stages", list)
	}
	if *bake >= 0 {
		if *bake%time.Second != 0 {
			return usagef("-bake must be whole seconds, not %s", *bake)
		}
		setPlan("bake_seconds", int64(*bake/time.Second))
	}
	if *autoRevert {
		setPlan("auto_revert", true)
	}
	body := map[string]any{"config_data": data}
	if plan != nil {
		body["plan"] = plan
	}
	var raw json.RawMessage
	if err := k.c.doIfMatch(ctx, http.MethodPost, rolloutsPath(pos[0], pos[1]), nil, *ifMatch, body, &raw); err != nil {
		return err
	}
	return k.printRollout(raw)
}

// parseStages turns "1,5%,25%,100%" into the plan's stages: N is {"hosts": N}, P% is {"percent": P}.
func parseStages(list string) ([]map[string]any, error) {
	var out []map[string]any
	for i, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if p, ok := strings.CutSuffix(s, "%"); ok {
			v, err := strconv.ParseFloat(p, 64)
			if err != nil || math.IsNaN(v) || v <= 0 || v > 100 {
				return nil, usagef("-stages: stage %d (%q) must be a percentage above 0 and at most 100", i, s)
			}
			out = append(out, map[string]any{"percent": v})
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, usagef("-stages: stage %d (%q) must be a host count (at least 1) or a percentage such as 5%%", i, s)
		}
		out = append(out, map[string]any{"hosts": n})
	}
	return out, nil
}

// asObject decodes a plan read by readConfigFile (JSON bytes or a YAML value) into a map.
func asObject(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("empty")
	}
	return m, nil
}

// rolloutList prints an environment config's rollouts, newest first.
func (k *commands) rolloutList(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rollout list", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	limit := fs.Int("limit", 20, "how many rollouts, newest first")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("rollout list needs <envID> <type>")
	}
	if *limit < 1 {
		return usagef("-limit must be at least 1")
	}
	raw, list, err := k.listRollouts(ctx, pos[0], pos[1], *limit)
	if err != nil {
		return err
	}
	if k.json {
		return k.writeJSON(raw)
	}
	tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tVERSION\tPREVIOUS\tSTAGE\tCREATED\tBY\tREASON")
	for _, r := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.Version, optVersion(r.PreviousVersion),
			stageOf(r), r.CreatedAt, r.CreatedBy, r.Reason)
	}
	return tw.Flush()
}

func (k *commands) listRollouts(ctx context.Context, env, typ string, limit int) (json.RawMessage, []rollout, error) {
	var raw json.RawMessage
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if err := k.c.do(ctx, http.MethodGet, rolloutsPath(env, typ), q, nil, &raw); err != nil {
		return nil, nil, err
	}
	var list []rollout
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, nil, fmt.Errorf("decode rollout list: %w", err)
	}
	return raw, list, nil
}

// notFoundError is a 404 cfgctl decides on its own (exit 3), such as no rollout at all.
func notFoundError(msg string) error {
	return &apiError{Status: http.StatusNotFound, Code: "not_found", Message: msg}
}

// rolloutStatus prints one rollout (the newest without an id); with -watch it prints every stage's line
// every -interval until the rollout is no longer running: exit 0 when it completed, 1 when it paused,
// was aborted or reverted, or -timeout passed.
func (k *commands) rolloutStatus(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rollout status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	watch := fs.Bool("watch", false, "repeat until the rollout completed, paused, was aborted or reverted")
	interval := fs.Duration("interval", 2*time.Second, "with -watch: time between two polls")
	timeout := fs.Duration("timeout", 10*time.Minute, "with -watch: give up after this long (exit 1)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 || len(pos) > 3 {
		return usagef("rollout status needs <envID> <type> [rolloutID]")
	}
	if *interval <= 0 || *timeout <= 0 {
		return usagef("-interval and -timeout must be positive")
	}
	env, typ := pos[0], pos[1]
	id := ""
	if len(pos) == 3 {
		id = pos[2]
	} else {
		_, list, err := k.listRollouts(ctx, env, typ, 1)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return notFoundError(fmt.Sprintf("no rollout of %s in environment %s", typ, env))
		}
		id = list[0].ID
	}
	path := rolloutsPath(env, typ) + "/" + url.PathEscape(id)
	get := func() (rollout, json.RawMessage, error) {
		var raw json.RawMessage
		if err := k.c.do(ctx, http.MethodGet, path, nil, nil, &raw); err != nil {
			return rollout{}, nil, err
		}
		var r rollout
		if err := json.Unmarshal(raw, &r); err != nil {
			return rollout{}, nil, fmt.Errorf("decode rollout: %w", err)
		}
		return r, raw, nil
	}
	r, raw, err := get()
	if err != nil {
		return err
	}
	if !*watch {
		return k.printRollout(raw)
	}
	deadline := time.Now().Add(*timeout)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		width := 0
		for _, s := range r.Stages {
			width = max(width, len(s.what())+2)
		}
		for _, s := range r.Stages {
			fmt.Fprintln(k.out, s.line(width))
		}
		if r.State != rolloutRunning {
			k.printOutcome(r)
			if r.State == rolloutCompleted {
				return nil
			}
			return fmt.Errorf("%w: %s", errRolloutNotCompleted, r.outcome())
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%w after %s: rollout %s still running at stage %d", errWatchTimeout, *timeout, r.ID, r.CurrentStage)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if r, _, err = get(); err != nil {
			return err
		}
	}
}

// rolloutAction posts pause, resume, promote or abort and prints the rollout it answers.
func (k *commands) rolloutAction(ctx context.Context, verb string, args []string) error {
	if len(args) != 3 {
		return usagef("rollout %s needs <envID> <type> <rolloutID>", verb)
	}
	var raw json.RawMessage
	path := rolloutsPath(args[0], args[1]) + "/" + url.PathEscape(args[2]) + "/" + verb
	if err := k.c.do(ctx, http.MethodPost, path, nil, nil, &raw); err != nil {
		return err
	}
	return k.printRollout(raw)
}

// line is a stage's progress line, the one `status -watch` repeats; the stage's hosts are padded to
// width so a rollout's lines align.
func (s rolloutStage) line(width int) string {
	return fmt.Sprintf("stage %d %-*s %-7s %d/%d applied, %d failed, %d pending, %d offline, %d unhealthy",
		s.Index, width, "("+s.what()+")", s.State, s.Applied, s.Targeted, s.Failed, s.Pending, s.Offline, s.Unhealthy)
}

// what says which hosts a stage takes: "1 host", "5%", "25% of role=web".
func (s rolloutStage) what() string {
	var w string
	switch {
	case s.Hosts == 1:
		w = "1 host"
	case s.Hosts > 1:
		w = fmt.Sprintf("%d hosts", s.Hosts)
	default:
		w = strconv.FormatFloat(s.Percent, 'f', -1, 64) + "%"
	}
	if s.Selector != "" {
		w += " of " + s.Selector
	}
	return w
}

// outcome is the one-line account of a rollout that is no longer running.
func (r rollout) outcome() string {
	out := fmt.Sprintf("rollout %s %s", r.ID, r.State)
	if r.State == rolloutPaused || r.State == rolloutRunning {
		out += fmt.Sprintf(" at stage %d", r.CurrentStage)
	}
	if r.Reason != "" {
		out += ": " + r.Reason
	}
	return out
}

// printOutcome ends a watch: the rollout's final line and the error texts of failed hosts.
func (k *commands) printOutcome(r rollout) {
	fmt.Fprintf(k.out, "%s (version %d, previous %s)\n", r.outcome(), r.Version, optVersion(r.PreviousVersion))
	for _, s := range r.Stages {
		for _, e := range s.TopErrors {
			fmt.Fprintf(k.out, "  stage %d: %d host(s) failed: %s\n", s.Index, e.Hosts, e.Error)
		}
	}
}

// printRollout prints a rollout answer: its header and a table of its stages (-o json: the data).
func (k *commands) printRollout(raw json.RawMessage) error {
	if k.json {
		return k.writeJSON(raw)
	}
	var r rollout
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("decode rollout: %w", err)
	}
	tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "rollout:\t%s\n", r.ID)
	final := ""
	if r.FinalVersion > 0 {
		final = fmt.Sprintf(", final version %d", r.FinalVersion)
	}
	fmt.Fprintf(tw, "config:\t%s, version %d (previous %s%s)\n", r.ConfigType, r.Version, optVersion(r.PreviousVersion), final)
	fmt.Fprintf(tw, "state:\t%s, %s\n", r.State, stageOf(r))
	if r.Reason != "" {
		fmt.Fprintf(tw, "reason:\t%s\n", r.Reason)
	}
	fmt.Fprintf(tw, "created:\t%s by %s\n", r.CreatedAt, r.CreatedBy)
	tw.Flush()
	fmt.Fprintln(k.out)
	tw = tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tHOSTS\tBAKE\tSTATE\tTARGETED\tAPPLIED\tFAILED\tPENDING\tOFFLINE\tUNHEALTHY\tSTARTED\tPASSED")
	for _, s := range r.Stages {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", s.Index, s.what(), time.Duration(s.BakeSeconds)*time.Second,
			s.State, s.Targeted, s.Applied, s.Failed, s.Pending, s.Offline, s.Unhealthy, optTime(s.StartedAt), optTime(s.PassedAt))
	}
	tw.Flush()
	for _, s := range r.Stages {
		for _, e := range s.TopErrors {
			fmt.Fprintf(k.out, "  stage %d: %d host(s) failed: %s\n", s.Index, e.Hosts, e.Error)
		}
	}
	return nil
}

// stageOf says where a rollout stands: "stage 1 (of 0-3)"; stages count from 0 as in the API.
func stageOf(r rollout) string {
	return fmt.Sprintf("stage %d (of 0-%d)", r.CurrentStage, len(r.Stages)-1)
}

func optVersion(v *int64) string {
	if v == nil {
		return "none"
	}
	return strconv.FormatInt(*v, 10)
}

func optTime(t *string) string {
	if t == nil || *t == "" {
		return "-"
	}
	return *t
}
