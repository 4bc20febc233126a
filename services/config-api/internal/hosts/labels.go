package hosts

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// LabelPatch changes inventory labels: Set adds or replaces, Remove drops (a JSON merge patch, where a
// null value removes the key).
type LabelPatch struct {
	Set    selector.Labels
	Remove []string
}

// MaxBatchLabel caps one bulk label change.
const MaxBatchLabel = 1000

// validate checks every key and value of the patch; field prefixes the error (the request's name).
func (lp LabelPatch) validate(field string) error {
	if len(lp.Set)+len(lp.Remove) == 0 {
		return fault.Invalidf("%s must set or remove at least one label", field)
	}
	if len(lp.Set) > selector.MaxLabels {
		return fault.Invalidf("%s: at most %d labels, not %d", field, selector.MaxLabels, len(lp.Set))
	}
	if err := lp.Set.Validate(); err != nil {
		return fault.Invalidf("%s: %v", field, err)
	}
	for _, k := range lp.Remove {
		if !selector.ValidKey(k) {
			return fault.Invalidf("%s: key %q %s", field, k, selector.RuleKey)
		}
	}
	return nil
}

// withinLimit is the check PatchLabels runs on the result: no host may end with more than MaxLabels.
func withinLimit(field string) func(map[uuid.UUID]selector.Labels) error {
	return func(res map[uuid.UUID]selector.Labels) error {
		for id, l := range res {
			if len(l) > selector.MaxLabels {
				return fault.Invalidf("%s: host %s would have %d labels, at most %d are allowed", field, id, len(l), selector.MaxLabels)
			}
		}
		return nil
	}
}

// SetLabels patches one host's inventory labels and returns the host; audited (host_labels_set).
func (s *Service) SetLabels(ctx context.Context, p tenancy.Principal, id uuid.UUID, patch LabelPatch) (Host, error) {
	if err := patch.validate("labels"); err != nil {
		return Host{}, err
	}
	updated, err := s.store.PatchLabels(ctx, p.Filter(), uuid.NullUUID{}, []uuid.UUID{id}, patch, withinLimit("labels"))
	if err != nil {
		return Host{}, fmt.Errorf("hosts: set labels: %w", err)
	}
	if len(updated) == 0 {
		return Host{}, s.guard.Missing(ctx, p, tenancy.KindHost, id)
	}
	h, err := s.Get(ctx, p, id)
	if err != nil {
		return Host{}, err
	}
	s.guard.Record(ctx, p, tenancy.ActionHostLabelsSet, uuid.NullUUID{UUID: h.ClientID, Valid: true},
		tenancy.KindHost, h.ID, auditPatch(patch, 1))
	return h, nil
}

// SetLabelsBatch patches the inventory labels of 1 to MaxBatchLabel hosts of one environment, all or
// none: an id that is not a host of the environment fails the batch, naming the entry. One audit event
// records the batch.
func (s *Service) SetLabelsBatch(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, ids []uuid.UUID, patch LabelPatch) (int, error) {
	if err := checkHostIDs(ids, MaxBatchLabel); err != nil {
		return 0, err
	}
	if err := patch.validate("labels"); err != nil {
		return 0, err
	}
	env, err := s.environments.Environment(ctx, p, environmentID)
	if err != nil {
		return 0, err
	}
	envID := uuid.NullUUID{UUID: env.ID, Valid: true}
	missingErr := fault.Invalidf("host_ids: not all hosts belong to this environment")
	missing := -1
	updated, err := s.store.PatchLabels(ctx, p.Filter(), envID, ids, patch, func(res map[uuid.UUID]selector.Labels) error {
		if len(res) != len(ids) {
			missing = slices.IndexFunc(ids, func(id uuid.UUID) bool { _, ok := res[id]; return !ok })
			return missingErr
		}
		return withinLimit("labels")(res)
	})
	if missing >= 0 {
		_ = s.guard.Missing(ctx, p, tenancy.KindHost, ids[missing])
		return 0, fault.NotFoundf("host_ids[%d]: no such host in this environment; no labels were changed", missing)
	}
	if err != nil {
		return 0, fmt.Errorf("hosts: set labels: %w", err)
	}
	s.guard.Record(ctx, p, tenancy.ActionHostLabelsSet, uuid.NullUUID{UUID: env.ClientID, Valid: true},
		tenancy.KindEnvironment, env.ID, auditPatch(patch, len(updated)))
	return len(updated), nil
}

// auditPatch is what the audit log keeps of a label change: which keys, never more than the patch.
func auditPatch(patch LabelPatch, n int) map[string]any {
	return map[string]any{"hosts": n, "set": patch.Set, "removed": patch.Remove}
}
