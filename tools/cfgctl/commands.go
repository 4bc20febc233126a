package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/configsync/configsync/libs/agentconfig"
	"go.yaml.in/yaml/v3"
)

type commands struct {
	c      *client
	in     io.Reader // standard input, for "-f -"
	out    io.Writer // results: tables or JSON
	errOut io.Writer // warnings and progress, never results
	json   bool
}

func (k *commands) dispatch(ctx context.Context, args []string) error {
	switch args[0] {
	case "env":
		return k.level(ctx, "environments", args[1:])
	case "host":
		if len(args) > 1 && args[1] == "show" {
			return k.hostShow(ctx, args[2:])
		}
		return k.level(ctx, "hosts", args[1:])
	case "hosts":
		if len(args) > 1 {
			switch args[1] {
			case "register":
				return k.hostsRegister(ctx, args[2:])
			case "register-batch":
				return k.hostsRegisterBatch(ctx, args[2:])
			case "revoke":
				return k.hostsRevoke(ctx, args[2:])
			case "reissue-creds":
				return k.hostReissueCreds(ctx, args[2:])
			case "label":
				return k.hostsLabel(ctx, args[2:])
			}
		}
		return k.hosts(ctx, args[1:])
	case "credentials":
		return k.credentials(ctx, args[1:])
	case "drift":
		return k.drift(ctx, args[1:])
	case "status":
		return k.status(ctx, args[1:])
	case "rollout":
		return k.rolloutCmd(ctx, args[1:])
	case "history":
		return k.history(ctx, args[1:])
	case "rollback":
		return k.rollback(ctx, args[1:])
	case "types":
		return k.types(ctx)
	default:
		return usagef("unknown command %q (cfgctl -h lists them)", args[0])
	}
}

// level handles get/put/delete/list on /api/v1/{environments|hosts}/{id}/agent-configs.
func (k *commands) level(ctx context.Context, collection string, args []string) error {
	if len(args) < 2 {
		return usagef("%s needs a verb and an id", collection)
	}
	verb, id := args[0], args[1]
	base := "/api/v1/" + collection + "/" + url.PathEscape(id) + "/agent-configs"
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("f", "", "config data file (JSON or YAML, - for stdin)")
	ifMatch := fs.String("if-match", "", "expected current version (lost-update protection)")
	dryRun := fs.Bool("dry-run", false, "show the effect without writing")
	explain := fs.Bool("explain", false, "show which layer each value came from")
	var typ string
	rest := args[2:]
	if verb != "list" {
		if len(rest) == 0 {
			return usagef("%s %s needs a config type", collection, verb)
		}
		typ, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return usageError{err.Error()}
	}
	switch verb {
	case "list":
		if collection != "environments" {
			return usagef("list works on environments")
		}
		var raw json.RawMessage
		if err := k.c.do(ctx, http.MethodGet, base, nil, nil, &raw); err != nil {
			return err
		}
		return k.printConfigs(raw)
	case "get":
		q := url.Values{}
		if *explain {
			q.Set("explain", "true")
		}
		var raw json.RawMessage
		if err := k.c.do(ctx, http.MethodGet, base+"/"+url.PathEscape(typ), q, nil, &raw); err != nil {
			return err
		}
		return k.printConfig(raw)
	case "put":
		if *file == "" {
			return usagef("put needs -f FILE")
		}
		data, err := readConfigFile(k.in, *file)
		if err != nil {
			return err
		}
		q := url.Values{}
		if *dryRun {
			q.Set("dry_run", "true")
		}
		var raw json.RawMessage
		if err := k.c.doIfMatch(ctx, http.MethodPut, base+"/"+url.PathEscape(typ), q, *ifMatch, map[string]any{"config_data": data}, &raw); err != nil {
			return err
		}
		if *dryRun {
			return k.printDryRun(ctx, collection, id, typ, data, raw)
		}
		return k.printConfig(raw)
	case "delete":
		return k.c.doIfMatch(ctx, http.MethodDelete, base+"/"+url.PathEscape(typ), nil, *ifMatch, nil, nil)
	default:
		return usagef("unknown verb %q: use list, get, put or delete", verb)
	}
}

func (c *client) doIfMatch(ctx context.Context, method, path string, q url.Values, version string, body, out any) error {
	if version == "" {
		return c.do(ctx, method, path, q, body, out)
	}
	if _, err := strconv.ParseInt(version, 10, 64); err != nil {
		return usagef("-if-match wants a version number, not %q", version)
	}
	saved := c.header
	c.header = http.Header{"If-Match": {`"` + version + `"`}}
	defer func() { c.header = saved }()
	return c.do(ctx, method, path, q, body, out)
}

// readConfigFile reads JSON or YAML config data and returns it as a JSON-compatible value.
func readConfigFile(stdin io.Reader, path string) (any, error) {
	b, err := readInput(stdin, path)
	if err != nil {
		return nil, err
	}
	var v any
	if json.Valid(b) {
		return json.RawMessage(b), nil
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, usagef("%s is neither JSON nor YAML: %v", path, err)
	}
	return v, nil
}

// readInput reads a file, or stdin when path is "-".
func readInput(stdin io.Reader, path string) ([]byte, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// parseInterspersed parses flags wherever they stand among the positional arguments (the flag package
// stops at the first positional one) and returns the positional arguments in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError{fmt.Sprintf("%s: %v", fs.Name(), err)}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

func (k *commands) hostShow(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return usagef("host show needs a host id")
	}
	var raw json.RawMessage
	if err := k.c.do(ctx, http.MethodGet, "/api/v1/hosts/"+url.PathEscape(args[0]), nil, nil, &raw); err != nil {
		return err
	}
	if k.json {
		return k.writeJSON(raw)
	}
	var h map[string]any
	if err := json.Unmarshal(raw, &h); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	for _, key := range []string{"id", "hostname", "agent_id", "environment_id", "online", "last_heartbeat_at", "agent_version", "config_hash", "config_version"} {
		fmt.Fprintf(tw, "%s:\t%s\n", key, text(h[key]))
	}
	tw.Flush()
	status, _ := h["apply_status"].(map[string]any)
	if len(status) == 0 {
		fmt.Fprintln(k.out, "apply status: none reported")
		return nil
	}
	fmt.Fprintln(k.out)
	tw = tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tVERSION\tSTATUS\tAPPLIED AT\tERROR")
	for _, t := range sortedKeys(status) {
		s, _ := status[t].(map[string]any)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t, text(s["version"]), text(s["status"]), text(s["applied_at"]), text(s["error"]))
	}
	return tw.Flush()
}

func (k *commands) hosts(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hosts", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sel := fs.String("selector", "", "inventory label selector (e.g. role=web,region in (eu,us))")
	args, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usagef("hosts needs an environment id")
	}
	raw, err := k.c.getAll(ctx, "/api/v1/environments/"+url.PathEscape(args[0])+"/hosts", selectorQuery(*sel))
	if err != nil {
		return err
	}
	if k.json {
		return k.writeJSON(raw)
	}
	var hosts []map[string]any
	if err := json.Unmarshal(raw, &hosts); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHOSTNAME\tAGENT ID\tONLINE\tLAST HEARTBEAT\tCONFIG VERSION\tCONFIG HASH\tLABELS")
	for _, h := range hosts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", text(h["id"]), text(h["hostname"]), text(h["agent_id"]),
			text(h["online"]), text(h["last_heartbeat_at"]), text(h["config_version"]), short(text(h["config_hash"])), labelsText(h["labels"]))
	}
	return tw.Flush()
}

func (k *commands) drift(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("drift", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sel := fs.String("selector", "", "check only the hosts whose inventory labels match")
	args, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usagef("drift needs an environment id")
	}
	var raw json.RawMessage
	if err := k.c.do(ctx, http.MethodGet, "/api/v1/environments/"+url.PathEscape(args[0])+"/drift", selectorQuery(*sel), nil, &raw); err != nil {
		return err
	}
	var hosts []map[string]any
	if err := json.Unmarshal(raw, &hosts); err != nil {
		var wrapped struct {
			Hosts []map[string]any `json:"hosts"`
		}
		if err2 := json.Unmarshal(raw, &wrapped); err2 != nil {
			return fmt.Errorf("decode drift answer: %w", err)
		}
		hosts = wrapped.Hosts
	}
	if k.json {
		if err := k.writeJSON(raw); err != nil {
			return err
		}
	} else if len(hosts) == 0 {
		fmt.Fprintln(k.out, "no drift: every host reports the expected config")
	} else {
		tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "HOST\tHOSTNAME\tREASONS")
		for _, h := range hosts {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", text(firstOf(h, "host_id", "id")), text(h["hostname"]), reasons(h["reasons"]))
		}
		tw.Flush()
	}
	if len(hosts) > 0 {
		return driftFound(len(hosts))
	}
	return nil
}

type driftFound int

func (d driftFound) Error() string { return fmt.Sprintf("%d host(s) drifted", int(d)) }

func (k *commands) history(ctx context.Context, args []string) error {
	path, err := levelPath(args, 3)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := k.c.do(ctx, http.MethodGet, path+"/revisions", nil, nil, &raw); err != nil {
		return err
	}
	if k.json {
		return k.writeJSON(raw)
	}
	var revs []map[string]any
	if err := json.Unmarshal(raw, &revs); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tVERSION\tACTION\tACTOR\tAT")
	for _, r := range revs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", text(firstOf(r, "revision", "id")), text(r["version"]), text(r["action"]), text(r["actor"]), text(r["created_at"]))
	}
	return tw.Flush()
}

func (k *commands) rollback(ctx context.Context, args []string) error {
	path, err := levelPath(args, 4)
	if err != nil {
		return err
	}
	rev, err := strconv.ParseInt(args[3], 10, 64)
	if err != nil {
		return usagef("revision must be a number, not %q", args[3])
	}
	var raw json.RawMessage
	if err := k.c.do(ctx, http.MethodPost, path+"/rollback", nil, map[string]int64{"revision": rev}, &raw); err != nil {
		return err
	}
	return k.printConfig(raw)
}

func levelPath(args []string, n int) (string, error) {
	if len(args) != n {
		return "", usagef("want env|host <id> <type>%s", strings.Repeat(" <revision>", n-3))
	}
	var collection string
	switch args[0] {
	case "env":
		collection = "environments"
	case "host":
		collection = "hosts"
	default:
		return "", usagef("first argument must be env or host, not %q", args[0])
	}
	return "/api/v1/" + collection + "/" + url.PathEscape(args[1]) + "/agent-configs/" + url.PathEscape(args[2]), nil
}

func (k *commands) types(ctx context.Context) error {
	var raw json.RawMessage
	if err := k.c.do(ctx, http.MethodGet, "/api/v1/agent-config-types", nil, nil, &raw); err != nil {
		return err
	}
	if k.json {
		return k.writeJSON(raw)
	}
	var types []map[string]any
	if err := json.Unmarshal(raw, &types); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tMERGE\tDESCRIPTION")
	for _, t := range types {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", text(firstOf(t, "name", "config_type")), text(t["merge_strategy"]), text(t["description"]))
	}
	return tw.Flush()
}

func (k *commands) printConfigs(raw json.RawMessage) error {
	if k.json {
		return k.writeJSON(raw)
	}
	var list []map[string]any
	if err := json.Unmarshal(raw, &list); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tVERSION\tDATA")
	for _, c := range list {
		data, _ := json.Marshal(c["config_data"])
		fmt.Fprintf(tw, "%s\t%s\t%s\n", text(c["config_type"]), text(c["version"]), abbreviate(string(data), 80))
	}
	return tw.Flush()
}

func (k *commands) printConfig(raw json.RawMessage) error {
	if k.json {
		return k.writeJSON(raw)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		return err
	}
	fmt.Fprintf(k.out, "type:    %s\nversion: %s\n", text(c["config_type"]), text(c["version"]))
	if src := text(c["source"]); src != "" {
		fmt.Fprintf(k.out, "source:  %s\n", src)
	}
	data, _ := json.MarshalIndent(c["config_data"], "", "  ")
	fmt.Fprintf(k.out, "data:\n%s\n", data)
	if p, ok := c["provenance"]; ok && p != nil {
		prov, _ := json.MarshalIndent(p, "", "  ")
		fmt.Fprintf(k.out, "provenance:\n%s\n", prov)
	}
	return nil
}

// printDryRun shows, per affected host, a line diff between its current effective config and the one
// the write would produce.
func (k *commands) printDryRun(ctx context.Context, collection, id, typ string, _ any, raw json.RawMessage) error {
	if k.json {
		return k.writeJSON(raw)
	}
	var dr struct {
		Total int `json:"total"`
		Hosts []struct {
			HostID     string          `json:"host_id"`
			Hostname   string          `json:"hostname"`
			ConfigData json.RawMessage `json:"config_data"`
			Version    int64           `json:"version"`
			Source     string          `json:"source"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(raw, &dr); err != nil {
		return fmt.Errorf("decode dry-run answer: %w", err)
	}
	fmt.Fprintf(k.out, "dry run: %d host(s) affected, nothing written\n", max(dr.Total, len(dr.Hosts)))
	for _, h := range dr.Hosts {
		var cur struct {
			ConfigData json.RawMessage `json:"config_data"`
		}
		err := k.c.do(ctx, http.MethodGet, "/api/v1/hosts/"+url.PathEscape(h.HostID)+"/agent-configs/"+url.PathEscape(typ), nil, nil, &cur)
		if err != nil && exitCode(err) != exitNotFound {
			return err
		}
		fmt.Fprintf(k.out, "\n--- %s %s (current)\n+++ %s %s (after, source %s)\n", h.Hostname, h.HostID, h.Hostname, h.HostID, h.Source)
		for _, line := range lineDiff(pretty(cur.ConfigData), pretty(h.ConfigData)) {
			fmt.Fprintln(k.out, line)
		}
	}
	return nil
}

func (k *commands) writeJSON(raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := k.out.Write(buf.Bytes())
	return err
}

func pretty(raw json.RawMessage) []string {
	if agentconfig.IsNull(raw) {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return []string{string(raw)}
	}
	return strings.Split(buf.String(), "\n")
}

// lineDiff is a longest-common-subsequence diff: " " kept, "-" removed, "+" added.
func lineDiff(a, b []string) []string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			out = append(out, "  "+a[i])
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, "- "+a[i])
			i++
		default:
			out = append(out, "+ "+b[j])
			j++
		}
	}
	for ; i < n; i++ {
		out = append(out, "- "+a[i])
	}
	for ; j < m; j++ {
		out = append(out, "+ "+b[j])
	}
	return out
}

func text(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

func firstOf(m map[string]any, keys ...string) any {
	for _, k := range keys {
		if v, ok := m[k]; ok && v != nil {
			return v
		}
	}
	return nil
}

func reasons(v any) string {
	list, _ := v.([]any)
	parts := make([]string, 0, len(list))
	for _, r := range list {
		parts = append(parts, text(r))
	}
	return strings.Join(parts, "; ")
}

func short(hash string) string { return abbreviate(hash, 12) }

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
