package protocol

import (
	"encoding/json"
	"fmt"
	"time"
)

// HostRef identifies a host and the tenant it belongs to.
type HostRef struct {
	HostID        string `json:"host_id"`
	AgentID       string `json:"agent_id"`
	ClientID      string `json:"client_id"`
	EnvironmentID string `json:"environment_id"`
}

// EffectiveConfig is one resolved config type for one host. ConfigData is null when neither level has
// the type (Version then still carries the newest tombstone, if any). Provenance is present when asked.
type EffectiveConfig struct {
	ConfigType         string          `json:"config_type"`
	ConfigData         json.RawMessage `json:"config_data"`
	Version            int64           `json:"version"`
	Source             string          `json:"source,omitempty"`
	EnvironmentVersion int64           `json:"environment_version,omitempty"`
	HostVersion        int64           `json:"host_version,omitempty"`
	Provenance         json.RawMessage `json:"provenance,omitempty"`
	// Statement is the signed statement of this config for its scope (the environment when the host has
	// no row of its own for the type, else the agent); set by a resolver that signs.
	Statement *Signed `json:"statement,omitempty"`
}

// ResolveRequest asks the resolver for one host's effective configs. Exactly one of HostID and AgentID
// is set; empty Types means all registered types.
type ResolveRequest struct {
	HostID  string   `json:"host_id,omitempty"`
	AgentID string   `json:"agent_id,omitempty"`
	Types   []string `json:"types,omitempty"`
	Explain bool     `json:"explain,omitempty"`
}

// ResolveReply answers a ResolveRequest. Configs holds every requested type that has a row at either
// level (tombstones included, with null data).
type ResolveReply struct {
	Host    HostRef                    `json:"host"`
	Configs map[string]EffectiveConfig `json:"configs"`
	// Identity is the host's signed identity statement (agent id -> environment id), when signing is on.
	Identity *Signed `json:"identity,omitempty"`
}

// MaxResolveAgents is the most agent ids one ResolveSetsRequest may carry.
const MaxResolveAgents = 1000

// ResolveSetsContract is the version of the resolve_sets contract: its requests (ResolveSetsRequest,
// ResolvePushRequest) and their reply (ResolveSetsSubject and ResolvePushSubject name it too). A resolver answers only requests of its own contract (else CodeContractMismatch) and stamps its
// replies with it; delivery refuses a reply of another contract. Either way the fetch fails as
// "unavailable" and the agent retries: a rolling upgrade never misreads a reply. Bump it (and the
// subject) for any change an older peer would read differently.
const ResolveSetsContract = 1

// ResolveSetsRequest asks for the effective configs of many hosts, named by agent id, in one request
// (delivery's batched fetches). Empty Types means all registered types.
type ResolveSetsRequest struct {
	Contract int      `json:"contract"`
	AgentIDs []string `json:"agent_ids"`
	Types    []string `json:"types,omitempty"`
}

// ResolveSetsReply answers a ResolveSetsRequest with the distinct effective configs of its hosts, each
// sent once, and the distinct sets they form, each with the hosts that hold it. A host without a row of
// its own for a type shares its environment's config; hosts of one environment without overrides share
// one set. So a receiver builds one answer per set and per distinct config, never per host, and never
// has to group hosts itself.
//
// Missing lists the requested agent ids that have no host (unknown or revoked). Remaining lists agent
// ids left out to keep the reply within the NATS max payload: ask for them again. Failed lists the
// agents that cannot be answered in any reply (their configs alone exceed the max payload).
//
// The same reply answers a ResolvePushRequest: one set per distinct config of the page's type, hosts
// without a row of their own in one set; a page cut to the max payload moves NextAfter back instead of
// listing Remaining.
type ResolveSetsReply struct {
	Contract int `json:"contract"`
	// Configs are the distinct effective configs; sets name them by index. The signed statement of a
	// config (signing) rides on its entry, so it is made and sent once per distinct config.
	Configs   []EffectiveConfig `json:"configs"`
	Sets      []ConfigSet       `json:"sets"`
	Missing   []string          `json:"missing,omitempty"`
	Remaining []string          `json:"remaining,omitempty"`
	Failed    []AgentError      `json:"failed,omitempty"`
	// TrustedKeys is the current signed trusted-key list (key rotation), when the resolver has one.
	TrustedKeys *Signed `json:"trusted_keys,omitempty"`
	// NextAfter (push pages only) is the cursor of the next page; empty after the last one.
	NextAfter string `json:"next_after,omitempty"`
}

// ConfigSet is one distinct set of effective configs (one per type that has a row at either level) in
// one tenant scope, with the hosts that hold exactly that set.
type ConfigSet struct {
	ClientID      string `json:"client_id"`
	EnvironmentID string `json:"environment_id"`
	// Configs maps each config type to the index of its effective config in the reply's Configs.
	Configs map[string]int `json:"configs"`
	Hosts   []SetHost      `json:"hosts"`
}

// SetHost is a host holding a ConfigSet. Per-host statements (signing's identity) belong here.
type SetHost struct {
	HostID  string `json:"host_id"`
	AgentID string `json:"agent_id"`
	// Identity is the host's signed identity statement (agent id -> environment id), when signing is on.
	Identity *Signed `json:"identity,omitempty"`
}

// AgentError is an agent a request could not answer, and why.
type AgentError struct {
	AgentID string `json:"agent_id"`
	Error   Error  `json:"error"`
}

// Check reports whether the reply is of this contract and consistent (every index in range, every host
// in one set), so a receiver can use it without further checks.
func (r ResolveSetsReply) Check() error {
	if r.Contract != ResolveSetsContract {
		return fmt.Errorf("resolve_sets contract %d, want %d", r.Contract, ResolveSetsContract)
	}
	for i, set := range r.Sets {
		for typ, n := range set.Configs {
			if n < 0 || n >= len(r.Configs) {
				return fmt.Errorf("set %d: config %s refers to entry %d of %d", i, typ, n, len(r.Configs))
			}
			if r.Configs[n].ConfigType != typ {
				return fmt.Errorf("set %d: config %s refers to an entry of type %s", i, typ, r.Configs[n].ConfigType)
			}
		}
	}
	return nil
}

// ResolvePushRequest asks for one config type across the hosts of one environment, a page at a time (a
// config-change event's fan-out), answered in the resolve_sets contract: a ResolveSetsReply with the
// distinct configs of the page, the distinct sets they form (each with its hosts) and NextAfter.
//
// HostIDs restricts the hosts (a host-scope event names its host). EnvironmentVersion, when not 0, keeps
// only the hosts whose environment layer of the type resolves to that version: an environment-scope
// event at version V reaches the hosts it changed, not those whose environment layer is another version
// (a later event covers them; during a staged rollout they are not in a started stage). OnlineSince keeps
// only hosts with a heartbeat at or after it, and with OnlineAt also set, hosts online at OnlineAt by
// Online with the window OnlineAt - OnlineSince (a host with a long heartbeat interval of its own stays
// online longer). After is the host id cursor from the previous page; Limit caps the hosts read for the
// page (the resolver applies its own maximum).
type ResolvePushRequest struct {
	Contract           int        `json:"contract"`
	EnvironmentID      string     `json:"environment_id"`
	ConfigType         string     `json:"config_type"`
	HostIDs            []string   `json:"host_ids,omitempty"`
	EnvironmentVersion int64      `json:"environment_version,omitempty"`
	OnlineSince        *time.Time `json:"online_since,omitempty"`
	OnlineAt           *time.Time `json:"online_at,omitempty"`
	After              string     `json:"after,omitempty"`
	Limit              int        `json:"limit,omitempty"`
}

// CredentialMeta describes a stored credential. It never carries secret values.
type CredentialMeta struct {
	ID            string   `json:"id"`
	ClientID      string   `json:"client_id"`
	EnvironmentID string   `json:"environment_id,omitempty"`
	Name          string   `json:"name"`
	Fields        []string `json:"fields"`
	KeyVersion    string   `json:"key_version"`
	// AllowedTargets are the host:port patterns the credential may be injected for (canonical,
	// sorted); empty: any target.
	AllowedTargets []string  `json:"allowed_targets,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// CredentialCreateRequest stores a new credential. Secret maps field names (e.g. "password") to values.
// AllowedTargets (host:port patterns such as "db.internal:5432" or "*.prod.example.com:*") bind it to
// the collectors' targets it may be injected for; empty: any.
type CredentialCreateRequest struct {
	ClientID       string            `json:"client_id"`
	EnvironmentID  string            `json:"environment_id,omitempty"`
	Name           string            `json:"name"`
	Secret         map[string]string `json:"secret"`
	AllowedTargets []string          `json:"allowed_targets,omitempty"`
}

// CredentialRotateRequest replaces a credential's secret, or with no Secret re-encrypts it under the
// newest key. A non-nil AllowedTargets replaces the allowed targets (pointing to an empty list clears
// them: any target); nil keeps them.
type CredentialRotateRequest struct {
	ClientID       string            `json:"client_id"`
	ID             string            `json:"id"`
	Secret         map[string]string `json:"secret,omitempty"`
	AllowedTargets *[]string         `json:"allowed_targets,omitempty"`
}

// CredentialRef names one credential of a client (get, delete).
type CredentialRef struct {
	ClientID string `json:"client_id"`
	ID       string `json:"id"`
}

// CredentialListRequest lists a client's credentials, optionally those of one environment.
type CredentialListRequest struct {
	ClientID      string `json:"client_id"`
	EnvironmentID string `json:"environment_id,omitempty"`
}

// CredentialListReply answers CredentialListRequest.
type CredentialListReply struct {
	Credentials []CredentialMeta `json:"credentials"`
}

// InjectRequest asks the credential service to inline secrets into collector lists, all-or-nothing per
// item. Items that share a client, environment and collector list should be sent once.
type InjectRequest struct {
	Items []InjectItem `json:"items"`
}

// InjectItem is one collector list to inject, in the scope of one host's client and environment.
type InjectItem struct {
	Key           string          `json:"key"`
	ClientID      string          `json:"client_id"`
	EnvironmentID string          `json:"environment_id"`
	Collectors    json.RawMessage `json:"collectors"`
}

// InjectReply answers InjectRequest with one result per item, in order.
type InjectReply struct {
	Results []InjectResult `json:"results"`
}

// InjectResult is either the injected collectors with the pointers of injected values, or an error
// (code credential_failed) naming why the whole list could not be delivered.
type InjectResult struct {
	Key          string          `json:"key"`
	Collectors   json.RawMessage `json:"collectors,omitempty"`
	SecretFields []string        `json:"secret_fields,omitempty"`
	Error        *Error          `json:"error,omitempty"`
}

// AccountUpdateRequest is config-api's request on AccountUpdateSubject: the NATS account's desired
// revocation list, user public key -> Unix seconds (JWTs of the key issued at or before are refused).
// Without Force the custodian pushes only when the servers' account differs (reconciliation).
type AccountUpdateRequest struct {
	Revocations map[string]int64 `json:"revocations"`
	Force       bool             `json:"force,omitempty"`
}

// AccountUpdateReply answers an AccountUpdateRequest: whether an account JWT was pushed, or an error.
type AccountUpdateReply struct {
	Pushed bool   `json:"pushed"`
	Error  *Error `json:"error,omitempty"`
}
