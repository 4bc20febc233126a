package natsapi

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// fuzzStore answers every lookup with one host and a few rows, so decoded requests reach the merge.
type fuzzStore struct{}

var fuzzHost = resolve.Host{ID: "00000000-0000-0000-0000-000000000001", AgentID: "agent-1",
	ClientID: "00000000-0000-0000-0000-0000000000c1", EnvironmentID: "00000000-0000-0000-0000-0000000000e1"}

func (fuzzStore) layers() resolve.HostLayers {
	return resolve.HostLayers{Host: fuzzHost, Layers: resolve.Layers{
		Environment: map[string]agentconfig.Layer{"healthcheck": {Data: []byte(`{"interval_seconds":60}`), Version: 1}},
		Host:        map[string]agentconfig.Layer{"healthcheck": {Data: []byte(`{"timeout_seconds":5}`), Version: 2}},
	}}
}

func (s fuzzStore) LayersByHostID(_ context.Context, id string, _ []string) (resolve.HostLayers, error) {
	if id != fuzzHost.ID {
		return resolve.HostLayers{}, resolve.ErrNotFound
	}
	return s.layers(), nil
}

func (s fuzzStore) LayersByAgentID(_ context.Context, agentID string, _ []string) (resolve.HostLayers, error) {
	if agentID != fuzzHost.AgentID {
		return resolve.HostLayers{}, resolve.ErrNotFound
	}
	return s.layers(), nil
}

func (s fuzzStore) FetchRows(_ context.Context, agentIDs, _ []string) (resolve.FetchRows, error) {
	if !slices.Contains(agentIDs, fuzzHost.AgentID) {
		return resolve.FetchRows{}, nil
	}
	l := s.layers()
	return resolve.FetchRows{Hosts: []resolve.FetchHost{{Host: fuzzHost, Overrides: l.Layers.Host}},
		EnvironmentVersions: map[string]map[string]int64{fuzzHost.EnvironmentID: {"healthcheck": 1}}}, nil
}

func (s fuzzStore) EnvironmentRows(_ context.Context, envIDs, _ []string) (map[string]map[string]agentconfig.Layer, error) {
	if !slices.Contains(envIDs, fuzzHost.EnvironmentID) {
		return nil, nil
	}
	return map[string]map[string]agentconfig.Layer{fuzzHost.EnvironmentID: s.layers().Layers.Environment}, nil
}

func (fuzzStore) EnvironmentLayer(_ context.Context, envID, _ string) (resolve.EnvironmentLayer, error) {
	if envID != fuzzHost.EnvironmentID {
		return resolve.EnvironmentLayer{}, resolve.ErrNotFound
	}
	return resolve.EnvironmentLayer{ClientID: fuzzHost.ClientID, HasRow: true,
		Layer: agentconfig.Layer{Data: []byte(`{"interval_seconds":60}`), Version: 1}}, nil
}

func (fuzzStore) HostPage(_ context.Context, q resolve.HostPageQuery) ([]resolve.PageHost, error) {
	if q.Limit <= 0 {
		return nil, errors.New("limit must be positive")
	}
	return []resolve.PageHost{{HostID: fuzzHost.ID, AgentID: fuzzHost.AgentID,
		Override: &agentconfig.Layer{Data: []byte(`{"timeout_seconds":5}`), Version: 2}}}, nil
}

// A malformed request must be answered with an error, never crash the service: every body decodes to
// a reply or to an invalid_request / not_found error.
func FuzzResolveRequest(f *testing.F) {
	for _, seed := range []string{
		`{"host_id":"00000000-0000-0000-0000-000000000001"}`,
		`{"agent_id":"agent-1","types":["healthcheck","labels"],"explain":true}`,
		`{"agent_id":"agent-1","types":["nope"]}`,
		`{"host_id":"x","agent_id":"y"}`,
		`{"types":null}`, `{}`, `[]`, `null`, ``, `{"host_id":1}`, `{"host_id":"a"} {}`, `{"hostid":"a"}`,
	} {
		f.Add([]byte(seed))
	}
	s := New(resolve.New(fuzzStore{}, resolve.Options{}), Options{}, zap.NewNop())
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := s.resolve(context.Background(), data)
		checkClientError(t, err)
	})
}

func FuzzResolvePushRequest(f *testing.F) {
	for _, seed := range []string{
		`{"contract":1,"environment_id":"00000000-0000-0000-0000-0000000000e1","config_type":"healthcheck"}`,
		`{"contract":1,"environment_id":"00000000-0000-0000-0000-0000000000e1","config_type":"healthcheck","limit":-5}`,
		`{"contract":1,"environment_id":"00000000-0000-0000-0000-0000000000e1","config_type":"healthcheck","after":"00000000-0000-0000-0000-000000000000","limit":3,"online_since":"2026-01-01T00:00:00Z","host_ids":["00000000-0000-0000-0000-000000000001"]}`,
		`{"contract":1,"environment_id":"00000000-0000-0000-0000-0000000000e1","config_type":"healthcheck","environment_version":1}`,
		`{"contract":1,"environment_id":"00000000-0000-0000-0000-0000000000e1","config_type":"healthcheck","environment_version":-1}`,
		`{"contract":2,"environment_id":"00000000-0000-0000-0000-0000000000e1","config_type":"healthcheck","stage":"canary"}`,
		`{"contract":1,"environment_id":"e","config_type":"x","online_since":"yesterday"}`,
		`{"contract":1,"limit":1e400}`, `{"contract":1,"host_ids":"x"}`, `{"contract":1,"after":{}}`, `"`, `{`, `{"contract":1,"config_type":"\u0000"}`,
	} {
		f.Add([]byte(seed))
	}
	s := New(resolve.New(fuzzStore{}, resolve.Options{}), Options{}, zap.NewNop())
	f.Fuzz(func(t *testing.T, data []byte) {
		body, err := s.resolvePush(context.Background(), data, defaultMaxPayload)
		checkSetsAnswer(t, s, "resolve_push", body, err)
	})
}

func checkClientError(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, resolve.ErrInvalidRequest) && !errors.Is(err, resolve.ErrNotFound) {
		t.Fatalf("request error is neither invalid_request nor not_found: %v", err)
	}
}

func (fuzzStore) StagedLayers(context.Context, []resolve.StagedKey) (map[resolve.StagedKey]agentconfig.Layer, error) {
	return map[resolve.StagedKey]agentconfig.Layer{}, nil
}
