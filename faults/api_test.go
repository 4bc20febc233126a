package faults_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// apiClient calls config-api's REST API with one bearer token.
type apiClient struct {
	t     testing.TB
	base  string
	token string
	http  *http.Client
}

func newAPIClient(t testing.TB, base, token string) *apiClient {
	return &apiClient{t: t, base: strings.TrimSuffix(base, "/"), token: token, http: &http.Client{Timeout: 20 * time.Second}}
}

// as is the same API with another token ("" sends none).
func (c *apiClient) as(token string) *apiClient {
	cp := *c
	cp.token = token
	return &cp
}

// response is one HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
	err    error // transport failure (no answer at all)
}

func (r response) String() string {
	if r.err != nil {
		return "no response: " + r.err.Error()
	}
	b := r.body
	if len(b) > 300 {
		b = append(b[:300:300], "..."...)
	}
	return fmt.Sprintf("HTTP %d %s", r.status, bytes.TrimSpace(b))
}

// errorBody is config-api's error envelope.
type errorBody struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// errorCode returns the envelope's code, or "" when the body is not a well-formed error envelope.
func (r response) errorCode() string {
	var e errorBody
	if json.Unmarshal(r.body, &e) != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
		return ""
	}
	return e.Error.Code
}

// send issues one request. body is sent as is when it is a string or []byte, JSON-encoded otherwise;
// headers are name, value pairs.
func (c *apiClient) send(method, path string, body any, headers ...string) response {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatalf("build request %s %s: %v", method, path, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return response{status: resp.StatusCode, header: resp.Header, err: err}
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// must sends a request that has to succeed (2xx) and decodes the "data" envelope into out (if not nil).
func (c *apiClient) must(method, path string, body, out any) {
	c.t.Helper()
	r := c.send(method, path, body)
	if r.err != nil || r.status/100 != 2 {
		c.t.Fatalf("%s %s: %s", method, path, r)
	}
	if out == nil {
		return
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || env.Data == nil {
		c.t.Fatalf("%s %s: not a data envelope: %s", method, path, r)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		c.t.Fatalf("%s %s: decode data: %v (%s)", method, path, err, env.Data)
	}
}

// tenant is a client with one environment and a token scoped to the client.
type tenant struct {
	ClientID, EnvID string
	TokenID, Token  string
}

// host is a registered host.
type host struct {
	ID      string `json:"id"`
	AgentID string `json:"agent_id"`
}

// newTenant creates a client, an environment and a client-scoped token (the caller must be admin).
func (c *apiClient) newTenant(name string) tenant {
	c.t.Helper()
	var client, env struct{ ID string }
	c.must(http.MethodPost, "/api/v1/clients", map[string]string{"name": name}, &client)
	c.must(http.MethodPost, "/api/v1/clients/"+client.ID+"/environments", map[string]string{"name": "prod"}, &env)
	var tok struct{ ID, Token string }
	c.must(http.MethodPost, "/api/v1/tokens", map[string]string{"name": name + "-ops", "client_id": client.ID}, &tok)
	return tenant{ClientID: client.ID, EnvID: env.ID, TokenID: tok.ID, Token: tok.Token}
}

// registerHosts registers n hosts named prefix-0 … in envID.
func (c *apiClient) registerHosts(envID, prefix string, n int) []host {
	c.t.Helper()
	hosts := make([]host, n)
	for i := range hosts {
		c.must(http.MethodPost, "/api/v1/environments/"+envID+"/hosts", map[string]string{"hostname": fmt.Sprintf("%s-%d", prefix, i)}, &hosts[i])
	}
	return hosts
}

// putEnv writes an environment config and returns its version.
func (c *apiClient) putEnv(envID, configType, data string) int64 {
	c.t.Helper()
	var out struct{ Version int64 }
	c.must(http.MethodPut, "/api/v1/environments/"+envID+"/agent-configs/"+configType,
		`{"config_data":`+data+`}`, &out)
	if out.Version <= 0 {
		c.t.Fatalf("PUT %s: no version in the answer", configType)
	}
	return out.Version
}

// putHost writes a host override and returns its version.
func (c *apiClient) putHost(hostID, configType, data string) int64 {
	c.t.Helper()
	var out struct{ Version int64 }
	c.must(http.MethodPut, "/api/v1/hosts/"+hostID+"/agent-configs/"+configType, `{"config_data":`+data+`}`, &out)
	if out.Version <= 0 {
		c.t.Fatalf("PUT host %s: no version in the answer", configType)
	}
	return out.Version
}
