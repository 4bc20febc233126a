package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/configsync/configsync/libs/natsauth"
)

// loadOrCreateAuthority keeps the NATS security domain's seeds in path (0600), so agent credentials
// issued by an earlier run stay valid.
func loadOrCreateAuthority(path string) (*natsauth.Authority, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		var seeds natsauth.Seeds
		if err := json.Unmarshal(b, &seeds); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return natsauth.LoadAuthority(seeds)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	a, err := natsauth.NewAuthority()
	if err != nil {
		return nil, err
	}
	b, err = json.Marshal(a.Seeds())
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return a, nil
}
