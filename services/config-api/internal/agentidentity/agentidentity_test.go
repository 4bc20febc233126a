package agentidentity_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/config-api/internal/agentidentity"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func writeJSON(t *testing.T, v any, mode os.FileMode) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return testinfra.WriteFile(t, filepath.Join(t.TempDir(), "doc.json"), b, mode)
}

// TestLoadTakesOnlyTheIssuerDocument: config-api starts on the narrow issuer document and refuses the
// domain's full seeds, and an older issuer document that still holds the operator signing key, with
// errors that name the document to give it instead.
func TestLoadTakesOnlyTheIssuerDocument(t *testing.T) {
	a, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	nc := testinfra.NATS(t).Connect(t)

	id, err := agentidentity.Load(writeJSON(t, a.IssuerSeeds(), 0o640), nc, time.Second)
	if err != nil {
		t.Fatalf("issuer document refused: %v", err)
	}
	file, pub, err := id.Issue("agent-a", time.Now().Add(time.Hour))
	if err != nil || pub == "" || !strings.Contains(string(file), "BEGIN NATS USER JWT") {
		t.Fatalf("issue: %v", err)
	}
	// Without a custodian answering, an account update fails (it is not done locally).
	if err := id.Push(context.Background(), nil); err == nil {
		t.Fatal("an account update succeeded with no credential service answering")
	}

	full := a.Seeds()
	_, err = agentidentity.Load(writeJSON(t, full, 0o600), nc, time.Second)
	if err == nil {
		t.Fatal("the full seeds document was accepted")
	}
	for _, want := range []string{"NATS_AUTHORITY_FILE", "full seeds", "config-api-issuer.json"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	for _, seed := range []string{full.Operator, full.System, full.Account, full.AgentSigner, full.OperatorSigner} {
		if strings.Contains(err.Error(), seed) {
			t.Fatal("the error echoes a seed")
		}
	}
	older := map[string]string{"account_public_key": a.AccountPublicKey(), "agent_signer": full.AgentSigner, "operator_signer": full.OperatorSigner}
	if _, err := agentidentity.Load(writeJSON(t, older, 0o600), nc, time.Second); err == nil || !strings.Contains(err.Error(), "operator signing key") {
		t.Errorf("issuer document with the operator signer: %v", err)
	}

	if _, err := agentidentity.Load(writeJSON(t, a.IssuerSeeds(), 0o644), nc, time.Second); err == nil || !strings.Contains(err.Error(), "readable by everyone") {
		t.Errorf("world-readable issuer document: %v", err)
	}
	broken := a.IssuerSeeds()
	broken.AgentSigner = ""
	if _, err := agentidentity.Load(writeJSON(t, broken, 0o600), nc, time.Second); err == nil {
		t.Error("an issuer document without agent_signer accepted")
	}
}
