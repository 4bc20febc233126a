package credential

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/configsync/configsync/libs/agentconfig"
)

// Limits on what a credential may hold. A secret is a handful of connection fields; the bounds keep a
// hostile request from making the service encrypt, store and inject megabytes.
const (
	maxNameRunes      = 200 // the credentials.name CHECK
	maxFields         = 32
	maxFieldNameBytes = 128
	maxValueBytes     = 16 << 10
	maxSecretBytes    = 64 << 10
)

// reservedFields identify or control a collector; a credential may not overwrite them (libs/agentconfig
// refuses to inject them too, this reports it when the credential is written).
var reservedFields = []string{"type", "name", "enabled", "credential_id"}

func validateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: name is required", ErrInvalidRequest)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: name is not valid UTF-8", ErrInvalidRequest)
	case utf8.RuneCountInString(name) > maxNameRunes:
		return fmt.Errorf("%w: name is longer than %d characters", ErrInvalidRequest, maxNameRunes)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: name contains control characters", ErrInvalidRequest)
	}
	return nil
}

// validateSecret checks a secret's shape and returns its sorted field names. Field names are limited to
// agentconfig.SecretFields: the injector copies every field into the collectors that reference the
// credential, and the agent refuses a collector with any other field. Errors name fields, never values.
func validateSecret(secret map[string]string) ([]string, error) {
	if len(secret) == 0 {
		return nil, fmt.Errorf("%w: secret must have at least one field", ErrInvalidRequest)
	}
	if len(secret) > maxFields {
		return nil, fmt.Errorf("%w: secret has %d fields, at most %d are allowed", ErrInvalidRequest, len(secret), maxFields)
	}
	// Sorted first, so that of several bad fields the same one is reported every time.
	fields := slices.Sorted(maps.Keys(secret))
	total := 0
	for _, name := range fields {
		value := secret[name]
		switch {
		case name == "":
			return nil, fmt.Errorf("%w: secret has a field with an empty name", ErrInvalidRequest)
		case len(name) > maxFieldNameBytes:
			return nil, fmt.Errorf("%w: a secret field name is longer than %d bytes", ErrInvalidRequest, maxFieldNameBytes)
		case !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0:
			return nil, fmt.Errorf("%w: a secret field name is not printable UTF-8", ErrInvalidRequest)
		case slices.Contains(reservedFields, name):
			return nil, fmt.Errorf("%w: secret field %q is reserved for the collector itself", ErrInvalidRequest, name)
		case !agentconfig.IsSecretField(name):
			return nil, fmt.Errorf("%w: secret field %q is not allowed; a credential may hold only: %s",
				ErrInvalidRequest, name, strings.Join(agentconfig.SecretFields(), ", "))
		case !utf8.ValidString(value):
			return nil, fmt.Errorf("%w: the value of secret field %q is not valid UTF-8", ErrInvalidRequest, name)
		case len(value) > maxValueBytes:
			return nil, fmt.Errorf("%w: the value of secret field %q is longer than %d bytes", ErrInvalidRequest, name, maxValueBytes)
		}
		total += len(name) + len(value)
	}
	if total > maxSecretBytes {
		return nil, fmt.Errorf("%w: secret is larger than %d bytes", ErrInvalidRequest, maxSecretBytes)
	}
	return fields, nil
}
