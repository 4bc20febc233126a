// Package credsrenew keeps the agent's own NATS credentials alive. Agent JWTs expire; before that the
// agent asks the backend, on its own subject (protocol.CredsRenewSubject), for a fresh JWT for the same
// user key — the seed never leaves the host — and writes the renewed creds file atomically, mode 0600,
// into its data directory (the agent runs unprivileged and never needs to write where its configured
// creds file lives). At start the agent uses whichever of the configured file and the renewed one was
// issued last, so a creds file an operator installs (re-enrolment) wins over an older renewal.
package credsrenew

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/configsync/configsync/libs/protocol"
)

// RenewedFile is the name of the renewed creds file in the agent's data directory.
const RenewedFile = "nats.creds"

// Creds is a parsed user creds file.
type Creds struct {
	JWT       string
	PublicKey string
	Name      string
	IssuedAt  time.Time
	// Expires is zero for a JWT without expiry.
	Expires time.Time
	kp      nkeys.KeyPair
}

// Parse reads a creds file: the user JWT (its claims are read, not verified: the server does that)
// and the user seed, which must be the key the JWT names.
func Parse(data []byte) (Creds, error) {
	token, err := nkeys.ParseDecoratedJWT(data)
	if err != nil {
		return Creds{}, fmt.Errorf("credsrenew: creds JWT: %w", err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	if err != nil {
		return Creds{}, fmt.Errorf("credsrenew: creds seed: %w", err)
	}
	c, err := claims(token)
	if err != nil {
		return Creds{}, err
	}
	pub, err := kp.PublicKey()
	if err != nil || pub != c.PublicKey {
		return Creds{}, errors.New("credsrenew: the creds file's seed is not the key its JWT names")
	}
	c.kp = kp
	return c, nil
}

// claims decodes the fields of a user JWT the agent needs.
func claims(token string) (Creds, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Creds{}, errors.New("credsrenew: malformed JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return Creds{}, fmt.Errorf("credsrenew: JWT payload: %w", err)
	}
	var cl struct {
		Subject  string `json:"sub"`
		Name     string `json:"name"`
		IssuedAt int64  `json:"iat"`
		Expires  int64  `json:"exp"`
	}
	if err := json.Unmarshal(payload, &cl); err != nil {
		return Creds{}, fmt.Errorf("credsrenew: JWT claims: %w", err)
	}
	if !nkeys.IsValidPublicUserKey(cl.Subject) {
		return Creds{}, errors.New("credsrenew: the JWT is not a user's")
	}
	c := Creds{JWT: token, PublicKey: cl.Subject, Name: cl.Name, IssuedAt: time.Unix(cl.IssuedAt, 0)}
	if cl.Expires > 0 {
		c.Expires = time.Unix(cl.Expires, 0)
	}
	return c, nil
}

// Format lays out a creds file (what nats-server tooling writes): the JWT, then the seed.
func Format(token string, seed []byte) []byte {
	var b bytes.Buffer
	b.WriteString("-----BEGIN NATS USER JWT-----\n")
	b.WriteString(token)
	b.WriteString("\n------END NATS USER JWT------\n\n")
	b.WriteString("************************* IMPORTANT *************************\n")
	b.WriteString("NKEY Seed printed below can be used to sign and prove identity.\n")
	b.WriteString("NKEYs are sensitive and should be treated as secrets.\n\n")
	b.WriteString("-----BEGIN USER NKEY SEED-----\n")
	b.Write(seed)
	b.WriteString("\n------END USER NKEY SEED------\n\n")
	b.WriteString("*************************************************************\n")
	return b.Bytes()
}

func readCreds(path string) (Creds, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Creds{}, err
	}
	return Parse(data)
}

// Choose returns the creds file to connect with: the renewed file in dataDir when it is valid for the
// agent, unexpired at now, and was issued after the configured one; otherwise the configured file.
func Choose(configured, dataDir, agentID string, now time.Time) string {
	renewed := filepath.Join(dataDir, RenewedFile)
	r, err := readCreds(renewed)
	if err != nil || r.Name != agentID || (!r.Expires.IsZero() && !now.Before(r.Expires)) {
		return configured
	}
	c, err := readCreds(configured)
	if err != nil || r.IssuedAt.After(c.IssuedAt) {
		return renewed
	}
	return configured
}

// Renewer holds the agent's current credentials — the connection signs with them on every (re)connect
// — and renews them before they expire.
type Renewer struct {
	agentID string
	dataDir string
	log     *slog.Logger

	mu  sync.Mutex
	cur Creds
	now func() time.Time
}

// Open loads the credentials Choose picks.
func Open(configured, dataDir, agentID string, log *slog.Logger) (*Renewer, error) {
	path := Choose(configured, dataDir, agentID, time.Now())
	c, err := readCreds(path)
	if err != nil {
		return nil, fmt.Errorf("credsrenew: %s: %w", path, err)
	}
	if path != configured {
		log.Info("nats credentials: using the renewed file", "file", path, "expires_at", c.Expires)
	}
	return &Renewer{agentID: agentID, dataDir: dataDir, log: log, cur: c, now: time.Now}, nil
}

// Current returns the credentials in use.
func (r *Renewer) Current() Creds {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// Option authenticates a connection with the current credentials (read at every connect).
func (r *Renewer) Option() nats.Option {
	return nats.UserJWT(
		func() (string, error) { return r.Current().JWT, nil },
		func(nonce []byte) ([]byte, error) { return r.Current().kp.Sign(nonce) },
	)
}

// renewAt is when credentials should be renewed: two thirds into their lifetime; at once when they
// never expire (so credentials issued before expiry existed are replaced by expiring ones).
func renewAt(c Creds) time.Time {
	if c.Expires.IsZero() {
		return c.IssuedAt
	}
	return c.IssuedAt.Add(c.Expires.Sub(c.IssuedAt) * 2 / 3)
}

// Retry bounds after a failed renewal.
const (
	retryMin = 30 * time.Second
	retryMax = time.Hour
)

// Run renews the credentials before they expire until ctx ends. A failed renewal is retried with
// backoff (and at least once more before expiry). After a renewal onRenewed runs (the agent reconnects
// at once with the new JWT, instead of being disconnected when the old one expires).
func (r *Renewer) Run(ctx context.Context, nc *nats.Conn, onRenewed func()) {
	retry := retryMin
	for {
		c := r.Current()
		wait := renewAt(c).Sub(r.now())
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		err := r.renewOnce(ctx, nc)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			retry = retryMin
			if onRenewed != nil {
				onRenewed()
			}
			continue
		}
		d := retry/2 + rand.N(retry/2+1)
		if left := c.Expires.Sub(r.now()); !c.Expires.IsZero() && left > 2*time.Second && d > left/2 {
			d = left / 2
		}
		r.log.Warn("nats credentials renewal failed; retrying", "error", err, "retry_in", d, "expires_at", c.Expires)
		retry = min(retry*2, retryMax)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// renewOnce asks for a fresh JWT, checks it and writes the renewed creds file.
func (r *Renewer) renewOnce(ctx context.Context, nc *nats.Conn) error {
	c := r.Current()
	req, _ := json.Marshal(protocol.CredsRenewRequest{AgentID: r.agentID, PublicKey: c.PublicKey})
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(rctx, protocol.CredsRenewSubject(r.agentID), req)
	if err != nil {
		return fmt.Errorf("renew request: %w", err)
	}
	var reply protocol.CredsRenewReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return fmt.Errorf("renew reply: %w", err)
	}
	if reply.Error != nil {
		return reply.Error
	}
	next, err := claims(reply.JWT)
	if err != nil {
		return err
	}
	if next.PublicKey != c.PublicKey || next.Name != r.agentID || next.Expires.IsZero() || !next.Expires.After(c.Expires) && !c.Expires.IsZero() {
		return errors.New("renew reply: the JWT is not a later one for this agent's key")
	}
	next.kp = c.kp
	seed, err := c.kp.Seed()
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(r.dataDir, RenewedFile), Format(next.JWT, seed)); err != nil {
		return fmt.Errorf("write renewed creds: %w", err)
	}
	r.mu.Lock()
	r.cur = next
	r.mu.Unlock()
	r.log.Info("nats credentials renewed", "expires_at", next.Expires)
	return nil
}

// writeAtomic writes data to path with mode 0600 through a synced temporary file in the same
// directory and a rename, so a crash leaves either the old file or the new one.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".nats-creds-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
