// Package hosts registers hosts (one agent each) in an environment, lists them with the config state
// their agents report, and revokes them.
package hosts

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// Host is a registered host and the config state its agent last reported.
type Host struct {
	ID            uuid.UUID
	ClientID      uuid.UUID
	EnvironmentID uuid.UUID
	Hostname      string
	AgentID       string
	// Labels are the operator's inventory labels (never set by the agent); never nil when read.
	Labels          selector.Labels
	CreatedAt       time.Time
	RevokedAt       *time.Time
	AgentVersion    *string
	ConfigHash      *string
	ConfigVersion   *int64
	ConfigVersions  map[string]int64
	LastHeartbeatAt *time.Time
	// HeartbeatInterval is the period the agent reports it heartbeats at (0: not reported).
	HeartbeatInterval time.Duration
	ApplyStatus       map[string]ApplyStatus
	// Repairs are the anti-entropy repairs asked for this host and not closed yet, by type.
	Repairs map[string]Repair

	// NATSPublicKey is the agent's NATS user key, when config-api issued its credentials.
	NATSPublicKey string
	// NATSExpiresAt is when the latest JWT issued for the host's NATS user expires (zero: none issued,
	// or only one without expiry).
	NATSExpiresAt time.Time
	// NATSCredentials is the agent's NATS creds file, set only in Register's result (shown once).
	NATSCredentials string
}

// ApplyStatus is the last apply result an agent acknowledged for one config type.
type ApplyStatus struct {
	Version   int64     `json:"version"`
	Status    string    `json:"status"`
	Error     string    `json:"error,omitempty"`
	AppliedAt time.Time `json:"applied_at"`
}

// Repair is an open anti-entropy repair of one type: the host reported an older version than Version
// at Attempts heartbeats since FirstAt, and delivery was asked to send it that many times (backing off).
type Repair struct {
	Version  int64     `json:"version"`
	Attempts int       `json:"attempts"`
	FirstAt  time.Time `json:"first_at"`
	LastAt   time.Time `json:"last_at"`
}

// Online reports whether the host is active and online at now by protocol.Online: its last heartbeat
// is within window, or within its own heartbeat interval's allowance when that is longer. Delivery
// chooses the hosts it pushes to by the same rule.
func (h Host) Online(now time.Time, window time.Duration) bool {
	return h.RevokedAt == nil && protocol.Online(now, h.LastHeartbeatAt, window, h.HeartbeatInterval)
}

// Store persists hosts. Missing hosts fail with fault.NotFound, a duplicate hostname or agent id with
// fault.Conflict.
type Store interface {
	CreateHost(ctx context.Context, h Host) (Host, error)
	// CreateHosts registers hosts of one environment (all with the same ClientID and EnvironmentID) at
	// once, all or none, and returns them in the order given. When some collide with existing hosts it
	// creates none and fails with a *ConflictError naming them (or, when it cannot tell which, with
	// fault.Conflict).
	CreateHosts(ctx context.Context, hs []Host) ([]Host, error)
	Host(ctx context.Context, filter uuid.NullUUID, id uuid.UUID) (Host, error)
	// Hosts returns up to limit hosts of an environment with an id greater than after, by id.
	Hosts(ctx context.Context, environmentID uuid.UUID, after uuid.NullUUID, limit int) ([]Host, error)
	// PatchLabels applies patch to the labels of the hosts of ids within filter (a client) and, when
	// valid, environmentID, and calls check with each updated host's resulting labels; when check
	// fails nothing is written. It returns the ids of the hosts it updated.
	PatchLabels(ctx context.Context, filter, environmentID uuid.NullUUID, ids []uuid.UUID, patch LabelPatch,
		check func(map[uuid.UUID]selector.Labels) error) ([]uuid.UUID, error)
	RevocationStore
}

// Environments finds an environment the caller can see (auditing cross-tenant attempts).
type Environments interface {
	Environment(ctx context.Context, p tenancy.Principal, id uuid.UUID) (tenants.Environment, error)
}

// ConflictError is CreateHosts' answer when entries of the batch collide with existing hosts.
type ConflictError struct {
	// Conflicts are the colliding entries, by index in the batch.
	Conflicts []Conflict
}

// Conflict is one batch entry that collides with an existing host.
type Conflict struct {
	Index int
	// AgentID is true when a host with the entry's agent id exists (in any environment); otherwise a
	// host of the environment has its hostname.
	AgentID bool
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%d batch entries collide with existing hosts", len(e.Conflicts))
}

// MaxBatchHosts caps one batch registration. 1,000 entries with the longest hostname and agent_id are
// about 415 KB of JSON, well inside the API's 1 MiB body limit.
const MaxBatchHosts = 1000

// Registration is one host to register: an empty AgentID is generated (a UUID). Only an admin may
// give one (to import hosts whose agents already run with an id): agent ids are global NATS identities
// (the agent's user name and subject token), so a client token choosing one could probe whether
// another tenant uses it, or claim an id another tenant's agent runs under.
type Registration struct {
	Hostname string
	AgentID  string
	Labels   selector.Labels
}

// The rules a Registration must meet.
const (
	ruleHostname    = "must be 1 to 255 characters"
	ruleHostnameNUL = "must not contain NUL characters"
	ruleAgentID     = "must be 1 to 128 letters, digits, '-' or '_'"
	ruleAgentIDSet  = "is chosen by the server; only an admin token may register hosts with given agent ids (leave it out)"
)

// normalize trims the hostname, checks both fields and generates a missing agent id. When a rule is
// broken it returns the field's name and the rule.
func (r Registration) normalize(p tenancy.Principal) (Registration, string, string) {
	if r.AgentID != "" && !p.Admin() {
		return r, "agent_id", ruleAgentIDSet
	}
	r.Hostname = strings.TrimSpace(r.Hostname)
	if r.Hostname == "" || len(r.Hostname) > 255 {
		return r, "hostname", ruleHostname
	}
	if strings.ContainsRune(r.Hostname, 0) {
		// PostgreSQL text cannot hold NUL: without this check the insert fails as an internal error.
		return r, "hostname", ruleHostnameNUL
	}
	if r.AgentID == "" {
		r.AgentID = uuid.NewString()
	} else if !protocol.ValidAgentID(r.AgentID) {
		return r, "agent_id", ruleAgentID
	}
	if err := r.Labels.Validate(); err != nil {
		return r, "labels", err.Error()
	}
	if r.Labels == nil {
		r.Labels = selector.Labels{}
	}
	return r, "", ""
}

// Page limits.
const (
	DefaultPageSize = 500
	MaxPageSize     = 5000
)

// Page is one page of an environment's hosts. NextAfter is set when more hosts follow.
type Page struct {
	Hosts     []Host
	NextAfter *uuid.UUID
}

// DefaultOnlineWindow is the deployment's online window when none is configured.
const DefaultOnlineWindow = 90 * time.Second

// Service is the host use cases.
type Service struct {
	store        Store
	environments Environments
	guard        *tenancy.Guard
	identity     *NATSIdentity
	onlineWindow time.Duration
	statements   IdentityStatements
	now          func() time.Time
}

// IdentityStatements has the identity statements of newly registered hosts signed and stored (by the
// resolver, the only holder of the signing key) when they are registered, so that the first herd of a
// new fleet reads them instead of signing one per host. Best effort: it logs its failures, and a host
// whose statement was not made here gets it at its first fetch.
type IdentityStatements interface {
	SignIdentities(ctx context.Context, agentIDs []string)
}

// SignIdentitiesAtRegistration makes Register and RegisterBatch have the new hosts' identity
// statements signed once the hosts are stored.
func (s *Service) SignIdentitiesAtRegistration(statements IdentityStatements) {
	s.statements = statements
}

// signIdentities asks for the identity statements of hosts just registered (when configured).
func (s *Service) signIdentities(ctx context.Context, hosts []Host) {
	if s.statements == nil || len(hosts) == 0 {
		return
	}
	ids := make([]string, len(hosts))
	for i, h := range hosts {
		ids[i] = h.AgentID
	}
	s.statements.SignIdentities(ctx, ids)
}

// NewService returns a Service. identity may be nil (no per-agent NATS credentials); its zero limits
// take their defaults. onlineWindow is config-api's online window (0: DefaultOnlineWindow).
func NewService(store Store, environments Environments, guard *tenancy.Guard, identity *NATSIdentity, onlineWindow time.Duration) *Service {
	if identity != nil {
		id := identity.withDefaults()
		identity = &id
	}
	if onlineWindow <= 0 {
		onlineWindow = DefaultOnlineWindow
	}
	return &Service{store: store, environments: environments, guard: guard, identity: identity, onlineWindow: onlineWindow, now: time.Now}
}

// Online reports whether h is online now, by Host.Online over the deployment's online window.
func (s *Service) Online(h Host) bool {
	return h.Online(s.now(), s.onlineWindow)
}

// Register adds a host to an environment with its inventory labels and audits it (host_registered). An
// empty AgentID is generated (a UUID); a given one (admin only) must be usable as a NATS subject token.
func (s *Service) Register(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, reg Registration) (Host, error) {
	reg, field, rule := reg.normalize(p)
	if field != "" {
		return Host{}, fault.Invalidf("%s %s", field, rule)
	}
	hostname, agentID := reg.Hostname, reg.AgentID
	env, err := s.environments.Environment(ctx, p, environmentID)
	if err != nil {
		return Host{}, err
	}
	host := Host{
		ClientID:      env.ClientID,
		EnvironmentID: env.ID,
		Hostname:      hostname,
		AgentID:       agentID,
		Labels:        reg.Labels,
	}
	var creds []byte
	if s.identity != nil {
		host.NATSExpiresAt = s.identity.expiry()
		creds, host.NATSPublicKey, err = s.identity.Issuer.Issue(agentID, host.NATSExpiresAt)
		if err != nil {
			return Host{}, fmt.Errorf("hosts: issue NATS credentials: %w", err)
		}
	}
	h, err := s.store.CreateHost(ctx, host)
	if err != nil {
		return Host{}, fmt.Errorf("hosts: register: %w", err)
	}
	h.NATSPublicKey = host.NATSPublicKey
	h.NATSCredentials = string(creds)
	s.signIdentities(ctx, []Host{h})
	s.guard.Record(ctx, p, tenancy.ActionHostRegistered, uuid.NullUUID{UUID: env.ClientID, Valid: true},
		tenancy.KindHost, h.ID, map[string]any{"environment_id": env.ID.String(), "agent_id": agentID, "nats_user": creds != nil})
	return h, nil
}

// RegisterBatch adds 1 to MaxBatchHosts hosts to an environment, all or none, and returns them in the
// order given, each with its own NATS credentials when an Identity is configured (as Register does).
// Every entry is checked first, by Register's rules; errors name the entry (hosts[i]). Two entries with
// the same agent_id or hostname are invalid; an entry whose agent_id or hostname is already registered
// is a conflict and nothing is created. One audit event records the batch (environment and count).
func (s *Service) RegisterBatch(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, regs []Registration) ([]Host, error) {
	if len(regs) == 0 || len(regs) > MaxBatchHosts {
		return nil, fault.Invalidf("hosts must list 1 to %d hosts, not %d", MaxBatchHosts, len(regs))
	}
	clean := make([]Registration, len(regs))
	agentIDs := make(map[string]int, len(regs))
	hostnames := make(map[string]int, len(regs))
	for i, r := range regs {
		r, field, rule := r.normalize(p)
		if field != "" {
			return nil, fault.Invalidf("hosts[%d].%s: %s", i, field, rule)
		}
		if j, dup := agentIDs[r.AgentID]; dup {
			return nil, fault.Invalidf("hosts[%d].agent_id: the same as hosts[%d].agent_id", i, j)
		}
		if j, dup := hostnames[r.Hostname]; dup {
			return nil, fault.Invalidf("hosts[%d].hostname: the same as hosts[%d].hostname", i, j)
		}
		agentIDs[r.AgentID], hostnames[r.Hostname] = i, i
		clean[i] = r
	}
	env, err := s.environments.Environment(ctx, p, environmentID)
	if err != nil {
		return nil, err
	}
	batch := make([]Host, len(clean))
	for i, r := range clean {
		batch[i] = Host{ClientID: env.ClientID, EnvironmentID: env.ID, Hostname: r.Hostname, AgentID: r.AgentID, Labels: r.Labels}
	}
	var creds [][]byte
	if s.identity != nil {
		expires := s.identity.expiry()
		for i := range batch {
			batch[i].NATSExpiresAt = expires
		}
		if creds, err = s.issueAll(batch); err != nil {
			return nil, fmt.Errorf("hosts: issue NATS credentials: %w", err)
		}
	}
	created, err := s.store.CreateHosts(ctx, batch)
	if ce := (*ConflictError)(nil); errors.As(err, &ce) {
		return nil, conflictFault(ce, clean, p)
	}
	if err != nil {
		return nil, fmt.Errorf("hosts: register batch: %w", err)
	}
	for i := range created {
		created[i].NATSPublicKey = batch[i].NATSPublicKey
		if creds != nil {
			created[i].NATSCredentials = string(creds[i])
		}
	}
	s.signIdentities(ctx, created)
	s.guard.Record(ctx, p, tenancy.ActionHostsRegistered, uuid.NullUUID{UUID: env.ClientID, Valid: true},
		tenancy.KindEnvironment, env.ID, map[string]any{"hosts": len(created), "nats_users": len(creds)})
	return created, nil
}

// issueAll issues every host of batch its NATS user (setting NATSPublicKey) and returns the creds files
// in batch order. Each is a key pair and a signed JWT, about 0.25 ms of CPU (measured on a loaded
// 2-core machine); a full batch is spread over the cores.
func (s *Service) issueAll(batch []Host) ([][]byte, error) {
	creds := make([][]byte, len(batch))
	workers := min(runtime.GOMAXPROCS(0), len(batch))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(batch); i += workers {
				c, pub, err := s.identity.Issuer.Issue(batch[i].AgentID, batch[i].NATSExpiresAt)
				if err != nil {
					errs[w] = err
					return
				}
				creds[i], batch[i].NATSPublicKey = c, pub
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return creds, nil
}

// conflictFault names the first colliding entry of a batch and how many collide. Only an admin hears
// about agent ids: a client's entries carry generated ones, and telling it that one collides would
// say that a host of some other tenant has it; a client hears only of its own environment's hostnames.
func conflictFault(ce *ConflictError, regs []Registration, p tenancy.Principal) error {
	if !p.Admin() {
		var own []Conflict
		for _, c := range ce.Conflicts {
			if !c.AgentID {
				own = append(own, c)
			}
		}
		ce = &ConflictError{Conflicts: own}
	}
	if len(ce.Conflicts) == 0 {
		return &fault.Error{Kind: fault.Conflict, Message: "a host of the batch already exists; nothing was registered", Err: ce}
	}
	first := ce.Conflicts[0]
	msg := fmt.Sprintf("hosts[%d].hostname: a host of this environment already has this hostname", first.Index)
	if first.AgentID {
		// Agent ids are letters, digits, '-' and '_' only, so naming one cannot inject anything.
		msg = fmt.Sprintf("hosts[%d].agent_id: a host with agent_id %q already exists", first.Index, regs[first.Index].AgentID)
	}
	if n := len(ce.Conflicts); n > 1 {
		msg += fmt.Sprintf(" (%d entries collide with existing hosts)", n)
	}
	return &fault.Error{Kind: fault.Conflict, Message: msg + "; nothing was registered", Err: ce}
}

// List returns a page of an environment's hosts whose inventory labels match sel (every host when sel
// is empty). Hosts are matched here, page by page of the store, so the cursor stays the host id.
func (s *Service) List(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, sel selector.Selector, after uuid.NullUUID, limit int) (Page, error) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	if limit > MaxPageSize {
		return Page{}, fault.Invalidf("limit must be at most %d", MaxPageSize)
	}
	if _, err := s.environments.Environment(ctx, p, environmentID); err != nil {
		return Page{}, err
	}
	var matched []Host
	for {
		hs, err := s.store.Hosts(ctx, environmentID, after, limit+1)
		if err != nil {
			return Page{}, fmt.Errorf("hosts: list: %w", err)
		}
		for _, h := range hs {
			if sel.Matches(h.Labels) {
				matched = append(matched, h)
			}
		}
		if len(matched) > limit || len(hs) <= limit {
			break
		}
		after = uuid.NullUUID{UUID: hs[len(hs)-1].ID, Valid: true}
	}
	page := Page{Hosts: matched}
	if len(matched) > limit {
		page.Hosts = matched[:limit]
		next := matched[limit-1].ID
		page.NextAfter = &next
	}
	return page, nil
}

// Get returns one host the caller can see.
func (s *Service) Get(ctx context.Context, p tenancy.Principal, id uuid.UUID) (Host, error) {
	return tenancy.Visible(ctx, s.guard, p, tenancy.KindHost, id, "hosts: get", s.store.Host)
}
