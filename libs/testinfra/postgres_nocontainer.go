//go:build testinfra_nocontainers

package testinfra

import "errors"

// dockerAvailable still looks for Docker so that the failure message can say what to do.
func dockerAvailable() bool { return dockerSocketPresent() }

func startContainer() (string, error) {
	return "", errors.New("built with -tags testinfra_nocontainers: rebuild without that tag to let testcontainers start PostgreSQL")
}
