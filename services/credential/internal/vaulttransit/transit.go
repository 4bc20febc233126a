// Package vaulttransit is the credential service's Vault Cipher: HashiCorp Vault's Transit secrets
// engine encrypts and decrypts credential secrets under a named key, in batches (batch_input), so that
// key material never leaves Vault. Ciphertexts are Vault's own "vault:v<N>:..." strings; after a key
// rotation in Vault old versions still decrypt, and credential rotate re-encrypts under the newest.
//
// The service authenticates with a token or with AppRole. Renewable tokens are kept alive by Vault's
// LifetimeWatcher; when a token reaches its max TTL, cannot be renewed or is refused (403), the
// service logs in again. A sealed, unreachable or refusing Vault makes calls fail with errors wrapping
// credential.ErrUnavailable; nothing here panics on a Vault failure, and no plaintext is ever logged or
// put into an error.
package vaulttransit

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/vault/api"
	"go.uber.org/zap"

	"github.com/configsync/configsync/services/credential/internal/credential"
)

// Scheme is the ciphertext prefix Vault Transit writes.
const Scheme = "vault"

// Config locates Vault and says how to authenticate. Either Token or RoleID+SecretID is required.
type Config struct {
	// Addr is Vault's address, e.g. https://vault.internal:8200.
	Addr string
	// Token authenticates directly (renewed while renewable).
	Token string
	// RoleID and SecretID authenticate with AppRole at auth/<AppRoleMount>/login; they win over Token.
	RoleID   string
	SecretID string
	// AppRoleMount is the AppRole auth mount path; default "approle".
	AppRoleMount string
	// TransitMount is the Transit engine mount path; default "transit".
	TransitMount string
	// Key is the Transit key name; default "configsync".
	Key string
	// Namespace is the Vault Enterprise namespace, if any.
	Namespace string
	// Timeout bounds one HTTP request to Vault; default 10s.
	Timeout time.Duration
	// MaxRetries is how many times a request failing on the network or with a 5xx is retried (Vault's
	// client retries with backoff); 0 means no retries.
	MaxRetries int
}

func (c *Config) defaults() {
	if c.AppRoleMount == "" {
		c.AppRoleMount = "approle"
	}
	if c.TransitMount == "" {
		c.TransitMount = "transit"
	}
	if c.Key == "" {
		c.Key = "configsync"
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	c.AppRoleMount = strings.Trim(c.AppRoleMount, "/")
	c.TransitMount = strings.Trim(c.TransitMount, "/")
}

func (c *Config) appRole() bool { return c.RoleID != "" || c.SecretID != "" }

// Transit is a credential.Cipher backed by Vault Transit. Start it before use and Close it at the end.
type Transit struct {
	cfg    Config
	client *api.Client
	// login has no token: AppRole logins never carry a (possibly dead) token.
	login *api.Client
	// http is the clients' shared HTTP client; Close drops its idle connections.
	http *http.Client
	log  *zap.Logger

	// gen counts logins, so that a request refused with an old token triggers at most one re-login.
	// Written under mu; read without it, so requests never wait for a login in progress to read it.
	gen atomic.Uint64

	mu sync.Mutex // serialises logins and guards the fields below
	// auth is the current token's auth secret while it can be renewed; nil otherwise.
	auth *api.Secret
	// stale: the token must be replaced (never obtained, renewal ended, or refused); the loop
	// authenticates until it succeeds.
	stale bool
	// wake tells the auth loop that the fields above changed.
	wake chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

var _ credential.Cipher = (*Transit)(nil)

// New validates cfg and builds the Vault client. It does no I/O; Start logs in.
func New(cfg Config, log *zap.Logger) (*Transit, error) {
	cfg.defaults()
	if cfg.Addr == "" {
		return nil, errors.New("vaulttransit: Vault address is required")
	}
	if cfg.appRole() && (cfg.RoleID == "" || cfg.SecretID == "") {
		return nil, errors.New("vaulttransit: AppRole needs both a role id and a secret id")
	}
	if !cfg.appRole() && cfg.Token == "" {
		return nil, errors.New("vaulttransit: a token or an AppRole role id and secret id is required")
	}
	vc := api.DefaultConfig()
	if vc.Error != nil {
		return nil, fmt.Errorf("vaulttransit: client config: %w", vc.Error)
	}
	vc.Address = cfg.Addr
	vc.Timeout = cfg.Timeout
	vc.MaxRetries = cfg.MaxRetries
	client, err := api.NewClient(vc)
	if err != nil {
		return nil, fmt.Errorf("vaulttransit: client: %w", err)
	}
	// NewClient picks VAULT_TOKEN and VAULT_NAMESPACE from the environment; only cfg counts.
	client.ClearToken()
	client.ClearNamespace()
	if cfg.Namespace != "" {
		client.SetNamespace(cfg.Namespace)
	}
	login, err := client.Clone()
	if err != nil {
		return nil, fmt.Errorf("vaulttransit: client: %w", err)
	}
	login.ClearToken()
	if cfg.Namespace != "" {
		login.SetNamespace(cfg.Namespace)
	}
	if !cfg.appRole() {
		client.SetToken(cfg.Token)
	}
	return &Transit{cfg: cfg, client: client, login: login, http: vc.HttpClient, log: log, stale: true,
		wake: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// Start authenticates and starts keeping the token alive in the background until Close. A Vault that
// is down or sealed does not fail Start: the service comes up, requests fail with ErrUnavailable, and
// the background loop keeps logging in until it succeeds.
func (t *Transit) Start(ctx context.Context) error {
	if err := t.authenticate(ctx); err != nil {
		t.log.Warn("vault authentication failed; retrying in the background", zap.Error(err))
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	go t.run(loopCtx)
	return nil
}

// Close stops token renewal, waits for the background loop (at most one in-flight Vault request) and
// closes idle connections. Use the Transit no more after Close.
func (t *Transit) Close() {
	if t.cancel != nil {
		t.cancel()
		<-t.done
	}
	t.http.CloseIdleConnections()
}

// Scheme returns "vault".
func (t *Transit) Scheme() string { return Scheme }

// Check reports whether Vault is usable with the current token (readiness): it fails while Vault is
// sealed or unreachable or the token is refused.
func (t *Transit) Check(ctx context.Context) error {
	if _, err := t.client.Auth().Token().LookupSelfWithContext(ctx); err != nil {
		return classify("token lookup", err)
	}
	return nil
}

// Encrypt seals every item in one transit/encrypt call.
func (t *Transit) Encrypt(ctx context.Context, items []credential.EncryptItem) ([]string, error) {
	if len(items) == 0 {
		return nil, nil
	}
	body := make([]byte, 0, 64+len(items)*96)
	body = append(body, `{"batch_input":[`...)
	for i, it := range items {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, `{"plaintext":"`...)
		body = base64.StdEncoding.AppendEncode(body, it.Plaintext)
		body = append(body, `","associated_data":"`...)
		body = base64.StdEncoding.AppendEncode(body, it.AAD)
		body = append(body, `"}`...)
	}
	body = append(body, "]}"...)
	defer clear(body)

	results, err := t.batch(ctx, "encrypt", body)
	if err != nil {
		return nil, err
	}
	if len(results) != len(items) {
		return nil, fmt.Errorf("%w: vault encrypt returned %d results for %d items", credential.ErrUnavailable, len(results), len(items))
	}
	out := make([]string, len(items))
	for i, r := range results {
		if r.Error != "" {
			return nil, fmt.Errorf("%w: vault encrypt item %d: %s", credential.ErrUnavailable, i, vaultText(r.Error))
		}
		if credential.Scheme(r.Ciphertext) != Scheme {
			return nil, fmt.Errorf("%w: vault encrypt item %d: unexpected ciphertext format", credential.ErrUnavailable, i)
		}
		out[i] = r.Ciphertext
	}
	return out, nil
}

// Decrypt opens every item in one transit/decrypt call. An item Vault cannot open (wrong associated
// data, tampered, key version trimmed) fails alone with credential.ErrDecrypt.
func (t *Transit) Decrypt(ctx context.Context, items []credential.DecryptItem) ([]credential.Decrypted, error) {
	if len(items) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	type input struct {
		Ciphertext     string `json:"ciphertext"`
		AssociatedData string `json:"associated_data"`
	}
	in := make([]input, len(items))
	for i, it := range items {
		in[i] = input{Ciphertext: it.Ciphertext, AssociatedData: base64.StdEncoding.EncodeToString(it.AAD)}
	}
	if err := enc.Encode(map[string]any{"batch_input": in}); err != nil {
		return nil, fmt.Errorf("vaulttransit: encode decrypt request: %w", err)
	}
	results, err := t.batch(ctx, "decrypt", buf.Bytes())
	if err != nil {
		return nil, err
	}
	if len(results) != len(items) {
		return nil, fmt.Errorf("%w: vault decrypt returned %d results for %d items", credential.ErrUnavailable, len(results), len(items))
	}
	out := make([]credential.Decrypted, len(items))
	for i := range results {
		r := &results[i]
		if r.Error != "" {
			out[i].Err = fmt.Errorf("%w: vault: %s", credential.ErrDecrypt, vaultText(r.Error))
			continue
		}
		out[i].Plaintext, out[i].Err = decodePlaintext(r.Plaintext)
		clear(r.Plaintext)
	}
	return out, nil
}

// batchResult is one entry of Transit's batch_results. Plaintext stays raw bytes so it can be zeroed.
type batchResult struct {
	Ciphertext string          `json:"ciphertext"`
	Plaintext  json.RawMessage `json:"plaintext"`
	Error      string          `json:"error"`
}

// batch posts a batch_input body to transit/<op>/<key> and returns the batch results. A request
// refused for its token is retried once after a fresh AppRole login.
func (t *Transit) batch(ctx context.Context, op string, body []byte) ([]batchResult, error) {
	path := t.cfg.TransitMount + "/" + op + "/" + t.cfg.Key
	gen := t.gen.Load()
	results, err := t.batchOnce(ctx, path, body)
	if err != nil && t.cfg.appRole() && isForbidden(err) {
		if lerr := t.reloginIfStale(ctx, gen); lerr != nil {
			return nil, fmt.Errorf("vaulttransit: %s: %w", op, lerr)
		}
		results, err = t.batchOnce(ctx, path, body)
	}
	if err != nil {
		return nil, fmt.Errorf("vaulttransit: %s: %w", op, classify(op, err))
	}
	return results, nil
}

// batchOnce makes one request and returns the Vault client's error as is. Transit answers a batch in
// which some items failed with HTTP 400 and the per-item results, so a 400 carrying batch_results is a
// success here.
func (t *Transit) batchOnce(ctx context.Context, path string, body []byte) ([]batchResult, error) {
	resp, err := t.client.Logical().WriteRawWithContext(ctx, path, body)
	if resp != nil {
		defer resp.Body.Close()
	}
	var respErr *api.ResponseError
	if err != nil && !(errors.As(err, &respErr) && respErr.StatusCode == http.StatusBadRequest && resp != nil) {
		return nil, err
	}
	raw, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	defer clear(raw)
	if rerr != nil {
		return nil, rerr
	}
	var parsed struct {
		Data struct {
			BatchResults []batchResult `json:"batch_results"`
		} `json:"data"`
	}
	if jerr := json.Unmarshal(raw, &parsed); jerr != nil || parsed.Data.BatchResults == nil {
		if err != nil {
			return nil, err
		}
		return nil, errors.New("response has no batch_results")
	}
	return parsed.Data.BatchResults, nil
}

// decodePlaintext turns Transit's base64 plaintext (a JSON string) into bytes.
func decodePlaintext(raw json.RawMessage) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, fmt.Errorf("%w: vault returned no plaintext", credential.ErrDecrypt)
	}
	b64 := raw[1 : len(raw)-1]
	out := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
	n, err := base64.StdEncoding.Decode(out, b64)
	if err != nil {
		clear(out)
		return nil, fmt.Errorf("%w: vault returned a malformed plaintext", credential.ErrDecrypt)
	}
	return out[:n], nil
}

// isForbidden reports a 403: the token expired, was revoked or lacks the policy.
func isForbidden(err error) bool {
	var re *api.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusForbidden
}

// classify turns a Vault client error into one wrapping credential.ErrUnavailable, with a message an
// operator can act on. Vault's error strings never contain request plaintexts.
func classify(op string, err error) error {
	var re *api.ResponseError
	if errors.As(err, &re) {
		msg := vaultText(strings.Join(re.Errors, "; "))
		switch {
		case re.StatusCode == http.StatusServiceUnavailable:
			return fmt.Errorf("%w: vault %s: vault is sealed or unavailable (HTTP 503): %s", credential.ErrUnavailable, op, msg)
		case re.StatusCode == http.StatusForbidden:
			return fmt.Errorf("%w: vault %s: permission denied (HTTP 403; token expired or policy missing): %s", credential.ErrUnavailable, op, msg)
		default:
			return fmt.Errorf("%w: vault %s: HTTP %d: %s", credential.ErrUnavailable, op, re.StatusCode, msg)
		}
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: vault %s: %w", credential.ErrUnavailable, op, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: vault %s: timed out: %w", credential.ErrUnavailable, op, err)
	}
	return fmt.Errorf("%w: vault %s: unreachable: %w", credential.ErrUnavailable, op, err)
}

// vaultText bounds a Vault error string for messages and logs.
func vaultText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	if s == "" {
		return "no detail"
	}
	return s
}
