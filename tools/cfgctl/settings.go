package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
)

type settings struct{ API, Token string }

// loadSettings resolves the API URL and token: flags, then environment, then a config file of KEY=VALUE
// lines (CONFIGSYNC_CONFIG, else .data/devstack.env).
func loadSettings(api, token string) (settings, error) {
	s := settings{API: api, Token: token}
	if s.API == "" {
		s.API = os.Getenv("CONFIGSYNC_API_URL")
	}
	if s.Token == "" {
		s.Token = os.Getenv("CONFIGSYNC_TOKEN")
	}
	if s.API != "" && s.Token != "" {
		return s, nil
	}
	path := os.Getenv("CONFIGSYNC_CONFIG")
	explicit := path != ""
	if !explicit {
		path = ".data/devstack.env"
	}
	vals, err := readEnvFile(path)
	if err != nil {
		if explicit || !errors.Is(err, os.ErrNotExist) {
			return s, fmt.Errorf("read %s: %w", path, err)
		}
	}
	if s.API == "" {
		s.API = vals["CONFIGSYNC_API_URL"]
	}
	if s.Token == "" {
		s.Token = vals["CONFIGSYNC_TOKEN"]
	}
	if s.API == "" {
		return s, usagef("no API URL: pass -api, set CONFIGSYNC_API_URL, or run `make run` first")
	}
	return s, nil
}

func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	vals := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			continue
		}
		vals[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
	}
	return vals, sc.Err()
}
