// Package credential holds the credential service's use cases: storing collector credentials encrypted
// (create, rotate, delete, metadata reads) and the Injector, which inlines decrypted secret fields into
// hosts' collector configs in batches. Encryption goes through the Cipher port (Vault Transit or the local
// keyring) and rows through the Store port; this package knows nothing of SQL, NATS or Vault.
//
// Secret values never leave this package except inside an Injector result: replies to the other use
// cases carry metadata only, and no error built here contains a secret value.
package credential

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
)

// Domain errors; the NATS edge maps them to protocol error codes in one place. Anything else is internal.
var (
	// ErrInvalidRequest: the request is malformed (bad id, empty name, bad secret fields).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrNotFound: the credential (or the client or environment it names) does not exist for the client.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the client already has a credential with that name.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: the cipher cannot be reached right now (Vault sealed, down or refusing the token).
	ErrUnavailable = errors.New("unavailable")
	// ErrStoreUnavailable: the store cannot be reached or takes no work right now (a database outage).
	// Store adapters wrap their outages with it; the request may succeed later.
	ErrStoreUnavailable = errors.New("store unavailable")
	// ErrDecrypt: a ciphertext cannot be opened (unknown key version, wrong key, tampered or moved to
	// another row). Retrying does not help.
	ErrDecrypt = errors.New("cannot decrypt")
)

// Record is a stored credential: metadata plus the ciphertext of its secret. IDs are canonical UUID
// strings; EnvironmentID is empty for a credential usable in every environment of its client.
type Record struct {
	ID            string
	ClientID      string
	EnvironmentID string
	Name          string
	Fields        []string
	Ciphertext    string
	KeyVersion    string
	// AllowedTargets are the host:port patterns the credential may be injected for, canonical and
	// sorted (see targets.go); empty: any target.
	AllowedTargets []string
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// Meta returns the record's metadata, the only view of a credential that leaves the service.
func (r Record) Meta() protocol.CredentialMeta {
	return protocol.CredentialMeta{
		ID:             r.ID,
		ClientID:       r.ClientID,
		EnvironmentID:  r.EnvironmentID,
		Name:           r.Name,
		Fields:         slices.Clone(r.Fields),
		KeyVersion:     r.KeyVersion,
		AllowedTargets: slices.Clone(r.AllowedTargets),
		CreatedAt:      r.CreatedAt,
		UpdatedAt:      r.UpdatedAt,
	}
}

// Sealed is what the Injector needs of a credential: its scope, allowed targets and ciphertext.
type Sealed struct {
	ID             string
	ClientID       string
	EnvironmentID  string
	Ciphertext     string
	AllowedTargets []string
}

// Store persists credentials. Lookups are scoped by client: another client's credential is ErrNotFound.
type Store interface {
	// Create inserts r (its ID chosen by the caller). ErrConflict when the client already has r.Name;
	// ErrNotFound when the client or environment does not exist or the environment is another client's.
	Create(ctx context.Context, r Record) (Record, error)
	// Get returns one credential of a client.
	Get(ctx context.Context, clientID, id string) (Record, error)
	// List returns a client's credentials in name order; with environmentID, only those scoped to it.
	List(ctx context.Context, clientID, environmentID string) ([]Record, error)
	// Update applies fn to the locked row and stores what it returns (fields, ciphertext, key version,
	// allowed targets).
	Update(ctx context.Context, clientID, id string, fn func(Record) (Record, error)) (Record, error)
	// Delete removes one credential of a client and returns what it was.
	Delete(ctx context.Context, clientID, id string) (Record, error)
	// SealedByIDs returns the credentials among ids, of any client, keyed by id. Missing ids are absent.
	SealedByIDs(ctx context.Context, ids []string) (map[string]Sealed, error)
}

// Service runs the credential management use cases.
type Service struct {
	store  Store
	cipher Cipher
}

// NewService returns a Service storing through store and encrypting with cipher.
func NewService(store Store, cipher Cipher) *Service {
	return &Service{store: store, cipher: cipher}
}

// Create validates and encrypts a new credential and stores it. The reply is metadata only.
func (s *Service) Create(ctx context.Context, req protocol.CredentialCreateRequest) (protocol.CredentialMeta, error) {
	clientID, envID, err := parseScope(req.ClientID, req.EnvironmentID)
	if err != nil {
		return protocol.CredentialMeta{}, err
	}
	if err := validateName(req.Name); err != nil {
		return protocol.CredentialMeta{}, err
	}
	fields, err := validateSecret(req.Secret)
	if err != nil {
		return protocol.CredentialMeta{}, err
	}
	targets, err := normalizeTargets(req.AllowedTargets)
	if err != nil {
		return protocol.CredentialMeta{}, err
	}
	r := Record{ID: uuid.NewString(), ClientID: clientID, EnvironmentID: envID, Name: req.Name, Fields: fields, AllowedTargets: targets}
	if r.Ciphertext, err = s.seal(ctx, r, req.Secret); err != nil {
		return protocol.CredentialMeta{}, err
	}
	r.KeyVersion = KeyVersion(r.Ciphertext)
	stored, err := s.store.Create(ctx, r)
	if err != nil {
		return protocol.CredentialMeta{}, fmt.Errorf("credential: create: %w", err)
	}
	return stored.Meta(), nil
}

// Rotate replaces a credential's secret with req.Secret, or, without one, re-encrypts the stored secret
// under the cipher's newest key (after a key rotation in the keyring or in Vault). With
// req.AllowedTargets it also replaces the allowed targets (an empty list: any target).
func (s *Service) Rotate(ctx context.Context, req protocol.CredentialRotateRequest) (protocol.CredentialMeta, error) {
	clientID, id, err := parseRef(req.ClientID, req.ID)
	if err != nil {
		return protocol.CredentialMeta{}, err
	}
	var fields []string
	if req.Secret != nil {
		if fields, err = validateSecret(req.Secret); err != nil {
			return protocol.CredentialMeta{}, err
		}
	}
	var targets []string
	if req.AllowedTargets != nil {
		if targets, err = normalizeTargets(*req.AllowedTargets); err != nil {
			return protocol.CredentialMeta{}, err
		}
	}
	stored, err := s.store.Update(ctx, clientID, id, func(r Record) (Record, error) {
		if req.AllowedTargets != nil {
			r.AllowedTargets = targets
		}
		secret := req.Secret
		if secret == nil {
			old, err := s.open(ctx, r)
			if err != nil {
				return Record{}, err
			}
			defer clear(old)
			secret = old
		} else {
			r.Fields = fields
		}
		ct, err := s.seal(ctx, r, secret)
		if err != nil {
			return Record{}, err
		}
		r.Ciphertext, r.KeyVersion = ct, KeyVersion(ct)
		return r, nil
	})
	if err != nil {
		return protocol.CredentialMeta{}, fmt.Errorf("credential: rotate: %w", err)
	}
	return stored.Meta(), nil
}

// Delete removes a credential and returns its metadata. Collectors that still reference it fail to
// inject from then on (all-or-nothing), which is the point of deleting it.
func (s *Service) Delete(ctx context.Context, ref protocol.CredentialRef) (protocol.CredentialMeta, error) {
	return byRef(ctx, ref, "delete", s.store.Delete)
}

// Get returns one credential's metadata.
func (s *Service) Get(ctx context.Context, ref protocol.CredentialRef) (protocol.CredentialMeta, error) {
	return byRef(ctx, ref, "get", s.store.Get)
}

// byRef runs op, a store call on one credential, on the credential ref names and returns the
// metadata of the record it returns; name names op in errors.
func byRef(ctx context.Context, ref protocol.CredentialRef, name string,
	op func(ctx context.Context, clientID, id string) (Record, error),
) (protocol.CredentialMeta, error) {
	clientID, id, err := parseRef(ref.ClientID, ref.ID)
	if err != nil {
		return protocol.CredentialMeta{}, err
	}
	r, err := op(ctx, clientID, id)
	if err != nil {
		return protocol.CredentialMeta{}, fmt.Errorf("credential: %s: %w", name, err)
	}
	return r.Meta(), nil
}

// List returns the metadata of a client's credentials, optionally only those scoped to one environment.
func (s *Service) List(ctx context.Context, req protocol.CredentialListRequest) (protocol.CredentialListReply, error) {
	clientID, envID, err := parseScope(req.ClientID, req.EnvironmentID)
	if err != nil {
		return protocol.CredentialListReply{}, err
	}
	rs, err := s.store.List(ctx, clientID, envID)
	if err != nil {
		return protocol.CredentialListReply{}, fmt.Errorf("credential: list: %w", err)
	}
	reply := protocol.CredentialListReply{Credentials: make([]protocol.CredentialMeta, len(rs))}
	for i, r := range rs {
		reply.Credentials[i] = r.Meta()
	}
	return reply, nil
}

// seal encrypts secret for the row r (bound to its id and client).
func (s *Service) seal(ctx context.Context, r Record, secret map[string]string) (string, error) {
	plaintext, err := encodeSecret(secret)
	if err != nil {
		return "", err
	}
	defer clear(plaintext)
	cts, err := s.cipher.Encrypt(ctx, []EncryptItem{{Plaintext: plaintext, AAD: AAD(r.ClientID, r.ID)}})
	if err != nil {
		return "", fmt.Errorf("credential: encrypt: %w", err)
	}
	if len(cts) != 1 {
		return "", fmt.Errorf("credential: encrypt: cipher returned %d ciphertexts for 1 plaintext", len(cts))
	}
	return cts[0], nil
}

// open decrypts the secret of row r.
func (s *Service) open(ctx context.Context, r Record) (map[string]string, error) {
	out, err := s.cipher.Decrypt(ctx, []DecryptItem{{Ciphertext: r.Ciphertext, AAD: AAD(r.ClientID, r.ID)}})
	if err != nil {
		return nil, fmt.Errorf("credential: decrypt: %w", err)
	}
	if len(out) != 1 {
		return nil, fmt.Errorf("credential: decrypt: cipher returned %d results for 1 ciphertext", len(out))
	}
	if out[0].Err != nil {
		return nil, fmt.Errorf("credential: decrypt credential %s: %w", r.ID, out[0].Err)
	}
	defer clear(out[0].Plaintext)
	secret, err := decodeSecret(out[0].Plaintext)
	if err != nil {
		return nil, fmt.Errorf("credential: decrypt credential %s: %w", r.ID, err)
	}
	return secret, nil
}

// parseScope returns the canonical forms of a required client id and an optional environment id.
func parseScope(clientID, environmentID string) (string, string, error) {
	c, err := parseID("client_id", clientID)
	if err != nil || environmentID == "" {
		return c, "", err
	}
	e, err := parseID("environment_id", environmentID)
	if err != nil {
		return "", "", err
	}
	return c, e, nil
}

func parseRef(clientID, id string) (string, string, error) {
	c, err := parseID("client_id", clientID)
	if err != nil {
		return "", "", err
	}
	i, err := parseID("id", id)
	if err != nil {
		return "", "", err
	}
	return c, i, nil
}

// parseID returns the canonical form of a UUID field, so AADs and lookups agree on one spelling.
func parseID(field, v string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("%w: %s is required", ErrInvalidRequest, field)
	}
	u, err := uuid.Parse(v)
	if err != nil || len(v) != 36 {
		return "", fmt.Errorf("%w: %s is not a UUID", ErrInvalidRequest, field)
	}
	return u.String(), nil
}
