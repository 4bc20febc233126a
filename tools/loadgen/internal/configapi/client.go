// Package configapi is loadgen's client of the config-api REST API: the few routes a benchmark needs
// to set up a tenant, register a fleet of hosts, write configs and watch the fleet's reported state.
package configapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Client calls one config-api with one bearer token.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client of the API at baseURL (scheme://host:port, without /api/v1). maxConns bounds
// the connections kept open to it (set it to the request concurrency).
func New(baseURL, token string, maxConns int) *Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		MaxConnsPerHost:     maxConns,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{base: baseURL, token: token, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// APIError is a non-2xx answer.
type APIError struct {
	Method, Path string
	Status       int
	Code         string
	Message      string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d %s: %s", e.Method, e.Path, e.Status, e.Code, e.Message)
}

// IsConflict reports whether err is a 409 from the API.
func IsConflict(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusConflict
}

// do sends body as JSON and decodes the answer's "data" into out (or the whole answer when raw).
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rdr io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rdr = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rdr)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		ae := &APIError{Method: method, Path: path, Status: resp.StatusCode}
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil {
			ae.Code, ae.Message = e.Error.Code, e.Error.Message
		}
		return ae
	}
	if out == nil {
		return nil
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("%s %s: decode data: %w", method, path, err)
	}
	return nil
}

// Ready waits until GET /readyz answers 200 or ctx ends.
func (c *Client) Ready(ctx context.Context) error {
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := c.http.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("readyz: HTTP %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("config-api not ready: %w (last: %v)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CreateClient creates a client (admin token) and returns its id.
func (c *Client) CreateClient(ctx context.Context, name string) (string, error) {
	var out struct {
		ID string `json:"id"`
	}
	err := c.do(ctx, http.MethodPost, "/api/v1/clients", map[string]string{"name": name}, &out)
	return out.ID, err
}

// CreateEnvironment creates an environment of a client and returns its id.
func (c *Client) CreateEnvironment(ctx context.Context, clientID, name string) (string, error) {
	var out struct {
		ID string `json:"id"`
	}
	err := c.do(ctx, http.MethodPost, "/api/v1/clients/"+clientID+"/environments", map[string]string{"name": name}, &out)
	return out.ID, err
}

// MaxBatch is the most hosts config-api registers in one batch request (its hosts.MaxBatchHosts).
const MaxBatch = 1000

// HostSpec is one host of a batch registration.
type HostSpec struct {
	Hostname string `json:"hostname"`
	AgentID  string `json:"agent_id"`
	// Labels are the host's inventory labels (none when empty).
	Labels map[string]string `json:"labels,omitempty"`
}

// RegisteredHost is one host a batch registration created.
type RegisteredHost struct {
	ID string `json:"id"`
	// NATSCredentials is the agent's own NATS creds file (JWT and seed), returned once, when config-api
	// issues per-agent identities; empty otherwise.
	NATSCredentials string `json:"nats_credentials"`
}

// RegisterHostBatch registers up to MaxBatch hosts in one request (all or none) and returns them in
// the order given.
func (c *Client) RegisterHostBatch(ctx context.Context, environmentID string, hosts []HostSpec) ([]RegisteredHost, error) {
	var out []RegisteredHost
	path := "/api/v1/environments/" + environmentID + "/hosts/batch"
	if err := c.do(ctx, http.MethodPost, path, map[string]any{"hosts": hosts}, &out); err != nil {
		return nil, err
	}
	if len(out) != len(hosts) {
		return nil, fmt.Errorf("POST %s: %d hosts registered, %d sent", path, len(out), len(hosts))
	}
	return out, nil
}

// CreateCredential stores a credential scoped to an environment and returns its id. The secret goes
// to the API only; it is never logged.
func (c *Client) CreateCredential(ctx context.Context, clientID, environmentID, name string, secret map[string]string) (string, error) {
	var out struct {
		ID string `json:"id"`
	}
	err := c.do(ctx, http.MethodPost, "/api/v1/clients/"+clientID+"/credentials",
		map[string]any{"name": name, "environment_id": environmentID, "secret": secret}, &out)
	return out.ID, err
}

// PutEnvironmentConfig writes an environment config and returns the version it got.
func (c *Client) PutEnvironmentConfig(ctx context.Context, environmentID, configType string, data any) (int64, error) {
	var out struct {
		Version int64 `json:"version"`
	}
	err := c.do(ctx, http.MethodPut, "/api/v1/environments/"+environmentID+"/agent-configs/"+configType,
		map[string]any{"config_data": data}, &out)
	return out.Version, err
}

// ApplyStatus is a host's last acknowledged apply of one type.
type ApplyStatus struct {
	Version   int64     `json:"version"`
	Status    string    `json:"status"`
	AppliedAt time.Time `json:"applied_at"`
}

// Host is a host as the host list shows it.
type Host struct {
	ID              string                 `json:"id"`
	AgentID         string                 `json:"agent_id"`
	AgentVersion    *string                `json:"agent_version"`
	LastHeartbeatAt *time.Time             `json:"last_heartbeat_at"`
	Online          bool                   `json:"online"`
	ConfigHash      *string                `json:"config_hash"`
	ConfigVersions  map[string]int64       `json:"config_versions"`
	ApplyStatus     map[string]ApplyStatus `json:"apply_status"`
}

// MaxPageSize is the largest host page the API serves.
const MaxPageSize = 5000

// ListHosts returns one page of an environment's hosts after the cursor (empty: from the start) and
// the cursor of the next page (empty: last page).
func (c *Client) ListHosts(ctx context.Context, environmentID, after string, limit int) ([]Host, string, error) {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if after != "" {
		q.Set("after", after)
	}
	path := "/api/v1/environments/" + environmentID + "/hosts?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, "", &APIError{Method: http.MethodGet, Path: path, Status: resp.StatusCode, Message: string(bytes.TrimSpace(raw))}
	}
	var page struct {
		Data      []Host  `json:"data"`
		NextAfter *string `json:"next_after"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, "", fmt.Errorf("GET %s: decode: %w", path, err)
	}
	next := ""
	if page.NextAfter != nil {
		next = *page.NextAfter
	}
	return page.Data, next, nil
}

// AllHosts pages through every host of an environment, calling visit for each.
func (c *Client) AllHosts(ctx context.Context, environmentID string, visit func(Host)) error {
	after := ""
	for {
		hosts, next, err := c.ListHosts(ctx, environmentID, after, MaxPageSize)
		if err != nil {
			return err
		}
		for _, h := range hosts {
			visit(h)
		}
		if next == "" || next == after {
			return nil
		}
		after = next
	}
}
