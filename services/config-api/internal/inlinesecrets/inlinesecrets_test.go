package inlinesecrets

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/configs"
)

func TestCredentialName(t *testing.T) {
	ref := configs.Ref{Scope: protocol.ScopeHost, ID: uuid.MustParse("64e6a9fb-66e7-46ea-827f-8bee2aafb7e7")}
	prefix := "inline host 64e6a9fb-66e7-46ea-827f-8bee2aafb7e7 postgres/"
	if got := CredentialName(ref, "postgres", "main"); got != prefix+"main" {
		t.Errorf("readable name: %q", got)
	}
	for _, name := range []string{" main", "main ", "a\tb", "\xff", strings.Repeat("n", 200-len(prefix)+1)} {
		got := CredentialName(ref, "postgres", name)
		if !strings.HasPrefix(got, prefix+"sha256:") || len(got) > maxCredentialName || got != CredentialName(ref, "postgres", name) {
			t.Errorf("name %q: %q", name, got)
		}
	}
	if CredentialName(ref, "postgres", " main") == CredentialName(ref, "postgres", "main ") {
		t.Error("different names share a digest name")
	}
	if got := CredentialName(ref, "postgres", strings.Repeat("n", 200-len(prefix))); len(got) != maxCredentialName || strings.Contains(got, "sha256") {
		t.Errorf("a name that just fits: %q", got)
	}
}

func TestRedact(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{``, ``},
		{`{"static":{"password":"x"}}`, `{"static":{"password":"x"}}`},
		{`[{"type":"tcp","name":"t"}]`, `[{"type":"tcp","name":"t"}]`},
		{`[{"type":"tcp","name":"t"},{"name":"p","password":"pw","type":"postgres","username":"u"}]`,
			`[{"type":"tcp","name":"t"},{"name":"p","password":"[REDACTED]","type":"postgres","username":"[REDACTED]"}]`},
		{`["x",{"password":7}]`, `["x",{"password":"[REDACTED]"}]`},
	} {
		if got := string(Redact([]byte(tt.in))); got != tt.want {
			t.Errorf("Redact(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
