package natsbundle_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"

	"github.com/configsync/configsync/deploy/internal/natsbundle"
	"github.com/configsync/configsync/libs/natsauth"
)

func TestWriteCreatesThenReuses(t *testing.T) {
	out := t.TempDir()
	first, err := natsbundle.Write(natsbundle.Options{Out: out, ResolverDir: "/data/jwt", Agents: []string{"agent-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if !first.AuthorityCreated || first.AuthConfKept {
		t.Fatalf("first run: %+v, want a new authority and a rendered auth.conf", first)
	}
	want := []string{natsbundle.AuthorityFile, natsbundle.IssuerFile, natsbundle.AccountSignerFile, natsbundle.AuthConf, natsbundle.SystemCreds, natsbundle.AgentCreds("agent-1")}
	for _, s := range natsbundle.Services {
		want = append(want, natsbundle.ServiceCreds(s))
	}
	for _, rel := range want {
		info, err := os.Stat(filepath.Join(out, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", rel, info.Mode().Perm())
		}
	}
	conf, err := os.ReadFile(filepath.Join(out, natsbundle.AuthConf))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"operator:", "system_account:", "resolver:", "type: full", "resolver_preload:", `"/data/jwt"`} {
		if !bytes.Contains(conf, []byte(key)) {
			t.Errorf("auth.conf lacks %s", key)
		}
	}
	seeds, _ := os.ReadFile(filepath.Join(out, natsbundle.AuthorityFile))
	checkIssuerFile(t, out)

	// A second run keeps the authority and the rendered auth.conf (its account JWT may be older than
	// revocations the servers hold; re-rendering it would be harmless only without them).
	second, err := natsbundle.Write(natsbundle.Options{Out: out, ResolverDir: "/elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	if second.AuthorityCreated || !second.AuthConfKept {
		t.Fatalf("second run: %+v, want the authority and auth.conf kept", second)
	}
	again, _ := os.ReadFile(filepath.Join(out, natsbundle.AuthConf))
	seedsAgain, _ := os.ReadFile(filepath.Join(out, natsbundle.AuthorityFile))
	if !bytes.Equal(conf, again) || !bytes.Equal(seeds, seedsAgain) {
		t.Error("a second run changed authority.json or auth.conf")
	}
	for _, f := range second.Files {
		if strings.HasSuffix(f, natsbundle.AuthorityFile) || strings.HasSuffix(f, "auth.conf") {
			t.Errorf("second run reports writing %s", f)
		}
	}
}

func TestWriteRejectsBadInput(t *testing.T) {
	if _, err := natsbundle.Write(natsbundle.Options{Out: t.TempDir()}); err == nil {
		t.Error("no resolver dir accepted")
	}
	if _, err := natsbundle.Write(natsbundle.Options{Out: t.TempDir(), ResolverDir: "/data/jwt", Agents: []string{"not/valid"}}); err == nil {
		t.Error("an invalid agent id accepted")
	}
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, natsbundle.AuthorityFile), []byte(`{"operator":"nope"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := natsbundle.Write(natsbundle.Options{Out: out, ResolverDir: "/data/jwt"}); err == nil {
		t.Error("a corrupt authority.json accepted")
	}
}

// checkIssuerFile: config-api's issuer document and the credential service's account signer document
// belong to authority.json's domain and carry none of its root seeds; config-api's holds no operator
// signing key and the credential service's no agent signing key.
func checkIssuerFile(t *testing.T, out string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(out, natsbundle.IssuerFile))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := natsauth.ParseIssuerSeeds(doc)
	if err != nil {
		t.Fatalf("%s: %v", natsbundle.IssuerFile, err)
	}
	if _, err := natsauth.NewIssuerFromSeeds(issuer); err != nil {
		t.Fatalf("%s: %v", natsbundle.IssuerFile, err)
	}
	signerDoc, err := os.ReadFile(filepath.Join(out, natsbundle.AccountSignerFile))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := natsauth.ParseAccountSignerSeeds(signerDoc)
	if err != nil {
		t.Fatalf("%s: %v", natsbundle.AccountSignerFile, err)
	}
	if _, err := natsauth.NewAccountAdmin(signer); err != nil {
		t.Fatalf("%s: %v", natsbundle.AccountSignerFile, err)
	}
	var full natsauth.Seeds
	b, _ := os.ReadFile(filepath.Join(out, natsbundle.AuthorityFile))
	if err := json.Unmarshal(b, &full); err != nil {
		t.Fatal(err)
	}
	a, err := natsauth.LoadAuthority(full)
	if err != nil {
		t.Fatal(err)
	}
	if issuer != a.IssuerSeeds() || signer != a.AccountSignerSeeds() {
		t.Errorf("%s or %s is not derived from %s", natsbundle.IssuerFile, natsbundle.AccountSignerFile, natsbundle.AuthorityFile)
	}
	for _, root := range []string{full.Operator, full.System, full.Account, full.OperatorSigner} {
		if bytes.Contains(doc, []byte(root)) {
			t.Errorf("%s carries a root seed or the operator signing key", natsbundle.IssuerFile)
		}
	}
	for _, root := range []string{full.Operator, full.System, full.Account, full.AgentSigner} {
		if bytes.Contains(signerDoc, []byte(root)) {
			t.Errorf("%s carries a root seed or the agent signing key", natsbundle.AccountSignerFile)
		}
	}
}

// TestWriteUpgradesOlderAuthority: an authority.json from before operator signing keys gains one and
// keeps every other key; auth.conf keeps everything but its operator line, which now lists the key.
func TestWriteUpgradesOlderAuthority(t *testing.T) {
	out := t.TempDir()
	if _, err := natsbundle.Write(natsbundle.Options{Out: out, ResolverDir: "/data/jwt"}); err != nil {
		t.Fatal(err)
	}
	authPath := filepath.Join(out, natsbundle.AuthorityFile)
	var seeds natsauth.Seeds
	b, _ := os.ReadFile(authPath)
	if err := json.Unmarshal(b, &seeds); err != nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal(map[string]string{"operator": seeds.Operator, "system": seeds.System, "account": seeds.Account, "agent_signer": seeds.AgentSigner})
	if err := os.WriteFile(authPath, old, 0o600); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(out, natsbundle.AuthConf)
	confBefore, _ := os.ReadFile(confPath)

	res, err := natsbundle.Write(natsbundle.Options{Out: out, ResolverDir: "/data/jwt"})
	if err != nil {
		t.Fatalf("older authority.json: %v", err)
	}
	if !res.AuthorityUpgraded || res.AuthorityCreated || !res.AuthConfKept {
		t.Fatalf("result %+v, want the authority upgraded and auth.conf kept", res)
	}
	var upgraded natsauth.Seeds
	b, _ = os.ReadFile(authPath)
	if err := json.Unmarshal(b, &upgraded); err != nil {
		t.Fatal(err)
	}
	if upgraded.OperatorSigner == "" || upgraded.Operator != seeds.Operator || upgraded.System != seeds.System ||
		upgraded.Account != seeds.Account || upgraded.AgentSigner != seeds.AgentSigner {
		t.Fatal("the upgrade did not just add an operator signing key")
	}
	confAfter, _ := os.ReadFile(confPath)
	op := regexp.MustCompile(`(?m)^operator: (\S+)$`)
	if got, want := op.ReplaceAll(confAfter, nil), op.ReplaceAll(confBefore, nil); !bytes.Equal(got, want) {
		t.Error("the upgrade changed auth.conf beyond its operator line")
	}
	m := op.FindSubmatch(confAfter)
	if m == nil {
		t.Fatal("auth.conf lost its operator line")
	}
	oc, err := jwt.DecodeOperatorClaims(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	a, err := natsauth.LoadAuthority(upgraded)
	if err != nil {
		t.Fatal(err)
	}
	admin := a.AccountAdmin()
	accJWT, _ := admin.AccountJWT(nil)
	ac, _ := jwt.DecodeAccountClaims(accJWT)
	if oc.Subject != a.OperatorPublicKey() || !oc.SigningKeys.Contains(ac.Issuer) {
		t.Error("auth.conf's operator does not list the new operator signing key")
	}
	checkIssuerFile(t, out)
}
