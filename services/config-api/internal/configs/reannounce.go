package configs

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// CredentialRefs selects the live configs of one client whose documents reference a credential.
type CredentialRefs struct {
	ClientID uuid.UUID
	// ConfigType is the type whose documents carry credential_id (agentconfig.Collectors).
	ConfigType string
	// CredentialID is the credential_id as written: the credential service's canonical UUID spelling.
	CredentialID string
}

// CredentialUse is where a credential is referenced: the environments whose live config of ConfigType,
// and the active hosts whose live override of it, have a collector with its credential_id, each list in
// id order.
type CredentialUse struct {
	ConfigType   string
	Environments []uuid.UUID
	Hosts        []uuid.UUID
}

// Count is how many configs reference the credential.
func (u CredentialUse) Count() int { return len(u.Environments) + len(u.Hosts) }

// CredentialUse finds the live collectors configs of clientID (environment defaults and overrides of
// active hosts) that reference credentialID, the configs a re-announce would give new versions. It takes
// no locks: a config written afterwards is the caller's race to accept.
func (s *Service) CredentialUse(ctx context.Context, p tenancy.Principal, clientID, credentialID uuid.UUID) (CredentialUse, error) {
	if !p.CanAccess(clientID) {
		return CredentialUse{}, fault.NotFoundf("client %s not found", clientID)
	}
	refs := CredentialRefs{ClientID: clientID, ConfigType: agentconfig.Collectors, CredentialID: credentialID.String()}
	use, err := s.repo.CredentialUse(ctx, refs)
	if err != nil {
		return CredentialUse{}, fmt.Errorf("configs: find configs referencing credential %s: %w", refs.CredentialID, err)
	}
	return use, nil
}

// ReannounceCredential gives every live collectors config of clientID that references credentialID
// (environment defaults and overrides of active hosts) a new version with unchanged data, all in one
// transaction, each with a revision (action put, actor "<caller> (<reason> <credential id>)") and a
// ConfigChanged event. Delivery then pushes them again with the credential injected as it is now; agents
// drop pushes that are not newer than what they hold, so without a new version they would keep the old
// secret. It returns how many configs were re-announced.
func (s *Service) ReannounceCredential(ctx context.Context, p tenancy.Principal, clientID, credentialID uuid.UUID, reason string) (int, error) {
	if !p.CanAccess(clientID) {
		return 0, fault.NotFoundf("client %s not found", clientID)
	}
	id := credentialID.String()
	actor := fmt.Sprintf("%s (%s %s)", p.Name, reason, id)
	refs := CredentialRefs{ClientID: clientID, ConfigType: agentconfig.Collectors, CredentialID: id}
	recs, err := s.repo.Reannounce(ctx, refs, actor, func(cur Current) (Write, bool) {
		// Under the locks the row may have been deleted or rewritten since it was found; a revoked
		// host receives nothing any more.
		if !cur.Row.Live() || cur.Target.Revoked || !references(cur.Row.Data, id) {
			return Write{}, false
		}
		return Write{Action: ActionPut, Data: cur.Row.Data}, true
	})
	if err != nil {
		return 0, fmt.Errorf("configs: re-announce configs referencing credential %s: %w", id, err)
	}
	return len(recs), nil
}

// references reports whether a collectors document has a collector with credential_id id.
func references(collectors []byte, id string) bool {
	ids, err := agentconfig.CredentialIDs(collectors)
	return err == nil && slices.Contains(ids, id)
}
