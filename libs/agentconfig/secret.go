package agentconfig

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on what a credential's secret may hold. A secret is a handful of connection fields; the bounds
// keep a hostile request from making the backend encrypt, store and inject megabytes. Sizes are bytes.
const (
	MaxSecretFields     = 32
	MaxSecretFieldName  = 64
	MaxSecretValueBytes = 16 << 10
	MaxSecretTotalBytes = 64 << 10
)

// SecretError is a secret ValidateSecret refuses. Field is the offending field name when the message
// names it (a name that is empty, too long or not printable is not repeated), else "". Message names
// fields, never values.
type SecretError struct {
	Field   string
	Message string
}

func (e *SecretError) Error() string { return e.Message }

// ValidateSecret checks a credential's secret as config-api and the credential service both accept it:
// 1 to MaxSecretFields fields; names non-empty, at most MaxSecretFieldName bytes of printable UTF-8, not
// a field that identifies a collector, and one of SecretFields() (every field is injected into each
// collector referencing the credential, and the agent refuses a collector holding any other field);
// values valid UTF-8 of at most MaxSecretValueBytes, names and values together at most
// MaxSecretTotalBytes. Fields are checked in name order, so that of several bad fields the same one is
// reported every time. It returns the sorted field names, or a *SecretError.
func ValidateSecret(secret map[string]string) ([]string, error) {
	if len(secret) == 0 {
		return nil, &SecretError{Message: "secret must have at least one field"}
	}
	if len(secret) > MaxSecretFields {
		return nil, &SecretError{Message: fmt.Sprintf("secret has %d fields, at most %d are allowed", len(secret), MaxSecretFields)}
	}
	fields := slices.Sorted(maps.Keys(secret))
	total := 0
	for _, name := range fields {
		value := secret[name]
		bad := func(format string, args ...any) error {
			return &SecretError{Field: name, Message: fmt.Sprintf(format, args...)}
		}
		switch {
		case name == "":
			return nil, &SecretError{Message: "secret has a field with an empty name"}
		case len(name) > MaxSecretFieldName:
			return nil, &SecretError{Message: fmt.Sprintf("a secret field name is longer than %d bytes", MaxSecretFieldName)}
		case !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0:
			return nil, &SecretError{Message: "a secret field name is not printable UTF-8"}
		case slices.Contains(reservedCollectorFields, name):
			return nil, bad("secret field %q is reserved for the collector itself", name)
		case !IsSecretField(name):
			return nil, bad("secret field %q is not allowed; a credential may hold only: %s",
				name, strings.Join(SecretFields(), ", "))
		case !utf8.ValidString(value):
			return nil, bad("the value of secret field %q is not valid UTF-8", name)
		case len(value) > MaxSecretValueBytes:
			return nil, bad("the value of secret field %q is longer than %d bytes", name, MaxSecretValueBytes)
		}
		total += len(name) + len(value)
	}
	if total > MaxSecretTotalBytes {
		return nil, &SecretError{Message: fmt.Sprintf("secret is larger than %d bytes", MaxSecretTotalBytes)}
	}
	return fields, nil
}
