// Package sessions holds the web console's sign-in sessions: an operator exchanges an API token (admin or
// client-scoped) for a random session id that the browser keeps in a cookie. Only the SHA-256 of the id
// is stored, so any config-api replica can serve any session and a database dump opens none. A session
// acts as its API token: it ends at sign-out, when it expires, and as soon as the token is revoked.
package sessions

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// DefaultTTL is how long a session lasts when the caller does not say.
const DefaultTTL = 12 * time.Hour

// Store persists sessions by the hash of their id. Session fails with fault.NotFound for an unknown or
// expired session or one whose API token is revoked.
type Store interface {
	CreateSession(ctx context.Context, idHash []byte, tokenID uuid.UUID, expiresAt time.Time) error
	Session(ctx context.Context, idHash []byte) (tenancy.Principal, time.Time, error)
	DeleteSession(ctx context.Context, idHash []byte) error
	DeleteExpiredSessions(ctx context.Context) (int64, error)
}

// Tokens authenticates API tokens (tokens.Service).
type Tokens interface {
	Authenticate(ctx context.Context, bearer string) (tenancy.Principal, error)
}

// Session is an open session. ID is the secret the browser holds; it is known only when the session is
// opened and when the browser presents it.
type Session struct {
	ID        string
	Principal tenancy.Principal
	ExpiresAt time.Time
}

// CSRFToken is the anti-forgery token of the session: derived from the secret id, so it needs no storage
// and cannot be guessed without the cookie, which pages on other origins cannot read.
func (s Session) CSRFToken() string {
	mac := hmac.New(sha256.New, []byte(s.ID))
	mac.Write([]byte("configsync console csrf"))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// ValidCSRF reports whether token is the session's CSRF token (constant time).
func (s Session) ValidCSRF(token string) bool {
	return token != "" && hmac.Equal([]byte(token), []byte(s.CSRFToken()))
}

// Service is the session use cases.
type Service struct {
	store  Store
	tokens Tokens
	guard  *tenancy.Guard
	ttl    time.Duration
	now    func() time.Time
}

// NewService returns a Service whose sessions last ttl (DefaultTTL when not positive).
func NewService(store Store, tokens Tokens, guard *tenancy.Guard, ttl time.Duration) *Service {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Service{store: store, tokens: tokens, guard: guard, ttl: ttl, now: time.Now}
}

// TTL is how long a new session lasts.
func (s *Service) TTL() time.Duration { return s.ttl }

// SignIn opens a session for an API token. A wrong token is an Unauthenticated fault.
func (s *Service) SignIn(ctx context.Context, token string) (Session, error) {
	p, err := s.tokens.Authenticate(ctx, token)
	if err != nil {
		return Session{}, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Session{}, fmt.Errorf("sessions: random: %w", err)
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	expires := s.now().Add(s.ttl).UTC()
	// Expired rows are of no use to anyone; sign-ins are rare enough to sweep them here.
	if _, err := s.store.DeleteExpiredSessions(ctx); err != nil {
		return Session{}, fmt.Errorf("sessions: sweep: %w", err)
	}
	if err := s.store.CreateSession(ctx, hash(id), p.TokenID, expires); err != nil {
		return Session{}, fmt.Errorf("sessions: create: %w", err)
	}
	s.guard.Record(ctx, p, ActionSignedIn, p.ClientID, tenancy.KindToken, p.TokenID, nil)
	return Session{ID: id, Principal: p, ExpiresAt: expires}, nil
}

// ActionSignedIn is the audit action of a console sign-in.
const ActionSignedIn = "console_signed_in"

// Authenticate returns the open session with id, or an Unauthenticated fault.
func (s *Service) Authenticate(ctx context.Context, id string) (Session, error) {
	if id == "" || len(id) > 128 {
		return Session{}, errNoSession
	}
	p, expires, err := s.store.Session(ctx, hash(id))
	if fault.Is(err, fault.NotFound) {
		return Session{}, errNoSession
	}
	if err != nil {
		return Session{}, fmt.Errorf("sessions: authenticate: %w", err)
	}
	return Session{ID: id, Principal: p, ExpiresAt: expires}, nil
}

// SignOut ends the session with id; ending one that is gone is not an error.
func (s *Service) SignOut(ctx context.Context, id string) error {
	if id == "" || len(id) > 128 {
		return nil
	}
	if err := s.store.DeleteSession(ctx, hash(id)); err != nil {
		return fmt.Errorf("sessions: sign out: %w", err)
	}
	return nil
}

var errNoSession = fault.Unauthenticatedf("sign in to continue")

func hash(id string) []byte {
	sum := sha256.Sum256([]byte(id))
	return sum[:]
}
