package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// apiError is an error answer of the ConfigSync API: {"error":{"code","message"}} plus the HTTP status.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// client talks to the config-api REST API with a bearer token.
type client struct {
	base   string
	token  string
	http   *http.Client
	header http.Header // extra headers for the next request (If-Match)
}

func newClient(base, token string) *client {
	return &client{base: strings.TrimRight(base, "/"), token: token, http: &http.Client{Timeout: 30 * time.Second}}
}

// do sends a request and decodes the "data" member of the answer into out (when out is not nil).
func (c *client) do(ctx context.Context, method, path string, query url.Values, body any, out any) error {
	raw, status, err := c.send(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	if out == nil || status == http.StatusNoContent || len(raw) == 0 {
		return nil
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	if p, ok := out.(*json.RawMessage); ok {
		*p = env.Data
		return nil
	}
	return json.Unmarshal(env.Data, out)
}

// getAll GETs every page of a list route that pages with next_after (answer) and after (query), and
// returns the pages' data arrays joined as one JSON array. query (may be nil) goes with every page.
func (c *client) getAll(ctx context.Context, path string, query url.Values) (json.RawMessage, error) {
	var all []json.RawMessage
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	for {
		raw, _, err := c.send(ctx, http.MethodGet, path, q, nil)
		if err != nil {
			return nil, err
		}
		var page struct {
			Data      []json.RawMessage `json:"data"`
			NextAfter string            `json:"next_after"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return nil, fmt.Errorf("decode answer: %w", err)
		}
		all = append(all, page.Data...)
		if page.NextAfter == "" {
			if all == nil {
				all = []json.RawMessage{}
			}
			return json.Marshal(all)
		}
		if page.NextAfter == q.Get("after") {
			return nil, fmt.Errorf("GET %s: the API returned the same page twice (after=%s)", path, page.NextAfter)
		}
		q.Set("after", page.NextAfter)
	}
}

// send makes one request and returns the raw answer of a success; an error status is an *apiError.
func (c *client) send(ctx context.Context, method, path string, query url.Values, body any) ([]byte, int, error) {
	var rdr io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, fmt.Errorf("encode request: %w", err)
		}
		rdr = bytes.NewReader(b)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rdr)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(raw, &env)
		return nil, resp.StatusCode, &apiError{Status: resp.StatusCode, Code: env.Error.Code, Message: env.Error.Message}
	}
	return raw, resp.StatusCode, nil
}

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusNotFound:
			return exitNotFound
		case http.StatusConflict, http.StatusPreconditionFailed:
			return exitConflict
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			return exitInvalid
		case http.StatusUnauthorized, http.StatusForbidden:
			return exitAuth
		}
	}
	if _, ok := err.(driftFound); ok {
		return exitDrift
	}
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}
