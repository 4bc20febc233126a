package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"
)

// credentials handles list/create/rotate/delete on /api/v1/clients/{clientID}/credentials. Secret values
// come only from a file or standard input: on the command line they would land in shell history and ps.
// The API answers metadata only, and that is all cfgctl prints.
func (k *commands) credentials(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("credentials needs a verb: list, create, rotate or delete")
	}
	verb := args[0]
	fs := flag.NewFlagSet("credentials "+verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var file, env *string
	var force, clearTargets *bool
	var targets []string
	switch verb {
	case "create", "rotate":
		file = fs.String("f", "", `secret file: YAML or JSON map of field to value ("-" reads standard input)`)
		fs.Func("target", `an allowed target, host:port ("db.internal:5432", "*.prod.example.com:*"); repeatable`, func(v string) error {
			targets = append(targets, v)
			return nil
		})
		if verb == "create" {
			env = fs.String("env", "", "environment id the credential belongs to (default: the whole client)")
		} else {
			clearTargets = fs.Bool("clear-targets", false, "remove every allowed target (the credential may then go to any target)")
		}
	case "delete":
		force = fs.Bool("force", false, "delete even while configs reference the credential")
	case "list":
	default:
		return usagef("unknown credentials verb %q: use list, create, rotate or delete", verb)
	}
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	want := map[string]int{"list": 1, "create": 2, "rotate": 2, "delete": 2}[verb]
	if len(pos) != want {
		return usagef("credentials %s needs %s", verb, map[string]string{
			"list": "a client id", "create": "a client id and a name",
			"rotate": "a client id and a credential id", "delete": "a client id and a credential id",
		}[verb])
	}
	base := "/api/v1/clients/" + url.PathEscape(pos[0]) + "/credentials"
	switch verb {
	case "list":
		var raw json.RawMessage
		if err := k.c.do(ctx, http.MethodGet, base, nil, nil, &raw); err != nil {
			return err
		}
		return k.printCredentials(raw)
	case "create":
		if *file == "" {
			return usagef("credentials create needs -f SECRETFILE (secret values are never taken as arguments)")
		}
		secret, err := readSecretFile(k.in, *file)
		if err != nil {
			return err
		}
		body := map[string]any{"name": pos[1], "secret": secret}
		if len(targets) > 0 {
			body["allowed_targets"] = targets
		}
		if *env != "" {
			body["environment_id"] = *env
		}
		var raw json.RawMessage
		if err := k.c.do(ctx, http.MethodPost, base, nil, body, &raw); err != nil {
			return err
		}
		return k.printCredential(raw)
	case "rotate":
		// Without a secret the API re-encrypts the credential under the newest key; -target and
		// -clear-targets replace the allowed targets, with or without a new secret.
		if *clearTargets && len(targets) > 0 {
			return usagef("credentials rotate: -clear-targets and -target exclude each other")
		}
		var body any
		fields := map[string]any{}
		if *file != "" {
			secret, err := readSecretFile(k.in, *file)
			if err != nil {
				return err
			}
			fields["secret"] = secret
		}
		switch {
		case *clearTargets:
			fields["allowed_targets"] = []string{}
		case len(targets) > 0:
			fields["allowed_targets"] = targets
		}
		if len(fields) > 0 {
			body = fields
		}
		var raw json.RawMessage
		if err := k.c.do(ctx, http.MethodPost, base+"/"+url.PathEscape(pos[1])+"/rotate", nil, body, &raw); err != nil {
			return err
		}
		return k.printCredential(raw)
	default: // delete
		q := url.Values{}
		if *force {
			q.Set("force", "true")
		}
		if err := k.c.do(ctx, http.MethodDelete, base+"/"+url.PathEscape(pos[1]), q, nil, nil); err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.Code == "credential_in_use" {
				return fmt.Errorf("%w\nremove the references first, or pass -force (their pushes then fail)", err)
			}
			return err
		}
		if !k.json {
			fmt.Fprintf(k.out, "credential %s deleted\n", pos[1])
		}
		return nil
	}
}

// readSecretFile reads a YAML or JSON map of field name to string value. Its errors name fields and
// lines, never values.
func readSecretFile(stdin io.Reader, path string) (map[string]string, error) {
	b, err := readInput(stdin, path)
	if err != nil {
		return nil, err
	}
	secret := map[string]string{}
	if json.Valid(b) {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, usagef("%s: want a JSON object of field to string value", path)
		}
		for f, v := range m {
			s, ok := v.(string)
			if !ok {
				return nil, usagef("%s: field %q: the value must be a string", path, f)
			}
			secret[f] = s
		}
	} else {
		// A yaml.Node never fails on types, so no error message can quote a value; scalars are taken as
		// written (password: 0123 stays "0123").
		var doc yaml.Node
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, usagef("%s is neither JSON nor YAML (%s)", path, yamlLine(err))
		}
		if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
			return nil, usagef("%s: want a YAML or JSON map of field to value", path)
		}
		m := doc.Content[0].Content
		for i := 0; i+1 < len(m); i += 2 {
			key, val := m[i], m[i+1]
			if key.Kind != yaml.ScalarNode {
				return nil, usagef("%s line %d: field names must be plain strings", path, key.Line)
			}
			if val.Kind != yaml.ScalarNode || val.Tag == "!!null" {
				return nil, usagef("%s line %d: field %q: the value must be a plain string", path, val.Line, key.Value)
			}
			if _, dup := secret[key.Value]; dup {
				return nil, usagef("%s line %d: field %q appears twice", path, key.Line, key.Value)
			}
			secret[key.Value] = val.Value
		}
	}
	if len(secret) == 0 {
		return nil, usagef("%s holds no fields", path)
	}
	return secret, nil
}

// yamlLine keeps the line of a YAML syntax error and drops the rest, which may quote the input.
func yamlLine(err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "yaml: line "); ok {
		if n, _, ok := strings.Cut(rest, ":"); ok {
			return "syntax error on line " + n
		}
	}
	return "syntax error"
}

func (k *commands) printCredentials(raw json.RawMessage) error {
	if k.json {
		return k.writeJSON(raw)
	}
	var list []map[string]any
	if err := json.Unmarshal(raw, &list); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tENVIRONMENT\tFIELDS\tTARGETS\tKEY VERSION\tUPDATED")
	for _, c := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", text(c["id"]), text(c["name"]), text(c["environment_id"]),
			fieldList(c["fields"]), targetList(c["allowed_targets"]), text(c["key_version"]), text(firstOf(c, "updated_at", "created_at")))
	}
	return tw.Flush()
}

func (k *commands) printCredential(raw json.RawMessage) error {
	if k.json {
		return k.writeJSON(raw)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	for _, key := range []string{"id", "name", "client_id", "environment_id", "key_version", "created_at", "updated_at"} {
		fmt.Fprintf(tw, "%s:\t%s\n", key, text(c[key]))
	}
	fmt.Fprintf(tw, "fields:\t%s\n", fieldList(c["fields"]))
	fmt.Fprintf(tw, "allowed_targets:\t%s\n", targetList(c["allowed_targets"]))
	return tw.Flush()
}

// targetList prints allowed targets, or "any" when there are none.
func targetList(v any) string {
	if s := fieldList(v); s != "" {
		return s
	}
	return "any"
}

func fieldList(v any) string {
	list, _ := v.([]any)
	parts := make([]string, 0, len(list))
	for _, f := range list {
		parts = append(parts, text(f))
	}
	return strings.Join(parts, ", ")
}
