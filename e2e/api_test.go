package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// apiClient calls one config-api replica with the admin token.
type apiClient struct {
	name  string
	base  string
	token string
	http  *http.Client
}

// api returns a client of config-api replica i (1-based).
func (s *stack) api(i int) *apiClient {
	svc := s.replica("config-api", i)
	return &apiClient{name: svc.name, base: "http://" + svc.httpAddr, token: s.token, http: apiHTTP}
}

// apiHTTP is shared by every apiClient, so connections are reused.
var apiHTTP = &http.Client{Timeout: 15 * time.Second}

// apiResponse is one exchange, kept whole for failure messages.
type apiResponse struct {
	method, url string
	reqBody     []byte
	status      int
	body        []byte
	err         error
}

func (r apiResponse) String() string {
	if r.err != nil {
		return fmt.Sprintf("%s %s %s -> error: %v", r.method, r.url, r.reqBody, r.err)
	}
	return fmt.Sprintf("%s %s %s -> HTTP %d %s", r.method, r.url, r.reqBody, r.status, bytes.TrimSpace(r.body))
}

// do sends one request; body is encoded as JSON when not nil.
func (c *apiClient) do(method, path string, body any) apiResponse {
	r := apiResponse{method: method, url: c.base + path}
	var rdr io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			r.err = err
			return r
		}
		r.reqBody = b
		rdr = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.url, rdr)
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	r.body, r.err = io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return r
}

// data decodes the {"data": ...} envelope of a response into out.
func (r apiResponse) data(out any) error {
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil {
		return fmt.Errorf("response is not JSON: %w", err)
	}
	if len(env.Data) == 0 {
		return fmt.Errorf("response has no data")
	}
	return json.Unmarshal(env.Data, out)
}

// mustDo sends a request that must succeed (2xx) and decodes its data into out (if not nil); any other
// outcome fails the test with the request and the response.
func (c *apiClient) mustDo(t testing.TB, method, path string, body, out any) apiResponse {
	t.Helper()
	r := c.do(method, path, body)
	if r.err != nil || r.status < 200 || r.status > 299 {
		t.Fatalf("config-api (%s) request failed: %s", c.name, r)
	}
	if out != nil {
		if err := r.data(out); err != nil {
			t.Fatalf("config-api (%s): %v: %s", c.name, err, r)
		}
	}
	return r
}

// configRow is a stored config row (PUT answer).
type configRow struct {
	ID         string          `json:"id"`
	ConfigType string          `json:"config_type"`
	ConfigData json.RawMessage `json:"config_data"`
	Version    int64           `json:"version"`
}

// effectiveConfig is GET /hosts/{id}/agent-configs/{type}.
type effectiveConfig struct {
	ConfigType string          `json:"config_type"`
	ConfigData json.RawMessage `json:"config_data"`
	Version    int64           `json:"version"`
	Source     string          `json:"source"`
}

// applyStatus is one type of a host's apply_status.
type applyStatus struct {
	Version   int64     `json:"version"`
	Status    string    `json:"status"`
	Error     string    `json:"error"`
	AppliedAt time.Time `json:"applied_at"`
}

// hostView is GET /hosts/{id} (and an item of the environment's host list).
type hostView struct {
	ID              string                 `json:"id"`
	AgentID         string                 `json:"agent_id"`
	Hostname        string                 `json:"hostname"`
	LastHeartbeatAt *time.Time             `json:"last_heartbeat_at"`
	Online          bool                   `json:"online"`
	ConfigHash      *string                `json:"config_hash"`
	ConfigVersion   *int64                 `json:"config_version"`
	ConfigVersions  map[string]int64       `json:"config_versions"`
	ApplyStatus     map[string]applyStatus `json:"apply_status"`
}

// driftReport is GET /environments/{id}/drift.
type driftReport struct {
	CheckedHosts int `json:"checked_hosts"`
	Hosts        []struct {
		HostID           string           `json:"host_id"`
		Hostname         string           `json:"hostname"`
		AgentID          string           `json:"agent_id"`
		ReportedHash     *string          `json:"reported_hash"`
		ExpectedHash     string           `json:"expected_hash"`
		ReportedVersions map[string]int64 `json:"reported_versions"`
		ExpectedVersions map[string]int64 `json:"expected_versions"`
		Reasons          []string         `json:"reasons"`
	} `json:"hosts"`
}

// putEnvConfig writes an environment config through config-api replica i and returns its version.
func (s *stack) putEnvConfig(i int, configType string, data any) int64 {
	s.t.Helper()
	var row configRow
	s.api(i).mustDo(s.t, http.MethodPut, "/api/v1/environments/"+s.envID+"/agent-configs/"+configType,
		map[string]any{"config_data": data}, &row)
	if row.Version <= 0 || row.ConfigType != configType {
		s.t.Fatalf("PUT %s answered %s, want the row with a positive version", configType, jsonString(row))
	}
	return row.Version
}

// putHostConfig writes a host override and returns its version.
func (s *stack) putHostConfig(i int, a *agent, configType string, data any) int64 {
	s.t.Helper()
	var row configRow
	s.api(i).mustDo(s.t, http.MethodPut, "/api/v1/hosts/"+a.hostID+"/agent-configs/"+configType,
		map[string]any{"config_data": data}, &row)
	if row.Version <= 0 || row.ConfigType != configType {
		s.t.Fatalf("PUT host %s %s answered %s, want the row with a positive version", a.hostname, configType, jsonString(row))
	}
	return row.Version
}

// host returns GET /hosts/{id}; ok false (with the exchange) when the request did not succeed.
func (s *stack) host(i int, a *agent) (hostView, apiResponse, bool) {
	var h hostView
	r := s.api(i).do(http.MethodGet, "/api/v1/hosts/"+a.hostID, nil)
	if r.err != nil || r.status != http.StatusOK {
		return h, r, false
	}
	if err := r.data(&h); err != nil {
		r.err = err
		return h, r, false
	}
	return h, r, true
}

// drift returns GET /environments/{id}/drift.
func (s *stack) drift(i int) (driftReport, apiResponse, bool) {
	var d driftReport
	r := s.api(i).do(http.MethodGet, "/api/v1/environments/"+s.envID+"/drift", nil)
	if r.err != nil || r.status != http.StatusOK {
		return d, r, false
	}
	if err := r.data(&d); err != nil {
		r.err = err
		return d, r, false
	}
	return d, r, true
}
