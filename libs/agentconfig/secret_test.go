package agentconfig

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestValidateSecretAccepts(t *testing.T) {
	for _, secret := range []map[string]string{
		{"password": "p"},
		{"username": "u", "password": strings.Repeat("p", MaxSecretValueBytes)},
		{"username": "", "password": "héllo wörld"},
	} {
		fields, err := ValidateSecret(secret)
		if err != nil {
			t.Fatalf("%d fields: %v", len(secret), err)
		}
		if len(fields) != len(secret) || !slices.IsSorted(fields) {
			t.Fatalf("fields %v, want the %d names sorted", fields, len(secret))
		}
	}
	for _, name := range SecretFields() {
		if _, err := ValidateSecret(map[string]string{name: "v"}); err != nil {
			t.Errorf("secret field %q refused: %v", name, err)
		}
	}
}

// Every refusal is a *SecretError whose message never repeats a value; Field is set exactly when the
// message names the field.
func TestValidateSecretRefuses(t *testing.T) {
	const planted = "planted-value"
	many := map[string]string{}
	for i := range MaxSecretFields + 1 {
		many[strings.Repeat("x", i+1)] = planted
	}
	for _, tc := range []struct {
		name   string
		secret map[string]string
		field  string
		want   string
	}{
		{"empty", map[string]string{}, "", "at least one field"},
		{"nil", nil, "", "at least one field"},
		{"too many fields", many, "", "at most 32 are allowed"},
		{"empty name", map[string]string{"": planted}, "", "empty name"},
		{"name over 64 bytes", map[string]string{strings.Repeat("a", MaxSecretFieldName+1): planted}, "", "longer than 64 bytes"},
		{"control character", map[string]string{"pass\nword": planted}, "", "not printable"},
		{"invalid UTF-8 name", map[string]string{"pass\xffword": planted}, "", "not printable"},
		{"reserved", map[string]string{"credential_id": planted}, "credential_id", "reserved"},
		{"reserved type", map[string]string{"type": planted}, "type", "reserved"},
		{"not a secret field", map[string]string{"api_key": planted}, "api_key", `"api_key" is not allowed; a credential may hold only: password, username`},
		{"case matters", map[string]string{"Password": planted}, "Password", "is not allowed"},
		{"invalid UTF-8 value", map[string]string{"password": "\xff" + planted}, "password", "not valid UTF-8"},
		{"value too large", map[string]string{"password": strings.Repeat("p", MaxSecretValueBytes+1)}, "password", "longer than 16384 bytes"},
		{"first bad field in name order", map[string]string{"token": planted, "api_key": planted, "password": "p"}, "api_key", `"api_key"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 10 { // map order must not change the answer
				_, err := ValidateSecret(tc.secret)
				var se *SecretError
				if !errors.As(err, &se) {
					t.Fatalf("got %v, want a *SecretError", err)
				}
				if se.Field != tc.field || !strings.Contains(se.Message, tc.want) || se.Error() != se.Message {
					t.Fatalf("got {Field: %q, Message: %q}, want field %q and a message with %q", se.Field, se.Message, tc.field, tc.want)
				}
				if strings.Contains(se.Message, planted) || strings.Contains(se.Message, "ppppp") {
					t.Fatalf("message %q repeats a value", se.Message)
				}
			}
		})
	}
}

// Every allowed field name fits the name limit, and the limits are the ones the API documents.
func TestValidateSecretLimits(t *testing.T) {
	for _, name := range SecretFields() {
		if len(name) > MaxSecretFieldName {
			t.Errorf("secret field %q is longer than MaxSecretFieldName", name)
		}
	}
	if MaxSecretFieldName != 64 {
		t.Errorf("MaxSecretFieldName = %d; the API documents 64 bytes", MaxSecretFieldName)
	}
	if MaxSecretFields != 32 || MaxSecretValueBytes != 16<<10 || MaxSecretTotalBytes != 64<<10 {
		t.Errorf("limits %d fields, %d bytes a value, %d in all; the API documents 32, 16 KiB, 64 KiB",
			MaxSecretFields, MaxSecretValueBytes, MaxSecretTotalBytes)
	}
}
