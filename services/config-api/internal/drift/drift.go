// Package drift finds the hosts of an environment whose reported config state differs from what they
// should hold: a config_hash other than the expected one, per-type versions other than the
// effective versions, or an effective version the agent acknowledged as failed (with its error). The expected hash is computed exactly as the agent computes its own: over the
// effective configs as the agent caches them, collectors with injected secrets redacted — from
// credential metadata alone, never decrypting anything.
package drift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// pageSize is how many hosts one resolve covers (at most protocol.MaxResolveAgents).
const pageSize = 500

// Resolver resolves the effective configs of many hosts by agent id into their distinct config sets
// (the resolver service's resolve_sets contract, as delivery's fetches use it).
type Resolver interface {
	ResolveSets(ctx context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error)
}

// Credentials lists a client's credential metadata (the credential service).
type Credentials interface {
	List(ctx context.Context, req protocol.CredentialListRequest) ([]protocol.CredentialMeta, error)
}

// Hosts pages through an environment's hosts.
type Hosts interface {
	Hosts(ctx context.Context, environmentID uuid.UUID, after uuid.NullUUID, limit int) ([]hosts.Host, error)
}

// Environments finds an environment the caller can see (auditing cross-tenant attempts).
type Environments interface {
	Environment(ctx context.Context, p tenancy.Principal, id uuid.UUID) (tenants.Environment, error)
}

// Host is one drifted host and why.
type Host struct {
	HostID           uuid.UUID
	Hostname         string
	AgentID          string
	Online           bool
	LastHeartbeatAt  *time.Time
	ReportedHash     *string
	ExpectedHash     string
	ReportedVersions map[string]int64
	ExpectedVersions map[string]int64
	Reasons          []string
	// PendingTypes (pending hosts only) are the types the agent acked applying at the expected
	// version that its heartbeats do not report yet.
	PendingTypes []string
}

// Stale reports whether a drifted host is behind: some type it should hold is reported at a lower
// version than the expected one, or not at all (a host that never reported is behind on every type).
func (h Host) Stale() bool {
	for t, want := range h.ExpectedVersions {
		if got, ok := h.ReportedVersions[t]; !ok || got < want {
			return true
		}
	}
	return false
}

// Report is the drift of one environment. Hosts are drifted: their report disagrees with what they
// should hold (a hash or versions that differ after the report, failed applies, versions behind).
// Pending hosts differ only by types they acked at the expected version and have not reported in a
// heartbeat yet (right after a write, for up to one heartbeat interval): not drift.
type Report struct {
	EnvironmentID uuid.UUID
	CheckedHosts  int
	Hosts         []Host
	Pending       []Host
}

// Detector computes drift reports.
type Detector struct {
	environments Environments
	hosts        Hosts
	resolver     Resolver
	credentials  Credentials
	onlineWindow time.Duration
	now          func() time.Time
}

// NewDetector returns a Detector; onlineWindow decides the Online flag of reported hosts.
func NewDetector(environments Environments, hosts Hosts, resolver Resolver, credentials Credentials, onlineWindow time.Duration) *Detector {
	return &Detector{environments: environments, hosts: hosts, resolver: resolver, credentials: credentials,
		onlineWindow: onlineWindow, now: time.Now}
}

// Environment reports the drifted active hosts of an environment whose inventory labels match sel
// (all of them when sel is empty); CheckedHosts counts the selected ones.
func (d *Detector) Environment(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, sel selector.Selector) (Report, error) {
	report := Report{Hosts: []Host{}, Pending: []Host{}}
	env, err := d.walk(ctx, p, environmentID, sel, func(hd Host, drifted bool) {
		report.CheckedHosts++
		switch {
		case drifted:
			report.Hosts = append(report.Hosts, hd)
		case len(hd.PendingTypes) > 0:
			report.Pending = append(report.Pending, hd)
		}
	})
	if err != nil {
		return Report{}, err
	}
	report.EnvironmentID = env
	return report, nil
}

// Drifted is the part of an environment's Report that the fleet metrics keep: each drifted host's id
// and whether it is stale (Host.Stale), in the order of Report.Hosts.
type Drifted struct {
	EnvironmentID uuid.UUID
	HostIDs       []uuid.UUID
	Stale         []bool
}

// Drifted reports the drifted active hosts of an environment by the rules of Environment, keeping only
// their ids and stale flags: a few bytes per host, where a Report holds each drifted host's versions
// and reasons and, through them, the rows of every page of hosts it read (5-8.6 MB of heap for a pass
// over 20,000 hosts that had not reported yet, growing with the fleet).
func (d *Detector) Drifted(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, sel selector.Selector) (Drifted, error) {
	out := Drifted{HostIDs: []uuid.UUID{}, Stale: []bool{}}
	env, err := d.walk(ctx, p, environmentID, sel, func(hd Host, drifted bool) {
		if drifted {
			out.HostIDs, out.Stale = append(out.HostIDs, hd.HostID), append(out.Stale, hd.Stale())
		}
	})
	if err != nil {
		return Drifted{}, err
	}
	out.EnvironmentID = env
	return out, nil
}

// walk checks every active host of an environment whose inventory labels match sel, a page at a
// time, and hands each result to visit (drifted, or in sync with PendingTypes possibly set); it
// returns the environment's id.
func (d *Detector) walk(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, sel selector.Selector, visit func(hd Host, drifted bool)) (uuid.UUID, error) {
	env, err := d.environments.Environment(ctx, p, environmentID)
	if err != nil {
		return uuid.UUID{}, err
	}
	fields := &credentialFields{list: d.credentials, clientID: env.ClientID}
	now := d.now()
	after := uuid.NullUUID{}
	for {
		page, err := d.hosts.Hosts(ctx, env.ID, after, pageSize)
		if err != nil {
			return uuid.UUID{}, fmt.Errorf("drift: list hosts: %w", err)
		}
		active := slices.DeleteFunc(slices.Clone(page), func(h hosts.Host) bool {
			return h.RevokedAt != nil || !sel.Matches(h.Labels)
		})
		if len(active) > 0 {
			expected, err := d.expected(ctx, env.ID, active)
			if err != nil {
				return uuid.UUID{}, err
			}
			for _, h := range active {
				hd, drifted, err := compare(ctx, h, expected[h.ID], fields)
				if err != nil {
					return uuid.UUID{}, err
				}
				hd.Online = h.Online(now, d.onlineWindow)
				visit(hd, drifted)
			}
		}
		if len(page) < pageSize {
			return env.ID, nil
		}
		after = uuid.NullUUID{UUID: page[len(page)-1].ID, Valid: true}
	}
}

// expectedSet is what the hosts of one resolved config set should hold: type -> effective config
// (deleted types left out), and what follows from it alone — the expected hash, versions and
// undeliverable reasons — computed once for all its hosts (summarize), not once per host: at 100,000
// hosts of one environment the pass would otherwise redact and hash the same configs 100,000 times.
type expectedSet struct {
	configs map[string]protocol.EffectiveConfig

	done          bool
	hash          string
	types         []string // the keys of versions, sorted
	versions      map[string]int64
	undeliverable []string
}

// summarize computes the set's expected hash, versions and undeliverable reasons on first call (h is
// the host being compared, named in an error).
func (e *expectedSet) summarize(ctx context.Context, h hosts.Host, fields *credentialFields) error {
	if e.done {
		return nil
	}
	entries := make([]agentconfig.CacheEntry, 0, len(e.configs))
	versions := make(map[string]int64, len(e.configs))
	var undeliverable []string
	for _, t := range slices.Sorted(maps.Keys(e.configs)) {
		ec := e.configs[t]
		entry := agentconfig.CacheEntry{ConfigType: t, ConfigData: ec.ConfigData, Version: ec.Version}
		if t == agentconfig.Collectors {
			byCred, err := fields.forCollectors(ctx, ec.ConfigData)
			if err != nil {
				return err
			}
			if len(byCred) > 0 {
				redacted, pointers, err := agentconfig.RedactForCache(ec.ConfigData, byCred)
				if errors.Is(err, agentconfig.ErrCredentialMissing) {
					// Delivery is all-or-nothing: the agent cannot get these collectors at all.
					undeliverable = append(undeliverable, "collectors reference a credential that does not exist, so they cannot be delivered")
					versions[t] = ec.Version
					continue
				}
				if err != nil {
					return fmt.Errorf("drift: redact collectors of host %s: %w", h.ID, err)
				}
				entry.ConfigData, entry.SecretFields, entry.Redacted = redacted, pointers, len(pointers) > 0
			}
		}
		entries = append(entries, entry)
		versions[t] = ec.Version
	}
	e.hash, e.versions, e.undeliverable = agentconfig.ConfigHash(entries), versions, undeliverable
	e.types, e.done = slices.Sorted(maps.Keys(versions)), true
	return nil
}

// expected resolves every config type for a page of hosts, as the resolver answers their fetches:
// host id -> the expected set it belongs to, shared by every host of the page that resolved to the
// same set. A host revoked meanwhile has an empty one.
func (d *Detector) expected(ctx context.Context, environmentID uuid.UUID, page []hosts.Host) (map[uuid.UUID]*expectedSet, error) {
	out := make(map[uuid.UUID]*expectedSet, len(page))
	byAgent := make(map[string]uuid.UUID, len(page))
	ids := make([]string, 0, len(page))
	none := &expectedSet{configs: map[string]protocol.EffectiveConfig{}}
	for _, h := range page {
		out[h.ID] = none
		byAgent[h.AgentID] = h.ID
		ids = append(ids, h.AgentID)
	}
	for len(ids) > 0 {
		reply, err := d.resolver.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: ids})
		if err != nil {
			return nil, fmt.Errorf("drift: resolve: %w", err)
		}
		if err := reply.Check(); err != nil {
			// Another contract (a rolling upgrade): never guess at its meaning.
			return nil, fault.ServiceUnavailable("resolver service failed", err)
		}
		if len(reply.Failed) > 0 {
			// A host whose configs alone exceed the NATS max payload.
			return nil, fault.ServiceUnavailable("resolver service failed", &reply.Failed[0].Error)
		}
		for _, set := range reply.Sets {
			if set.EnvironmentID != environmentID.String() {
				continue
			}
			want := &expectedSet{configs: make(map[string]protocol.EffectiveConfig, len(set.Configs))}
			for typ, n := range set.Configs {
				if ec := reply.Configs[n]; !agentconfig.IsNull(ec.ConfigData) {
					want.configs[typ] = ec
				}
			}
			for _, h := range set.Hosts {
				if id, ok := byAgent[h.AgentID]; ok {
					out[id] = want
				}
			}
		}
		if len(reply.Remaining) >= len(ids) {
			return nil, fault.ServiceUnavailable("resolver service failed", errors.New("no host of the page answered"))
		}
		ids = reply.Remaining
	}
	return out, nil
}

// compare checks one host's report against its expected set.
func compare(ctx context.Context, h hosts.Host, expected *expectedSet, fields *credentialFields) (Host, bool, error) {
	if err := expected.summarize(ctx, h, fields); err != nil {
		return Host{}, false, err
	}
	hash, versions := expected.hash, expected.versions
	out := Host{
		HostID:           h.ID,
		Hostname:         h.Hostname,
		AgentID:          h.AgentID,
		LastHeartbeatAt:  h.LastHeartbeatAt,
		ReportedHash:     h.ConfigHash,
		ExpectedHash:     hash,
		ReportedVersions: h.ConfigVersions,
		ExpectedVersions: versions,
	}
	out.Reasons = append(out.Reasons, expected.undeliverable...)
	// A failed apply of the version the host should hold (its local policy refused it, or it did not
	// apply) is drift whatever its heartbeat says: it runs something else.
	for _, t := range expected.types {
		if a, ok := h.ApplyStatus[t]; ok && a.Status == protocol.AckFailed && a.Version >= versions[t] {
			out.Reasons = append(out.Reasons, fmt.Sprintf("%s: version %d failed to apply: %s", t, a.Version, a.Error))
		}
	}
	if h.ConfigHash == nil {
		out.Reasons = append(out.Reasons, "the agent has not reported its config state yet")
		return out, true, nil
	}
	// pending: the agent acked applying the expected version; its next heartbeat will say so.
	pending := func(t string) bool {
		a, ok := h.ApplyStatus[t]
		return ok && a.Status == protocol.AckApplied && a.Version >= versions[t]
	}
	var behind []string
	for _, t := range expected.types {
		got, ok := h.ConfigVersions[t]
		switch {
		case ok && got == versions[t]:
		case (!ok || got < versions[t]) && pending(t):
			out.PendingTypes = append(out.PendingTypes, t)
		case !ok:
			behind = append(behind, fmt.Sprintf("%s: not reported, expected version %d", t, versions[t]))
		case got < versions[t]:
			behind = append(behind, fmt.Sprintf("%s: version %d is behind the expected version %d", t, got, versions[t]))
		default:
			behind = append(behind, fmt.Sprintf("%s: version %d differs from the expected version %d", t, got, versions[t]))
		}
	}
	for _, t := range slices.Sorted(maps.Keys(h.ConfigVersions)) {
		if _, ok := versions[t]; !ok {
			behind = append(behind, fmt.Sprintf("%s: reported (version %d) but no longer configured", t, h.ConfigVersions[t]))
		}
	}
	// The reported hash covers the reported versions: when every difference is a pending type, the
	// hash differs for that reason alone.
	if *h.ConfigHash != hash && (len(behind) > 0 || len(out.PendingTypes) == 0 || len(out.Reasons) > 0) {
		out.Reasons = append(out.Reasons, "config_hash differs from the expected hash")
	}
	out.Reasons = append(out.Reasons, behind...)
	for _, t := range slices.Sorted(maps.Keys(h.Repairs)) {
		r := h.Repairs[t]
		if r.Version == versions[t] && !slices.Contains(out.PendingTypes, t) {
			out.Reasons = append(out.Reasons, fmt.Sprintf("%s: still behind after %d repair attempts since %s (anti-entropy backs off)",
				t, r.Attempts, r.FirstAt.UTC().Format(time.RFC3339)))
		}
	}
	if len(out.Reasons) > 0 {
		out.PendingTypes = nil
		return out, true, nil
	}
	return out, false, nil
}

// credentialFields loads a client's credential field names once, on first need.
type credentialFields struct {
	list     Credentials
	clientID uuid.UUID
	loaded   bool
	fields   map[string][]string
}

// forCollectors returns the field names of the credentials a collectors config references.
func (c *credentialFields) forCollectors(ctx context.Context, collectors json.RawMessage) (map[string][]string, error) {
	ids, err := agentconfig.CredentialIDs(collectors)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	if !c.loaded {
		metas, err := c.list.List(ctx, protocol.CredentialListRequest{ClientID: c.clientID.String()})
		if err != nil {
			return nil, fmt.Errorf("drift: list credentials: %w", err)
		}
		c.fields = make(map[string][]string, len(metas))
		for _, m := range metas {
			c.fields[m.ID] = m.Fields
		}
		c.loaded = true
	}
	out := make(map[string][]string, len(ids))
	for _, id := range ids {
		if f, ok := c.fields[id]; ok {
			out[id] = f
		}
	}
	return out, nil
}

// Hosts checks the given hosts of an environment (a page the caller already listed, e.g. in the web
// console) by the same rules as Environment and returns each active one's result by host id, drifted or
// not (Reasons empty when in sync). Hosts of other environments and revoked hosts are left out.
func (d *Detector) Hosts(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, hs []hosts.Host) (map[uuid.UUID]Host, error) {
	env, err := d.environments.Environment(ctx, p, environmentID)
	if err != nil {
		return nil, err
	}
	active := slices.DeleteFunc(slices.Clone(hs), func(h hosts.Host) bool { return h.RevokedAt != nil || h.EnvironmentID != env.ID })
	out := make(map[uuid.UUID]Host, len(active))
	if len(active) == 0 {
		return out, nil
	}
	expected, err := d.expected(ctx, env.ID, active)
	if err != nil {
		return nil, err
	}
	fields := &credentialFields{list: d.credentials, clientID: env.ClientID}
	now := d.now()
	for _, h := range active {
		hd, _, err := compare(ctx, h, expected[h.ID], fields)
		if err != nil {
			return nil, err
		}
		hd.Online = h.Online(now, d.onlineWindow)
		out[h.ID] = hd
	}
	return out, nil
}
