package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
)

// maxBatchRevoke is the most hosts config-api revokes in one request (hosts.MaxBatchRevoke).
const maxBatchRevoke = 1000

// hostsRevoke revokes hosts of one environment through the batch route, 1,000 a request: each request
// is all or none and costs the NATS account one update, whatever its size.
func (k *commands) hostsRevoke(ctx context.Context, args []string) error {
	if len(args) < 2 {
		return usagef("hosts revoke needs an environment id and at least one host id")
	}
	env, ids := args[0], args[1:]
	path := "/api/v1/environments/" + url.PathEscape(env) + "/hosts/revoke"
	total := 0
	for i := 0; i < len(ids); i += maxBatchRevoke {
		chunk := ids[i:min(i+maxBatchRevoke, len(ids))]
		var out struct {
			Revoked int `json:"revoked"`
		}
		if err := k.c.do(ctx, http.MethodPost, path, nil, map[string]any{"host_ids": chunk}, &out); err != nil {
			if total > 0 {
				return fmt.Errorf("%d hosts revoked; the chunk from host %s failed and later chunks were not sent: %w", total, chunk[0], err)
			}
			return err
		}
		total += out.Revoked
	}
	if k.json {
		return k.writeJSON(json.RawMessage(fmt.Sprintf(`{"revoked":%d}`, total)))
	}
	_, err := fmt.Fprintf(k.out, "revoked %d hosts\n", total)
	return err
}

// hostReissueCreds re-issues a host's NATS credentials (re-enrolment of an agent whose credentials
// expired while it was off, or that were issued before they expired): the API revokes the old NATS
// user and answers the new creds file once, which goes to -creds-out.
func (k *commands) hostReissueCreds(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hosts reissue-creds", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	credsOut := fs.String("creds-out", "", "file to write the host's new NATS credentials to (mode 0600)")
	force := fs.Bool("force", false, "overwrite an existing -creds-out file")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("hosts reissue-creds needs a host id")
	}
	if *credsOut == "" {
		return usagef("hosts reissue-creds needs -creds-out PATH: the new credentials are shown only once")
	}
	cf, err := openCredsFile(*credsOut, *force)
	if err != nil {
		return err
	}
	defer cf.abandon()
	var raw json.RawMessage
	if err := k.c.do(ctx, http.MethodPost, "/api/v1/hosts/"+url.PathEscape(pos[0])+"/credentials", nil, nil, &raw); err != nil {
		return err
	}
	var h registeredHost
	if err := json.Unmarshal(raw, &h); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	if h.NATSCredentials == "" {
		return fmt.Errorf("the API answered no NATS credentials for host %s", h.ID)
	}
	if err := cf.commit([]byte(h.NATSCredentials)); err != nil {
		return fmt.Errorf("host %s got new NATS credentials (its old ones are revoked) but they could not be saved; "+
			"run reissue-creds again: %w", h.ID, err)
	}
	fmt.Fprintf(k.errOut, "new NATS credentials of agent %s written to %s (mode 0600); install them as the agent's NATS creds file\n", h.AgentID, cf.path)
	tw := tabwriter.NewWriter(k.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id:\t%s\nagent_id:\t%s\nnats_credentials:\t%s\n", h.ID, h.AgentID, cf.path)
	return tw.Flush()
}
