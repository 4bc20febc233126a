package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// maxBatchLabel is the most hosts config-api relabels in one request (hosts.MaxBatchLabel).
const maxBatchLabel = 1000

// labelFlag collects repeated -label k=v flags.
type labelFlag map[string]string

func (l labelFlag) String() string { return "" }

func (l labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q must be key=value", v)
	}
	l[k] = val
	return nil
}

// selectorQuery is the ?selector= query of a selector flag (nil when none was given).
func selectorQuery(sel string) url.Values {
	if sel == "" {
		return nil
	}
	return url.Values{"selector": {sel}}
}

// labelsText prints a host's labels as k=v,k=v in key order.
func labelsText(v any) string {
	m, _ := v.(map[string]any)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + text(m[k])
	}
	return strings.Join(parts, ",")
}

// labelChanges turns kubectl-style arguments (k=v sets, k- removes) into the API's merge patch.
func labelChanges(args []string) (map[string]*string, error) {
	patch := map[string]*string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && k != "" {
			patch[k] = &v
			continue
		}
		if k, ok := strings.CutSuffix(a, "-"); ok && k != "" {
			patch[k] = nil
			continue
		}
		return nil, usagef("label change %q must be key=value (set) or key- (remove)", a)
	}
	if len(patch) == 0 {
		return nil, usagef("hosts label needs at least one change (key=value or key-)")
	}
	return patch, nil
}

func (k *commands) hostsLabel(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hosts label", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	env := fs.String("env", "", "environment id (with -selector: relabel every matching host)")
	sel := fs.String("selector", "", "inventory label selector of the hosts to relabel (with -env)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if (*env == "") != (*sel == "") {
		return usagef("hosts label takes -env and -selector together, or a host id")
	}
	if *env == "" {
		if len(pos) < 2 {
			return usagef("hosts label needs a host id and changes (key=value or key-)")
		}
		patch, err := labelChanges(pos[1:])
		if err != nil {
			return err
		}
		var raw json.RawMessage
		if err := k.c.do(ctx, http.MethodPatch, "/api/v1/hosts/"+url.PathEscape(pos[0]), nil, map[string]any{"labels": patch}, &raw); err != nil {
			return err
		}
		if k.json {
			return k.writeJSON(raw)
		}
		var h map[string]any
		if err := json.Unmarshal(raw, &h); err != nil {
			return fmt.Errorf("decode host: %w", err)
		}
		fmt.Fprintf(k.out, "%s\t%s\n", text(h["hostname"]), labelsText(h["labels"]))
		return nil
	}
	patch, err := labelChanges(pos)
	if err != nil {
		return err
	}
	raw, err := k.c.getAll(ctx, "/api/v1/environments/"+url.PathEscape(*env)+"/hosts", selectorQuery(*sel))
	if err != nil {
		return err
	}
	var hosts []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &hosts); err != nil {
		return fmt.Errorf("decode hosts: %w", err)
	}
	updated := 0
	for start := 0; start < len(hosts); start += maxBatchLabel {
		chunk := hosts[start:min(start+maxBatchLabel, len(hosts))]
		ids := make([]string, len(chunk))
		for i, h := range chunk {
			ids[i] = h.ID
		}
		var out struct {
			Updated int `json:"updated"`
		}
		if err := k.c.do(ctx, http.MethodPost, "/api/v1/environments/"+url.PathEscape(*env)+"/hosts/labels", nil,
			map[string]any{"host_ids": ids, "labels": patch}, &out); err != nil {
			return fmt.Errorf("%d of %d matching host(s) relabeled before this request failed: %w", updated, len(hosts), err)
		}
		updated += out.Updated
	}
	fmt.Fprintf(k.out, "%d host(s) relabeled\n", updated)
	return nil
}
