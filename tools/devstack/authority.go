package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/natsauth"
)

// loadOrCreateAuthority keeps the NATS security domain's seeds in path (0600), so agent credentials
// issued by an earlier run stay valid. A file from before operator signing keys is upgraded in place:
// the new key is added and every other key kept (the embedded server gets the new operator JWT on each
// start, so nothing else changes).
func loadOrCreateAuthority(path string, log *zap.Logger) (*natsauth.Authority, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		var seeds natsauth.Seeds
		if err := json.Unmarshal(b, &seeds); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		a, err := natsauth.LoadAuthority(seeds)
		if !errors.Is(err, natsauth.ErrNoOperatorSigner) {
			return a, err
		}
		if seeds, err = natsauth.UpgradeSeeds(seeds); err != nil {
			return nil, err
		}
		if a, err = natsauth.LoadAuthority(seeds); err != nil {
			return nil, err
		}
		if err := writeJSON(path, seeds); err != nil {
			return nil, err
		}
		log.Info("added an operator signing key to the NATS authority; issued credentials stay valid", zap.String("file", path))
		return a, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	a, err := natsauth.NewAuthority()
	if err != nil {
		return nil, err
	}
	if err := writeJSON(path, a.Seeds()); err != nil {
		return nil, err
	}
	return a, nil
}

// writeJSON replaces path with v as JSON, mode 0600.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
