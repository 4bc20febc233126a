package credentials

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/fault"
)

func ids(prefix string, n int) []uuid.UUID {
	out := make([]uuid.UUID, n)
	for i := range out {
		out[i] = uuid.MustParse(fmt.Sprintf("%s-0000-4000-8000-%012d", prefix, i))
	}
	return out
}

// TestInUseMessage: the refusal says how many configs reference the credential and names at most
// maxListedReferences of them, environments first, then "and N more".
func TestInUseMessage(t *testing.T) {
	cred := uuid.MustParse("0d000000-0000-4000-8000-000000000001")
	tests := []struct {
		name       string
		use        configs.CredentialUse
		want       []string
		wantListed int
		notWant    []string
	}{
		{
			name:       "one host",
			use:        configs.CredentialUse{ConfigType: "collectors", Hosts: ids("0f000000", 1)},
			want:       []string{cred.String(), "1 live collectors config references it", "(host 0f000000-0000-4000-8000-000000000000)", "?force=true"},
			wantListed: 1,
			notWant:    []string{" more"},
		},
		{
			name:       "both levels, all listed",
			use:        configs.CredentialUse{ConfigType: "collectors", Environments: ids("0e000000", 2), Hosts: ids("0f000000", 8)},
			want:       []string{"10 live collectors configs reference it", "(environment 0e000000-0000-4000-8000-000000000000, environment 0e000000-0000-4000-8000-000000000001, host 0f000000-0000-4000-8000-000000000000"},
			wantListed: 10,
			notWant:    []string{" more"},
		},
		{
			name:       "hosts beyond the bound",
			use:        configs.CredentialUse{ConfigType: "collectors", Environments: ids("0e000000", 3), Hosts: ids("0f000000", 2000)},
			want:       []string{"2003 live collectors configs", "host 0f000000-0000-4000-8000-000000000006 and 1993 more)"},
			wantListed: 10,
			notWant:    []string{"0f000000-0000-4000-8000-000000000007"},
		},
		{
			name:       "environments beyond the bound",
			use:        configs.CredentialUse{ConfigType: "collectors", Environments: ids("0e000000", 11), Hosts: ids("0f000000", 1)},
			want:       []string{"12 live collectors configs", "environment 0e000000-0000-4000-8000-000000000009 and 2 more)"},
			wantListed: 10,
			notWant:    []string{"host 0f000000"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := inUseMessage(cred, tt.use)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not contain %q", msg, w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(msg, w) {
					t.Errorf("message %q contains %q", msg, w)
				}
			}
			if listed := strings.Count(msg, "environment ") + strings.Count(msg, "host "); listed != tt.wantListed {
				t.Errorf("message lists %d configs, want %d: %q", listed, tt.wantListed, msg)
			}
			if len(msg) > 1000 {
				t.Errorf("message is %d bytes long", len(msg))
			}
		})
	}
}

// TestValidSecretFieldNames: only fields every credential-taking collector accepts; of several bad
// fields, the same (first in name order) is named every time, with the allowed names; values never.
func TestValidSecretFieldNames(t *testing.T) {
	for _, required := range []bool{true, false} {
		if err := validSecret(map[string]string{"username": "u", "password": "p"}, required); err != nil {
			t.Fatalf("username and password: %v", err)
		}
		for range 20 {
			err := validSecret(map[string]string{"password": "p", "token": "planted", "api_key": "planted"}, required)
			if !fault.Is(err, fault.Invalid) {
				t.Fatalf("api_key and token: %v, want Invalid", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, `"api_key"`) || !strings.Contains(msg, "password, username") || strings.Contains(msg, "planted") {
				t.Fatalf("message %q", msg)
			}
		}
	}
	for _, name := range []string{"Password", "user", "type", "credential_id"} {
		if err := validSecret(map[string]string{name: "v"}, true); !fault.Is(err, fault.Invalid) || !strings.Contains(err.Error(), `"`+name+`"`) {
			t.Errorf("field %q: %v", name, err)
		}
	}
}
