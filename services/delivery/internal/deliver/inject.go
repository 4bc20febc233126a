package deliver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// Limits of one inject request: the request and its reply must each fit a NATS message.
const (
	maxInjectItems     = 64
	maxInjectBytes     = 256 << 10
	injectConcurrency  = 4
	credentialsService = "credential"
)

// injected is the outcome for one collector list: the list to deliver with the pointers of the
// injected values, or why it cannot be delivered.
type injected struct {
	collectors   json.RawMessage
	secretFields []string
	err          *protocol.Error
}

// needsInjection reports whether a collectors config references credentials, or holds secrets inline
// (refused by injectAll). A config that cannot be read is sent to the credential service too, which
// refuses it with a reason.
func needsInjection(collectors json.RawMessage) bool {
	if agentconfig.IsNull(collectors) {
		return false
	}
	ids, err := agentconfig.CredentialIDs(collectors)
	if err != nil || len(ids) > 0 {
		return true
	}
	inline, err := agentconfig.InlineSecrets(collectors)
	return err != nil || len(inline) > 0
}

// maxNamedInlineSecrets bounds the paths an inline-secrets error names.
const maxNamedInlineSecrets = 5

// inlineSecretsError is why a collectors config that holds secrets inline is not delivered, or nil when
// it holds none. Such rows were stored before the API refused inline secrets; they stay undeliverable
// (the agent keeps what it has) until `config-api migrate-inline-secrets` moves the values into
// credentials. The message names the fields' paths, never their values.
func inlineSecretsError(collectors json.RawMessage) *protocol.Error {
	paths, err := agentconfig.InlineSecrets(collectors)
	if err != nil || len(paths) == 0 {
		return nil
	}
	named := strings.Join(paths[:min(len(paths), maxNamedInlineSecrets)], ", ")
	if len(paths) > maxNamedInlineSecrets {
		named += fmt.Sprintf(" and %d more", len(paths)-maxNamedInlineSecrets)
	}
	return protocol.Errorf(protocol.CodeCredentialFailed,
		"collectors hold secrets inline (%s); inline secrets are no longer delivered: an operator must run `config-api migrate-inline-secrets` to move them into credentials", named)
}

// injectAll asks the credential service for every item (keys unique), a bounded number of requests
// at a time, each within the size limits. An item-level failure is a result; an error means the
// service could not be asked (nothing may be delivered from these lists). Items holding secrets inline
// fail without asking.
func injectAll(ctx context.Context, inj Injector, items []protocol.InjectItem) (map[string]injected, error) {
	out := make(map[string]injected, len(items))
	ask := items[:0:0]
	for _, it := range items {
		if e := inlineSecretsError(it.Collectors); e != nil {
			out[it.Key] = injected{err: e}
			continue
		}
		ask = append(ask, it)
	}
	items = ask
	if len(items) == 0 {
		return out, nil
	}
	var chunks [][]protocol.InjectItem
	var cur []protocol.InjectItem
	size := 0
	for _, it := range items {
		n := len(it.Collectors) + len(it.Key) + len(it.ClientID) + len(it.EnvironmentID) + 64
		if len(cur) > 0 && (len(cur) == maxInjectItems || size+n > maxInjectBytes) {
			chunks = append(chunks, cur)
			cur, size = nil, 0
		}
		cur = append(cur, it)
		size += n
	}
	chunks = append(chunks, cur)

	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, injectConcurrency)
	)
	for _, chunk := range chunks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			reply, err := inj.Inject(ctx, protocol.InjectRequest{Items: chunk})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("inject credentials: %w", classifyRemote(credentialsService, err))
				}
				return
			}
			for _, r := range reply.Results {
				if r.Error != nil {
					out[r.Key] = injected{err: r.Error}
					continue
				}
				out[r.Key] = injected{collectors: r.Collectors, secretFields: r.SecretFields}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	for _, it := range items {
		if _, ok := out[it.Key]; !ok {
			out[it.Key] = injected{err: protocol.Errorf(protocol.CodeCredentialFailed, "credential service returned no result")}
		}
	}
	return out, nil
}
