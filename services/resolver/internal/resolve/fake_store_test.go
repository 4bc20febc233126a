package resolve_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// fakeStore is an in-memory Store with the semantics the PostgreSQL adapter has (revoked hosts absent,
// pages in host id order); the adapter itself is tested against a real database.
type fakeStore struct {
	envs       map[string]string                       // environment id -> client id
	hosts      map[string]fakeHost                     // host id -> host
	envRows    map[string]map[string]agentconfig.Layer // environment id -> type -> row
	hostRows   map[string]map[string]agentconfig.Layer // host id -> type -> row
	pageCalls  int
	agentCalls int
	fetchCalls int
	envReads   int // EnvironmentRows calls
}

type fakeHost struct {
	resolve.Host
	revoked   bool
	heartbeat time.Time
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		envs:     map[string]string{},
		hosts:    map[string]fakeHost{},
		envRows:  map[string]map[string]agentconfig.Layer{},
		hostRows: map[string]map[string]agentconfig.Layer{},
	}
}

func (s *fakeStore) addEnv(id, clientID string) { s.envs[id] = clientID }

func (s *fakeStore) addHost(h fakeHost) {
	h.ClientID = s.envs[h.EnvironmentID]
	s.hosts[h.ID] = h
}

func (s *fakeStore) putEnv(envID, typ, data string, version int64) {
	if s.envRows[envID] == nil {
		s.envRows[envID] = map[string]agentconfig.Layer{}
	}
	s.envRows[envID][typ] = layer(data, version)
}

func (s *fakeStore) putHost(hostID, typ, data string, version int64) {
	if s.hostRows[hostID] == nil {
		s.hostRows[hostID] = map[string]agentconfig.Layer{}
	}
	s.hostRows[hostID][typ] = layer(data, version)
}

// layer builds a row; empty data is a tombstone.
func layer(data string, version int64) agentconfig.Layer {
	if data == "" {
		return agentconfig.Layer{Version: version}
	}
	return agentconfig.Layer{Data: []byte(data), Version: version}
}

func (s *fakeStore) LayersByHostID(_ context.Context, id string, types []string) (resolve.HostLayers, error) {
	h, ok := s.hosts[id]
	if !ok || h.revoked {
		return resolve.HostLayers{}, fmt.Errorf("fake: %w", resolve.ErrNotFound)
	}
	return s.layers(h.Host, types), nil
}

func (s *fakeStore) LayersByAgentID(_ context.Context, agentID string, types []string) (resolve.HostLayers, error) {
	s.agentCalls++
	for _, h := range s.hosts {
		if h.AgentID == agentID && !h.revoked {
			return s.layers(h.Host, types), nil
		}
	}
	return resolve.HostLayers{}, fmt.Errorf("fake: %w", resolve.ErrNotFound)
}

func (s *fakeStore) FetchRows(_ context.Context, agentIDs, types []string) (resolve.FetchRows, error) {
	s.fetchCalls++
	out := resolve.FetchRows{EnvironmentVersions: map[string]map[string]int64{}}
	for _, h := range s.hosts {
		if !slices.Contains(agentIDs, h.AgentID) || h.revoked {
			continue
		}
		l := s.layers(h.Host, types)
		fh := resolve.FetchHost{Host: h.Host}
		if len(l.Layers.Host) > 0 {
			fh.Overrides = l.Layers.Host
		}
		out.Hosts = append(out.Hosts, fh)
		for t, row := range l.Layers.Environment {
			if out.EnvironmentVersions[h.EnvironmentID] == nil {
				out.EnvironmentVersions[h.EnvironmentID] = map[string]int64{}
			}
			out.EnvironmentVersions[h.EnvironmentID][t] = row.Version
		}
	}
	return out, nil
}

func (s *fakeStore) EnvironmentRows(_ context.Context, envIDs, types []string) (map[string]map[string]agentconfig.Layer, error) {
	s.envReads++
	out := map[string]map[string]agentconfig.Layer{}
	for _, e := range envIDs {
		for _, t := range types {
			if row, ok := s.envRows[e][t]; ok {
				if out[e] == nil {
					out[e] = map[string]agentconfig.Layer{}
				}
				out[e][t] = row
			}
		}
	}
	return out, nil
}

func (s *fakeStore) layers(host resolve.Host, types []string) resolve.HostLayers {
	l := resolve.Layers{Environment: map[string]agentconfig.Layer{}, Host: map[string]agentconfig.Layer{}}
	for _, t := range types {
		if row, ok := s.envRows[host.EnvironmentID][t]; ok {
			l.Environment[t] = row
		}
		if row, ok := s.hostRows[host.ID][t]; ok {
			l.Host[t] = row
		}
	}
	return resolve.HostLayers{Host: host, Layers: l}
}

func (s *fakeStore) EnvironmentLayer(_ context.Context, envID, typ string) (resolve.EnvironmentLayer, error) {
	clientID, ok := s.envs[envID]
	if !ok {
		return resolve.EnvironmentLayer{}, fmt.Errorf("fake: %w", resolve.ErrNotFound)
	}
	row, has := s.envRows[envID][typ]
	return resolve.EnvironmentLayer{ClientID: clientID, Layer: row, HasRow: has}, nil
}

func (s *fakeStore) HostPage(_ context.Context, q resolve.HostPageQuery) ([]resolve.PageHost, error) {
	s.pageCalls++
	var hosts []fakeHost
	for _, h := range s.hosts {
		switch {
		case h.EnvironmentID != q.EnvironmentID, h.revoked, h.ID <= q.After,
			len(q.HostIDs) > 0 && !slices.Contains(q.HostIDs, h.ID),
			q.OnlineSince != nil && h.heartbeat.Before(*q.OnlineSince):
			continue
		}
		hosts = append(hosts, h)
	}
	slices.SortFunc(hosts, func(a, b fakeHost) int { return cmp.Compare(a.ID, b.ID) })
	if len(hosts) > q.Limit {
		hosts = hosts[:q.Limit]
	}
	page := make([]resolve.PageHost, len(hosts))
	for i, h := range hosts {
		page[i] = resolve.PageHost{HostID: h.ID, AgentID: h.AgentID}
		if row, ok := s.hostRows[h.ID][q.ConfigType]; ok {
			page[i].Override = &row
		}
	}
	return page, nil
}

// StagedLayers: the fake holds no staged rollouts (the adapter's rollout rows are tested against a
// real database).
func (s *fakeStore) StagedLayers(context.Context, []resolve.StagedKey) (map[resolve.StagedKey]agentconfig.Layer, error) {
	return map[resolve.StagedKey]agentconfig.Layer{}, nil
}
