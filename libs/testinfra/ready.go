package testinfra

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// WaitReady waits until the service's HTTP server at addr (host:port) answers /readyz with 200, and
// fails the test with the last answer if it does not within timeout.
func WaitReady(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	EventuallyNoError(t, timeout, func() error {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return errors.New(fmt.Sprint(resp.StatusCode, " ", string(body)))
		}
		return nil
	}, "%s/readyz", addr)
}

// PlatformEnv sets the variables the platform modules read (libs/platform) for an app under test:
// the database, the NATS server, an HTTP listener on a free port and quiet logs.
func PlatformEnv(t *testing.T, databaseURL, natsURL string) {
	t.Setenv("DATABASE_URL", databaseURL)
	t.Setenv("NATS_URL", natsURL)
	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("LOG_LEVEL", "warn")
}
