package credential

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/configsync/configsync/libs/agentconfig"
)

// maxNameRunes is the credentials.name CHECK. The limits on the secret are agentconfig's
// (ValidateSecret), shared with config-api.
const maxNameRunes = 200

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

// validateSecret applies agentconfig.ValidateSecret, the rule config-api applies too, and returns the
// secret's sorted field names. Errors name fields, never values.
func validateSecret(secret map[string]string) ([]string, error) {
	fields, err := agentconfig.ValidateSecret(secret)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidRequest, err.Error())
	}
	return fields, nil
}
