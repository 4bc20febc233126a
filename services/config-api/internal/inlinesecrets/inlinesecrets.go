// Package inlinesecrets moves secrets that collectors configs hold inline (username and password,
// stored before the API refused them) into credentials, the one place secrets may live: the operator
// command `config-api migrate-inline-secrets`.
//
// For every live collectors config (environment default or host override) with an inline secret it
// creates a credential through the credential service (the path POST /credentials takes, so the
// credential service's cipher, keyring or Vault, encrypts it), rewrites each such collector to
// reference the credential by credential_id, and stores the result as a new version with a revision
// and a config-changed event, so agents receive it. Then it replaces every inline secret value left in
// config_revisions (old and new data) with "[REDACTED]". It is idempotent: rows already migrated are no
// longer found, a credential created by a run that stopped before its config was rewritten is found by
// its name and rotated to the secret instead of created again, and redacted revisions are not found
// again.
package inlinesecrets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/credentials"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// Actor is who the migration's config writes, revisions and audit events are recorded as.
const Actor = "migrate-inline-secrets"

// revisionBatch is how many revisions are read and scrubbed per round.
const revisionBatch = 500

// Revision is one config_revisions row to scrub.
type Revision struct {
	ID      int64
	OldData json.RawMessage
	NewData json.RawMessage
}

// Store finds and rewrites the rows. Update is configs.Repository's: it locks the row and stores a Write
// as a new version with a revision and an outbox event.
type Store interface {
	EnvironmentsWithInlineSecrets(ctx context.Context) ([]uuid.UUID, error)
	HostsWithInlineSecrets(ctx context.Context) ([]uuid.UUID, error)
	Update(ctx context.Context, filter uuid.NullUUID, ref configs.Ref, actor string, fn func(configs.Current) (configs.Write, error)) (configs.Record, error)
	RevisionsWithInlineSecrets(ctx context.Context, afterID int64, limit int) ([]Revision, error)
	ScrubRevision(ctx context.Context, id int64, oldData, newData json.RawMessage) error
}

// Credentials is the credential use cases of config-api (credentials.Service): validated, audited, and
// sent to the credential service.
type Credentials interface {
	Create(ctx context.Context, p tenancy.Principal, clientID uuid.UUID, in credentials.CreateInput) (protocol.CredentialMeta, error)
	List(ctx context.Context, p tenancy.Principal, clientID uuid.UUID) ([]protocol.CredentialMeta, error)
	Get(ctx context.Context, p tenancy.Principal, clientID, id uuid.UUID) (protocol.CredentialMeta, error)
	Rotate(ctx context.Context, p tenancy.Principal, clientID, id uuid.UUID, in credentials.RotateInput) (protocol.CredentialMeta, error)
}

// Summary counts what a run did.
type Summary struct {
	// Configs is the number of config rows rewritten (each a new version).
	Configs int
	// Collectors is the number of collectors that lost inline secrets.
	Collectors int
	// CredentialsCreated and CredentialsReused: credentials made for them, and ones an earlier run had
	// made (found by name, rotated to the secret).
	CredentialsCreated int
	CredentialsReused  int
	// RevisionsScrubbed is the number of config_revisions rows whose inline secret values were redacted.
	RevisionsScrubbed int
	// Failed is the number of config rows that could not be migrated (each reported); run again once
	// fixed. Their revisions are scrubbed all the same.
	Failed int
}

// Migrator runs the migration.
type Migrator struct {
	store Store
	creds Credentials
	out   io.Writer
	p     tenancy.Principal
}

// New returns a Migrator writing one progress line per config row (and a summary) to out.
func New(store Store, creds Credentials, out io.Writer) *Migrator {
	return &Migrator{store: store, creds: creds, out: out, p: tenancy.Principal{Name: Actor, IsAdmin: true}}
}

// errUnchanged: the row no longer holds inline secrets (migrated concurrently); nothing is written.
var errUnchanged = errors.New("no inline secrets left")

// Run migrates every row, then scrubs the revisions. An error is returned when the rows could not be
// listed or some row failed (Summary.Failed); the run can be repeated.
func (m *Migrator) Run(ctx context.Context) (Summary, error) {
	var sum Summary
	envs, err := m.store.EnvironmentsWithInlineSecrets(ctx)
	if err != nil {
		return sum, err
	}
	hosts, err := m.store.HostsWithInlineSecrets(ctx)
	if err != nil {
		return sum, err
	}
	refs := make([]configs.Ref, 0, len(envs)+len(hosts))
	for _, id := range envs {
		refs = append(refs, configs.Ref{Scope: protocol.ScopeEnvironment, ID: id, ConfigType: agentconfig.Collectors})
	}
	for _, id := range hosts {
		refs = append(refs, configs.Ref{Scope: protocol.ScopeHost, ID: id, ConfigType: agentconfig.Collectors})
	}
	fmt.Fprintf(m.out, "%d collectors configs hold inline secrets (%d environments, %d host overrides)\n", len(refs), len(envs), len(hosts))
	for i, ref := range refs {
		res, err := m.migrate(ctx, ref)
		switch {
		case errors.Is(err, errUnchanged):
			fmt.Fprintf(m.out, "[%d/%d] %s %s: already migrated\n", i+1, len(refs), ref.Scope, ref.ID)
		case err != nil:
			sum.Failed++
			fmt.Fprintf(m.out, "[%d/%d] %s %s: FAILED: %v\n", i+1, len(refs), ref.Scope, ref.ID, err)
		default:
			sum.Configs++
			sum.Collectors += res.collectors
			sum.CredentialsCreated += res.created
			sum.CredentialsReused += res.reused
			fmt.Fprintf(m.out, "[%d/%d] %s %s: version %d: %d collectors now reference credentials (%d created, %d reused)\n",
				i+1, len(refs), ref.Scope, ref.ID, res.version, res.collectors, res.created, res.reused)
		}
		if err := ctx.Err(); err != nil {
			return sum, err
		}
	}
	n, err := m.scrubRevisions(ctx)
	sum.RevisionsScrubbed = n
	if err != nil {
		return sum, err
	}
	fmt.Fprintf(m.out, "done: %d configs rewritten, %d collectors, %d credentials created, %d reused, %d revisions scrubbed, %d failed\n",
		sum.Configs, sum.Collectors, sum.CredentialsCreated, sum.CredentialsReused, sum.RevisionsScrubbed, sum.Failed)
	if sum.Failed > 0 {
		return sum, fmt.Errorf("%d collectors configs could not be migrated; fix them and run again", sum.Failed)
	}
	return sum, nil
}

type rowResult struct {
	version                     int64
	collectors, created, reused int
}

// migrate rewrites one config row under its lock.
func (m *Migrator) migrate(ctx context.Context, ref configs.Ref) (rowResult, error) {
	var res rowResult
	rec, err := m.store.Update(ctx, uuid.NullUUID{}, ref, Actor, func(cur configs.Current) (configs.Write, error) {
		res = rowResult{}
		if !cur.Row.Live() {
			return configs.Write{}, errUnchanged
		}
		data, err := m.rewrite(ctx, ref, cur, &res)
		if err != nil {
			return configs.Write{}, err
		}
		if res.collectors == 0 {
			return configs.Write{}, errUnchanged
		}
		return configs.Write{Action: configs.ActionPut, Data: data}, nil
	})
	if err != nil {
		return res, err
	}
	res.version = rec.Version
	return res, nil
}

// rewrite moves the inline secrets of cur's collectors into credentials and returns the new document.
func (m *Migrator) rewrite(ctx context.Context, ref configs.Ref, cur configs.Current, res *rowResult) (json.RawMessage, error) {
	var cols []map[string]json.RawMessage
	if err := json.Unmarshal(cur.Row.Data, &cols); err != nil {
		return nil, fmt.Errorf("the collectors config is not an array of objects")
	}
	for i, c := range cols {
		secret := map[string]string{}
		for _, f := range agentconfig.SecretFields() {
			raw, ok := c[f]
			if !ok {
				continue
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, fmt.Errorf("collectors[%d].%s is not a string", i, f)
			}
			secret[f] = v
		}
		if len(secret) == 0 {
			continue
		}
		id, err := m.credentialFor(ctx, ref, cur.Target, i, c, secret, res)
		clear(secret)
		if err != nil {
			return nil, err
		}
		for _, f := range agentconfig.SecretFields() {
			delete(c, f)
		}
		if id != "" {
			c["credential_id"], _ = json.Marshal(id)
		}
		res.collectors++
	}
	out, err := json.Marshal(cols)
	if err != nil {
		return nil, fmt.Errorf("encode collectors: %w", err)
	}
	return out, nil
}

// credentialFor returns the credential collector c (at index i) references once its inline secret is
// moved: a new credential (or one an earlier run created), or "" when c already references a credential
// that holds every inline field (the inline values were overwritten at injection, never delivered).
func (m *Migrator) credentialFor(ctx context.Context, ref configs.Ref, t configs.Target, i int, c map[string]json.RawMessage, secret map[string]string, res *rowResult) (string, error) {
	if raw, ok := c["credential_id"]; ok {
		var existing string
		if err := json.Unmarshal(raw, &existing); err != nil {
			return "", fmt.Errorf("collectors[%d].credential_id is not a string", i)
		}
		cid, err := uuid.Parse(existing)
		if err != nil {
			return "", fmt.Errorf("collectors[%d].credential_id is not a UUID", i)
		}
		meta, err := m.creds.Get(ctx, m.p, t.ClientID, cid)
		if err != nil {
			return "", fmt.Errorf("collectors[%d] references credential %s: %w", i, existing, err)
		}
		for f := range secret {
			if !slices.Contains(meta.Fields, f) {
				return "", fmt.Errorf("collectors[%d] references credential %s and holds %s inline, which the credential does not; "+
					"rotate the credential to hold it (or remove the field), then run again", i, existing, f)
			}
		}
		return "", nil
	}
	var typ, name string
	_ = json.Unmarshal(c["type"], &typ)
	_ = json.Unmarshal(c["name"], &name)
	credName := CredentialName(ref, typ, name)
	in := credentials.CreateInput{Name: credName, EnvironmentID: uuid.NullUUID{UUID: t.EnvironmentID, Valid: true}, Secret: secret}
	meta, err := m.creds.Create(ctx, m.p, t.ClientID, in)
	if err == nil {
		res.created++
		return meta.ID, nil
	}
	if !fault.Is(err, fault.Conflict) {
		return "", fmt.Errorf("collectors[%d]: create credential %q: %w", i, credName, err)
	}
	// An earlier run created it and stopped before the config was rewritten: reuse it, with this secret.
	metas, err := m.creds.List(ctx, m.p, t.ClientID)
	if err != nil {
		return "", fmt.Errorf("collectors[%d]: list credentials: %w", i, err)
	}
	for _, meta := range metas {
		if meta.Name != credName {
			continue
		}
		id, err := uuid.Parse(meta.ID)
		if err != nil {
			return "", fmt.Errorf("collectors[%d]: credential %q has id %q", i, credName, meta.ID)
		}
		if _, err := m.creds.Rotate(ctx, m.p, t.ClientID, id, credentials.RotateInput{Secret: secret}); err != nil {
			return "", fmt.Errorf("collectors[%d]: rotate credential %q: %w", i, credName, err)
		}
		res.reused++
		return meta.ID, nil
	}
	return "", fmt.Errorf("collectors[%d]: credential %q exists but is not listed", i, credName)
}

// maxCredentialName is the credential service's limit on names.
const maxCredentialName = 200

// CredentialName is the name of the credential made for collector typ/name of ref: readable
// ("inline environment <id> postgres/main") when the collector's name fits and is printable, else with a
// digest of it. One per collector of each row, so a re-run finds its own.
func CredentialName(ref configs.Ref, typ, name string) string {
	prefix := fmt.Sprintf("inline %s %s %s/", ref.Scope, ref.ID, typ)
	// config-api trims credential names: a name with surrounding space gets the digest form too, so a
	// re-run finds the credential by the name it was stored under.
	if utf8.ValidString(name) && strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 &&
		strings.TrimSpace(name) == name && len(prefix)+len(name) <= maxCredentialName {
		return prefix + name
	}
	sum := sha256.Sum256([]byte(name))
	return prefix + "sha256:" + hex.EncodeToString(sum[:12])
}

// scrubRevisions redacts the inline secret values of every collectors revision, in batches.
func (m *Migrator) scrubRevisions(ctx context.Context) (int, error) {
	n := 0
	var after int64
	for {
		revs, err := m.store.RevisionsWithInlineSecrets(ctx, after, revisionBatch)
		if err != nil {
			return n, err
		}
		for _, r := range revs {
			if err := m.store.ScrubRevision(ctx, r.ID, Redact(r.OldData), Redact(r.NewData)); err != nil {
				return n, err
			}
			n++
			after = r.ID
		}
		if len(revs) > 0 {
			fmt.Fprintf(m.out, "revisions: %d scrubbed\n", n)
		}
		if len(revs) < revisionBatch {
			return n, nil
		}
	}
}

// Redact returns a collectors document with the value of every secret field replaced by
// agentconfig.RedactedValue. Anything that is not an array of objects is returned as it is.
func Redact(data json.RawMessage) json.RawMessage {
	if len(data) == 0 {
		return data
	}
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		return data
	}
	redacted, _ := json.Marshal(agentconfig.RedactedValue)
	changed := false
	for i, item := range items {
		var c map[string]json.RawMessage
		if json.Unmarshal(item, &c) != nil || c == nil {
			continue
		}
		hit := false
		for _, f := range agentconfig.SecretFields() {
			if _, ok := c[f]; ok {
				c[f] = redacted
				hit = true
			}
		}
		if hit {
			items[i], _ = json.Marshal(c)
			changed = true
		}
	}
	if !changed {
		return data
	}
	out, _ := json.Marshal(items)
	return out
}
