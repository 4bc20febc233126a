// Package tokens issues, authenticates and revokes the bearer API tokens operators use. Only the
// SHA-256 of a token is stored; the token itself is shown once, when it is issued.
package tokens

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// Prefix starts every token, so that a leaked token is easy to recognise (secret scanners).
const Prefix = "cst_"

// Token is a stored API token (its hash, never the token).
type Token struct {
	ID         uuid.UUID
	Name       string
	Hash       []byte
	ClientID   uuid.NullUUID
	CreatedAt  time.Time
	LastUsedAt *time.Time
}

// Issued is a freshly issued token: Secret is the bearer token, returned to the caller once.
type Issued struct {
	ID     uuid.UUID
	Name   string
	Secret string
}

// Store persists tokens. Lookups of unknown or revoked tokens fail with a fault.NotFound.
type Store interface {
	CreateToken(ctx context.Context, name string, hash []byte, clientID uuid.NullUUID) (Token, error)
	TokenByHash(ctx context.Context, hash []byte) (Token, error)
	TouchToken(ctx context.Context, id uuid.UUID) error
	RevokeToken(ctx context.Context, id uuid.UUID) (bool, error)
	ClientExists(ctx context.Context, id uuid.UUID) (bool, error)
}

// touchEvery bounds how often a token's last_used_at is written (not on every request).
const touchEvery = time.Minute

// Service is the token use cases.
type Service struct {
	store Store
	guard *tenancy.Guard
	now   func() time.Time
}

// NewService returns a Service.
func NewService(store Store, guard *tenancy.Guard) *Service {
	return &Service{store: store, guard: guard, now: time.Now}
}

// Hash returns the stored form of a token.
func Hash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// Generate returns a new random token (256 bits) and its hash.
func Generate() (token string, hash []byte, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, fmt.Errorf("tokens: random: %w", err)
	}
	token = Prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, Hash(token), nil
}

// Authenticate returns the Principal of a bearer token, or an Unauthenticated fault.
func (s *Service) Authenticate(ctx context.Context, bearer string) (tenancy.Principal, error) {
	if bearer == "" || len(bearer) > 512 {
		return tenancy.Principal{}, fault.Unauthenticatedf("a valid bearer token is required")
	}
	t, err := s.store.TokenByHash(ctx, Hash(bearer))
	if fault.Is(err, fault.NotFound) {
		return tenancy.Principal{}, fault.Unauthenticatedf("a valid bearer token is required")
	}
	if err != nil {
		return tenancy.Principal{}, fmt.Errorf("tokens: authenticate: %w", err)
	}
	if t.LastUsedAt == nil || s.now().Sub(*t.LastUsedAt) > touchEvery {
		// Best effort: failing to record usage must not fail the request.
		_ = s.store.TouchToken(ctx, t.ID)
	}
	return tenancy.Principal{TokenID: t.ID, Name: t.Name, ClientID: t.ClientID, IsAdmin: !t.ClientID.Valid}, nil
}

// Issue creates a token named name for clientID (admin when not Valid). Only admins issue tokens.
func (s *Service) Issue(ctx context.Context, p tenancy.Principal, name string, clientID uuid.NullUUID) (Issued, error) {
	if err := p.RequireAdmin(); err != nil {
		return Issued{}, err
	}
	name, err := validName(name)
	if err != nil {
		return Issued{}, err
	}
	if clientID.Valid {
		ok, err := s.store.ClientExists(ctx, clientID.UUID)
		if err != nil {
			return Issued{}, fmt.Errorf("tokens: issue: %w", err)
		}
		if !ok {
			return Issued{}, fault.NotFoundf("client %s not found", clientID.UUID)
		}
	}
	issued, err := Create(ctx, s.store, name, clientID)
	if err != nil {
		return Issued{}, err
	}
	detail := map[string]any{"name": name, "admin": !clientID.Valid}
	s.guard.Record(ctx, p, tenancy.ActionTokenIssued, clientID, tenancy.KindToken, issued.ID, detail)
	return issued, nil
}

// Create stores a new token without any caller check. It backs Issue and the bootstrap of the first
// admin token.
func Create(ctx context.Context, store Store, name string, clientID uuid.NullUUID) (Issued, error) {
	name, err := validName(name)
	if err != nil {
		return Issued{}, err
	}
	secret, hash, err := Generate()
	if err != nil {
		return Issued{}, err
	}
	t, err := store.CreateToken(ctx, name, hash, clientID)
	if err != nil {
		return Issued{}, fmt.Errorf("tokens: create: %w", err)
	}
	return Issued{ID: t.ID, Name: t.Name, Secret: secret}, nil
}

// Revoke revokes a token. Only admins revoke tokens.
func (s *Service) Revoke(ctx context.Context, p tenancy.Principal, id uuid.UUID) error {
	if err := p.RequireAdmin(); err != nil {
		return err
	}
	ok, err := s.store.RevokeToken(ctx, id)
	if err != nil {
		return fmt.Errorf("tokens: revoke: %w", err)
	}
	if !ok {
		return fault.NotFoundf("token %s not found", id)
	}
	s.guard.Record(ctx, p, tenancy.ActionTokenRevoked, uuid.NullUUID{}, tenancy.KindToken, id, nil)
	return nil
}

func validName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return "", fault.Invalidf("name must be 1 to 200 characters")
	}
	return name, nil
}
