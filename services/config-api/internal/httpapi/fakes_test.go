package httpapi

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/credentials"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
	"github.com/configsync/configsync/services/config-api/internal/tokens"
)

// The objects the in-memory backend knows; everything else is not found.
var (
	memClient = uuid.MustParse("0c000000-0000-4000-8000-000000000001")
	memEnv    = uuid.MustParse("0e000000-0000-4000-8000-000000000001")
	memHost   = uuid.MustParse("0f000000-0000-4000-8000-000000000001")
	memCred   = uuid.MustParse("0d000000-0000-4000-8000-000000000001")
	memToken  = uuid.MustParse("0a000000-0000-4000-8000-000000000001")
)

// memAdminToken is the bearer token of the backend's one (admin) API token.
const memAdminToken = tokens.Prefix + "fuzz-admin"

// revisionData is a valid config of each type, what the backend's revision 1 of that type holds.
var revisionData = map[string]json.RawMessage{
	"collectors":       json.RawMessage(`[{"type":"tcp","name":"ssh","address":"localhost:22"}]`),
	"intervals":        json.RawMessage(`{"metrics":"30s"}`),
	"labels":           json.RawMessage(`{"static":{"env":"prod"}}`),
	"change_detection": json.RawMessage(`{"enabled":true}`),
	"log_collection":   json.RawMessage(`{"files":[]}`),
	"agent_settings":   json.RawMessage(`{"log_level":"info"}`),
	"watch_files":      json.RawMessage(`{"paths":["/etc"]}`),
	"healthcheck":      json.RawMessage(`{"interval_seconds":30}`),
	"tracing":          json.RawMessage(`{"enabled":false}`),
	"log_shipping":     json.RawMessage(`{"enabled":true,"level":"warn"}`),
}

// memBackend is every port config-api's use cases need, in memory and never failing, so that whatever
// a request body turns into is decided by the HTTP edge and the use cases alone. It records the config
// data and secrets that reached it.
type memBackend struct {
	mu      sync.Mutex
	written []configs.Write // config writes that reached the repository
	secrets []map[string]string
}

func (b *memBackend) record(w configs.Write) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.written = append(b.written, w)
}

// takeWrites returns and forgets the config writes recorded so far.
func (b *memBackend) takeWrites() []configs.Write {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.written
	b.written = nil
	return w
}

// takeSecrets returns and forgets the secrets sent to the credential service so far.
func (b *memBackend) takeSecrets() []map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.secrets
	b.secrets = nil
	return s
}

// newMemAPI returns config-api's routes over an in-memory backend.
func newMemAPI(log *zap.Logger) (*mux.Router, *memBackend) {
	b := &memBackend{}
	guard := tenancy.NewGuard(b, b, log)
	tenantSvc := tenants.NewService(b, guard)
	hostSvc := hosts.NewService(b, tenantSvc, guard, nil, 0)
	configSvc := configs.NewService(b, tenantSvc, hostSvc, b, guard)
	api := New(Services{
		Tokens:      tokens.NewService(b, guard),
		Tenants:     tenantSvc,
		Hosts:       hostSvc,
		Configs:     configSvc,
		Credentials: credentials.NewService(b, configSvc, tenantSvc, guard),
	}, log, Options{})
	r := mux.NewRouter()
	api.Register(r)
	return r, b
}

var memCreated = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// tokens.Store

func (b *memBackend) CreateToken(_ context.Context, name string, _ []byte, clientID uuid.NullUUID) (tokens.Token, error) {
	return tokens.Token{ID: uuid.New(), Name: name, ClientID: clientID, CreatedAt: memCreated}, nil
}

func (b *memBackend) TokenByHash(_ context.Context, hash []byte) (tokens.Token, error) {
	if string(hash) != string(tokens.Hash(memAdminToken)) {
		return tokens.Token{}, fault.NotFoundf("token not found")
	}
	now := time.Now()
	return tokens.Token{ID: memToken, Name: "fuzz-admin", CreatedAt: memCreated, LastUsedAt: &now}, nil
}

func (b *memBackend) TouchToken(context.Context, uuid.UUID) error { return nil }

func (b *memBackend) RevokeToken(_ context.Context, id uuid.UUID) (bool, error) {
	return id == memToken, nil
}

func (b *memBackend) ClientExists(_ context.Context, id uuid.UUID) (bool, error) {
	return id == memClient, nil
}

// tenancy.Owners and tenancy.AuditLog

func (b *memBackend) OwnerOf(context.Context, tenancy.Kind, uuid.UUID) (uuid.UUID, bool, error) {
	return uuid.Nil, false, nil
}

func (b *memBackend) RecordAudit(context.Context, tenancy.AuditEvent) error { return nil }

// tenants.Store

func (b *memBackend) CreateClient(_ context.Context, name string) (tenants.Client, error) {
	return tenants.Client{ID: uuid.New(), Name: name, CreatedAt: memCreated}, nil
}

func (b *memBackend) Client(_ context.Context, _ uuid.NullUUID, id uuid.UUID) (tenants.Client, error) {
	if id != memClient {
		return tenants.Client{}, fault.NotFoundf("client not found")
	}
	return tenants.Client{ID: memClient, Name: "acme", CreatedAt: memCreated}, nil
}

func (b *memBackend) Clients(ctx context.Context, filter uuid.NullUUID) ([]tenants.Client, error) {
	c, _ := b.Client(ctx, filter, memClient)
	return []tenants.Client{c}, nil
}

func (b *memBackend) CreateEnvironment(_ context.Context, clientID uuid.UUID, name string) (tenants.Environment, error) {
	return tenants.Environment{ID: uuid.New(), ClientID: clientID, Name: name, CreatedAt: memCreated}, nil
}

func (b *memBackend) Environment(_ context.Context, _ uuid.NullUUID, id uuid.UUID) (tenants.Environment, error) {
	if id != memEnv {
		return tenants.Environment{}, fault.NotFoundf("environment not found")
	}
	return tenants.Environment{ID: memEnv, ClientID: memClient, Name: "prod", CreatedAt: memCreated}, nil
}

func (b *memBackend) Environments(ctx context.Context, _ uuid.UUID) ([]tenants.Environment, error) {
	e, _ := b.Environment(ctx, uuid.NullUUID{}, memEnv)
	return []tenants.Environment{e}, nil
}

// hosts.Store

func (b *memBackend) CreateHost(_ context.Context, h hosts.Host) (hosts.Host, error) {
	h.ID, h.CreatedAt = uuid.New(), memCreated
	return h, nil
}

func (b *memBackend) CreateHosts(ctx context.Context, hs []hosts.Host) ([]hosts.Host, error) {
	out := make([]hosts.Host, len(hs))
	for i, h := range hs {
		out[i], _ = b.CreateHost(ctx, h)
	}
	return out, nil
}

func (b *memBackend) Host(_ context.Context, _ uuid.NullUUID, id uuid.UUID) (hosts.Host, error) {
	if id != memHost {
		return hosts.Host{}, fault.NotFoundf("host not found")
	}
	return hosts.Host{ID: memHost, ClientID: memClient, EnvironmentID: memEnv, Hostname: "web-1", AgentID: "agent-1", CreatedAt: memCreated}, nil
}

func (b *memBackend) Hosts(ctx context.Context, _ uuid.UUID, _ uuid.NullUUID, _ int) ([]hosts.Host, error) {
	h, _ := b.Host(ctx, uuid.NullUUID{}, memHost)
	return []hosts.Host{h}, nil
}

func (b *memBackend) PatchLabels(_ context.Context, _, _ uuid.NullUUID, ids []uuid.UUID, patch hosts.LabelPatch,
	check func(map[uuid.UUID]selector.Labels) error) ([]uuid.UUID, error) {
	res := map[uuid.UUID]selector.Labels{}
	for _, id := range ids {
		if id == memHost {
			res[id] = maps.Clone(patch.Set)
		}
	}
	if err := check(res); err != nil {
		return nil, err
	}
	return slices.Collect(maps.Keys(res)), nil
}

func (b *memBackend) RevokeHosts(_ context.Context, _, _ uuid.NullUUID, ids []uuid.UUID, _ hosts.RevocationLimits) (int, error) {
	for i, id := range ids {
		if id != memHost {
			return 0, &hosts.MissingHostsError{Indexes: []int{i}}
		}
	}
	return 0, nil
}

func (b *memBackend) ReplaceNATSKey(context.Context, uuid.NullUUID, uuid.UUID, string, time.Time, hosts.RevocationLimits) error {
	return nil
}

func (b *memBackend) RenewNATSExpiry(context.Context, string, string, time.Time, time.Time) error {
	return fault.NotFoundf("host not found")
}

func (b *memBackend) WithRevocations(_ context.Context, _ time.Time, fn func(map[string]time.Time) error) error {
	return fn(map[string]time.Time{})
}

// configs.Repository

func (b *memBackend) Update(_ context.Context, _ uuid.NullUUID, ref configs.Ref, actor string, fn func(configs.Current) (configs.Write, error)) (configs.Record, error) {
	target := configs.Target{Scope: ref.Scope, ClientID: memClient, EnvironmentID: memEnv}
	switch {
	case ref.Scope == protocol.ScopeEnvironment && ref.ID == memEnv:
	case ref.Scope == protocol.ScopeHost && ref.ID == memHost:
		target.HostID, target.AgentID = memHost, "agent-1"
	default:
		return configs.Record{}, configs.ErrNoTarget
	}
	w, err := fn(configs.Current{Target: target})
	if err != nil {
		return configs.Record{}, err
	}
	b.record(w)
	rec := configs.Record{ID: uuid.New(), Scope: ref.Scope, EnvironmentID: memEnv, ConfigType: ref.ConfigType,
		Data: w.Data, Version: 2, UpdatedBy: actor, CreatedAt: memCreated, UpdatedAt: memCreated}
	if ref.Scope == protocol.ScopeHost {
		rec.HostID = memHost
	}
	return rec, nil
}

func (b *memBackend) EnvironmentConfig(_ context.Context, _ uuid.UUID, configType string) (configs.Record, error) {
	return configs.Record{}, fault.NotFoundf("no %s config", configType)
}

func (b *memBackend) EnvironmentConfigs(context.Context, uuid.UUID) ([]configs.Record, error) {
	return nil, nil
}

func (b *memBackend) Revisions(context.Context, configs.Ref, int) ([]configs.Revision, error) {
	return nil, nil
}

func (b *memBackend) Revision(_ context.Context, ref configs.Ref, version int64) (configs.Revision, error) {
	data, ok := revisionData[ref.ConfigType]
	if !ok || version != 1 {
		return configs.Revision{}, fault.NotFoundf("revision not found")
	}
	return configs.Revision{ID: 1, Version: 1, Action: configs.ActionPut, NewData: data, Actor: "fuzz-admin", CreatedAt: memCreated}, nil
}

func (b *memBackend) AffectedHosts(context.Context, uuid.UUID, string, int) ([]configs.AffectedHost, int, error) {
	return []configs.AffectedHost{{HostID: memHost, Hostname: "web-1", AgentID: "agent-1"}}, 1, nil
}

func (b *memBackend) Reannounce(context.Context, configs.CredentialRefs, string, func(configs.Current) (configs.Write, bool)) ([]configs.Record, error) {
	return nil, nil
}

func (b *memBackend) CredentialUse(_ context.Context, refs configs.CredentialRefs) (configs.CredentialUse, error) {
	return configs.CredentialUse{ConfigType: refs.ConfigType}, nil
}

// configs.Resolver

func (b *memBackend) Resolve(context.Context, protocol.ResolveRequest) (protocol.ResolveReply, error) {
	return protocol.ResolveReply{}, nil
}

// credentials.Backend

func (b *memBackend) meta(clientID, id, name string, secret map[string]string) protocol.CredentialMeta {
	b.mu.Lock()
	defer b.mu.Unlock()
	fields := make([]string, 0, len(secret))
	for k := range secret {
		fields = append(fields, k)
	}
	if secret != nil {
		b.secrets = append(b.secrets, secret)
	}
	return protocol.CredentialMeta{ID: id, ClientID: clientID, Name: name, Fields: fields}
}

func (b *memBackend) Create(_ context.Context, req protocol.CredentialCreateRequest) (protocol.CredentialMeta, error) {
	return b.meta(req.ClientID, uuid.NewString(), req.Name, req.Secret), nil
}

func (b *memBackend) Rotate(_ context.Context, req protocol.CredentialRotateRequest) (protocol.CredentialMeta, error) {
	if req.ID != memCred.String() {
		return protocol.CredentialMeta{}, fault.NotFoundf("credential not found")
	}
	return b.meta(req.ClientID, req.ID, "db", req.Secret), nil
}

func (b *memBackend) Delete(context.Context, protocol.CredentialRef) error { return nil }

func (b *memBackend) Get(_ context.Context, ref protocol.CredentialRef) (protocol.CredentialMeta, error) {
	return protocol.CredentialMeta{ID: ref.ID, ClientID: ref.ClientID, Name: "db"}, nil
}

func (b *memBackend) List(context.Context, protocol.CredentialListRequest) ([]protocol.CredentialMeta, error) {
	return nil, nil
}
