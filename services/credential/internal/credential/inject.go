package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// Injector resolves credential references in batches of collector configs: every collector with a
// credential_id loses it and gains the credential's decrypted fields inline. Each item is all-or-nothing
// (the spec's credential resolution rules): if any credential it references is missing, belongs to
// another client, is scoped to another environment, has allowed targets that a collector referencing it
// does not aim at (targets.go) or cannot be decrypted, the item fails with credential_failed and a
// reason naming the credential, and other items are unaffected. Another client's credential is answered
// "not found", exactly as a missing one.
//
// A batch reads every referenced credential in one store query and decrypts every distinct credential
// that some item may use in one Cipher call, whatever the number of items. Decrypted secrets live only
// for the batch: plaintexts are zeroed and secret maps cleared before Inject returns (Go strings made
// from them cannot be overwritten; they become garbage with the maps). Nothing is cached across batches.
type Injector struct {
	store  Store
	cipher Cipher
	log    *zap.Logger
}

// NewInjector returns an Injector reading credentials from store and opening them with cipher.
func NewInjector(store Store, cipher Cipher, log *zap.Logger) *Injector {
	return &Injector{store: store, cipher: cipher, log: log}
}

// failure is why one item fails, kept apart from the reply so that it is logged once per batch.
type failure struct {
	code, rule, credentialID string
	// crossClient marks a reference to another client's credential. The reply says "not found", as
	// for one that does not exist, so no answer tells a tenant that an id exists elsewhere; only the
	// log tells them apart.
	crossClient bool
}

// itemPlan is what the injector learned about one item before decrypting.
type itemPlan struct {
	clientID, environmentID string
	// ids are the item's distinct credential_id values as written in its collectors.
	ids  []string
	fail *failure
}

// Inject answers one batch: one result per item, in order, with the item's key. The returned error is
// for failures of the whole batch only (the store cannot be read); item failures are in the results.
// The injected collector documents hold secrets: send them, then Wipe the results.
func (in *Injector) Inject(ctx context.Context, items []protocol.InjectItem) ([]protocol.InjectResult, error) {
	results := make([]protocol.InjectResult, len(items))
	plans := make([]itemPlan, len(items))
	// canonical maps each credential_id as written to its canonical UUID ("" when it is not a UUID).
	canonical := map[string]string{}
	var lookup []string
	for i, it := range items {
		results[i].Key = it.Key
		p := &plans[i]
		p.fail = in.plan(it, p, canonical, &lookup)
		if p.fail == nil && len(p.ids) == 0 {
			// Nothing to inject: the collectors pass through unchanged.
			results[i].Collectors = it.Collectors
		}
	}

	var sealed map[string]Sealed
	if len(lookup) > 0 {
		var err error
		if sealed, err = in.store.SealedByIDs(ctx, lookup); err != nil {
			return nil, fmt.Errorf("credential: inject: read credentials: %w", err)
		}
	}

	// Scope every reference and check the targets of the credentials bound to some; only credentials
	// some item may actually use get decrypted, so a cross-client reference or a collector aimed at a
	// target its credential does not allow never causes a decryption.
	need := map[string]bool{}
	for i := range plans {
		p := &plans[i]
		if p.fail != nil || len(p.ids) == 0 {
			continue
		}
		for _, raw := range p.ids {
			if p.fail = scope(raw, canonical[raw], sealed, p); p.fail != nil {
				break
			}
		}
		if p.fail == nil {
			p.fail = targetFailure(items[i].Collectors, p.ids, canonical, sealed)
		}
		if p.fail == nil {
			for _, raw := range p.ids {
				need[canonical[raw]] = true
			}
		}
	}

	secrets, decryptErrs := in.decrypt(ctx, need, sealed)
	defer func() {
		for _, s := range secrets {
			clear(s)
		}
	}()

	failures := map[failure]int{}
	for i, it := range items {
		p := &plans[i]
		if p.fail == nil && len(p.ids) > 0 {
			p.fail = in.injectItem(it, p, canonical, secrets, decryptErrs, &results[i])
		}
		if p.fail != nil {
			results[i].Collectors, results[i].SecretFields = nil, nil
			results[i].Error = &protocol.Error{Code: p.fail.code, Message: p.fail.message()}
			failures[*p.fail]++
		}
	}
	in.logFailures(failures)
	return results, nil
}

// plan validates one item and records its credential references.
func (in *Injector) plan(it protocol.InjectItem, p *itemPlan, canonical map[string]string, lookup *[]string) *failure {
	var err error
	if p.clientID, err = parseID("client_id", it.ClientID); err != nil {
		return &failure{code: protocol.CodeInvalidRequest, rule: "client_id is not a UUID"}
	}
	if p.environmentID, err = parseID("environment_id", it.EnvironmentID); err != nil {
		return &failure{code: protocol.CodeInvalidRequest, rule: "environment_id is not a UUID"}
	}
	if p.ids, err = agentconfig.CredentialIDs(it.Collectors); err != nil {
		return &failure{code: protocol.CodeInvalidRequest, rule: "collectors: " + trimAgentconfig(err)}
	}
	for _, raw := range p.ids {
		if _, seen := canonical[raw]; seen {
			continue
		}
		c, err := parseID("credential_id", raw)
		if err != nil {
			c = ""
		} else {
			*lookup = append(*lookup, c)
		}
		canonical[raw] = c
	}
	return nil
}

// scope applies the client and environment rules to one reference of an item.
func scope(raw, id string, sealed map[string]Sealed, p *itemPlan) *failure {
	s, ok := sealed[id]
	switch {
	case id == "" || !ok:
		return &failure{code: protocol.CodeCredentialFailed, rule: "not found", credentialID: raw}
	case s.ClientID != p.clientID:
		return &failure{code: protocol.CodeCredentialFailed, rule: "not found", credentialID: raw, crossClient: true}
	case s.EnvironmentID != "" && s.EnvironmentID != p.environmentID:
		return &failure{code: protocol.CodeCredentialFailed, rule: "is scoped to another environment", credentialID: raw}
	}
	return nil
}

// targetFailure checks the collectors of an item against the allowed targets of the credentials it
// references (see targets.go). Credentials without allowed targets go anywhere; when none of the item's
// has any, the collectors are not even decoded.
func targetFailure(collectors json.RawMessage, ids []string, canonical map[string]string, sealed map[string]Sealed) *failure {
	var bound map[string][]string
	for _, raw := range ids {
		if t := sealed[canonical[raw]].AllowedTargets; len(t) > 0 {
			if bound == nil {
				bound = map[string][]string{}
			}
			bound[raw] = t
		}
	}
	if bound == nil {
		return nil
	}
	return checkTargets(collectors, bound)
}

// decrypt opens every needed credential in one Cipher call. It returns the secrets by canonical id and,
// for those that could not be opened, why.
func (in *Injector) decrypt(ctx context.Context, need map[string]bool, sealed map[string]Sealed) (map[string]map[string]string, map[string]error) {
	if len(need) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(need))
	for id := range need {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	batch := make([]DecryptItem, len(ids))
	for i, id := range ids {
		s := sealed[id]
		batch[i] = DecryptItem{Ciphertext: s.Ciphertext, AAD: AAD(s.ClientID, s.ID)}
	}
	secrets := make(map[string]map[string]string, len(ids))
	errs := map[string]error{}
	out, err := in.cipher.Decrypt(ctx, batch)
	if err == nil && len(out) != len(batch) {
		err = fmt.Errorf("cipher returned %d results for %d ciphertexts", len(out), len(batch))
	}
	if err != nil {
		for i := range out {
			clear(out[i].Plaintext)
		}
		in.log.Warn("credential batch decryption failed", zap.Int("credentials", len(ids)), zap.Error(err))
		for _, id := range ids {
			errs[id] = err
		}
		return secrets, errs
	}
	for i, id := range ids {
		if out[i].Err != nil {
			errs[id] = out[i].Err
			continue
		}
		secret, err := decodeSecret(out[i].Plaintext)
		clear(out[i].Plaintext)
		if err != nil {
			errs[id] = err
			continue
		}
		secrets[id] = secret
	}
	in.logDecryptErrors(errs)
	return secrets, errs
}

// logDecryptErrors logs each distinct decryption error once with (up to ten of) the credentials it hit.
// Cipher errors name key versions and Vault's reasons, never plaintext.
func (in *Injector) logDecryptErrors(errs map[string]error) {
	byReason := map[string][]string{}
	for id, err := range errs {
		byReason[err.Error()] = append(byReason[err.Error()], id)
	}
	for reason, ids := range byReason {
		slices.Sort(ids)
		in.log.Warn("credential decryption failed", zap.String("error", reason),
			zap.Int("credentials", len(ids)), zap.Strings("credential_ids", ids[:min(len(ids), 10)]))
	}
}

// injectItem inlines the secrets of one scoped item into res.
func (in *Injector) injectItem(it protocol.InjectItem, p *itemPlan, canonical map[string]string,
	secrets map[string]map[string]string, decryptErrs map[string]error, res *protocol.InjectResult) *failure {
	mine := make(map[string]map[string]string, len(p.ids))
	for _, raw := range p.ids {
		id := canonical[raw]
		if err := decryptErrs[id]; err != nil {
			f := &failure{code: protocol.CodeCredentialFailed, rule: "could not be decrypted", credentialID: raw}
			if errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				f.code, f.rule = protocol.CodeUnavailable, "could not be decrypted: the cipher is unavailable"
			}
			return f
		}
		mine[raw] = secrets[id]
	}
	out, pointers, err := agentconfig.InjectSecrets(it.Collectors, mine)
	if err != nil {
		return &failure{code: protocol.CodeCredentialFailed, rule: "could not be injected: " + trimAgentconfig(err)}
	}
	res.Collectors, res.SecretFields = out, pointers
	return nil
}

func (f failure) message() string {
	if f.credentialID == "" {
		return f.rule
	}
	return fmt.Sprintf("credential %s %s", f.credentialID, f.rule)
}

// logFailures logs each distinct failure of a batch once, with the number of items it failed.
func (in *Injector) logFailures(failures map[failure]int) {
	for f, n := range failures {
		in.log.Warn("credential injection failed",
			zap.String("code", f.code),
			zap.String("rule", f.rule),
			zap.Bool("cross_client", f.crossClient),
			zap.String("credential_id", f.credentialID),
			zap.Int("items", n))
	}
}

// trimAgentconfig drops libs/agentconfig's package prefixes from an error text for a reply. Its errors
// name positions, credential ids and field names, never values.
func trimAgentconfig(err error) string {
	msg := err.Error()
	for _, p := range []string{"agentconfig: inject credentials: ", "agentconfig: credential ids: ", "agentconfig: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// Wipe zeroes the injected collector documents of results once they have been sent: they hold secret
// values. Results without injections alias the request's collectors, which are zeroed too.
func Wipe(results []protocol.InjectResult) {
	for i := range results {
		clear(results[i].Collectors)
		results[i].Collectors = nil
	}
}
