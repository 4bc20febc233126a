//go:build !testinfra_nocontainers

// The testcontainers fallback adds ~130 packages to every test binary that imports testinfra. Build with
// -tags testinfra_nocontainers to leave it out where PostgreSQL is always provided (see README.md).

package testinfra

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// containerImage is the PostgreSQL image started when no server is configured or running locally.
const containerImage = "postgres:16-alpine"

// dockerAvailable reports whether a Docker daemon socket is configured or present.
func dockerAvailable() bool { return dockerSocketPresent() }

// startContainer starts one PostgreSQL container for the test process. It is not terminated
// explicitly: testcontainers' reaper (Ryuk) removes it when the process exits.
func startContainer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, containerImage,
		tcpostgres.WithDatabase("test"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		testcontainers.WithWaitStrategy(
			wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(2*time.Minute),
		),
	)
	if err != nil {
		return "", fmt.Errorf("run %s: %w", containerImage, err)
	}
	u, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return "", fmt.Errorf("container connection string: %w", err)
	}
	return u, nil
}
