package testinfra

import (
	"os"
	"strings"
)

// dockerSocketPresent reports whether a Docker daemon socket is configured (DOCKER_HOST) or present.
func dockerSocketPresent() bool {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		if path, ok := strings.CutPrefix(h, "unix://"); ok {
			_, err := os.Stat(path)
			return err == nil
		}
		return true
	}
	for _, p := range []string{"/var/run/docker.sock", os.ExpandEnv("$HOME/.docker/run/docker.sock"), os.ExpandEnv("$XDG_RUNTIME_DIR/docker.sock")} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}
