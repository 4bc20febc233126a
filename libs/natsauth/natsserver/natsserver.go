// Package natsserver configures a nats-server for ConfigSync's decentralized auth: the trusted operator,
// the system account and a full (directory) account resolver preloaded with the ConfigSync account, so
// account updates — revocations — are pushed over $SYS.REQ.CLAIMS.UPDATE and persist across restarts.
package natsserver

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/configsync/configsync/libs/natsauth"
)

// Configure puts opts into operator mode for authority a, keeping account JWTs in resolverDir.
func Configure(opts *server.Options, a *natsauth.Authority, resolverDir string) error {
	opJWT, err := a.OperatorJWT()
	if err != nil {
		return err
	}
	oc, err := jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		return fmt.Errorf("natsserver: operator jwt: %w", err)
	}
	if err := os.MkdirAll(resolverDir, 0o700); err != nil {
		return fmt.Errorf("natsserver: resolver dir: %w", err)
	}
	res, err := server.NewDirAccResolver(resolverDir, 0, 2*time.Minute, server.NoDelete)
	if err != nil {
		return fmt.Errorf("natsserver: resolver: %w", err)
	}
	sysJWT, err := a.SystemAccountJWT()
	if err != nil {
		return err
	}
	if err := res.Store(a.SystemAccountPublicKey(), sysJWT); err != nil {
		return fmt.Errorf("natsserver: store system account: %w", err)
	}
	// Preload the account only when the resolver has none yet: a stored one may carry revocations.
	if cur, err := res.Fetch(a.AccountPublicKey()); err != nil || cur == "" {
		accJWT, err := a.AccountJWT(nil)
		if err != nil {
			return err
		}
		if err := res.Store(a.AccountPublicKey(), accJWT); err != nil {
			return fmt.Errorf("natsserver: store account: %w", err)
		}
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{oc}
	opts.SystemAccount = a.SystemAccountPublicKey()
	opts.AccountResolver = res
	return nil
}

// ConfigFile renders the nats-server.conf fragment for authority a (deploy/ uses the same mechanism).
func ConfigFile(a *natsauth.Authority, resolverDir string) (string, error) {
	opJWT, err := a.OperatorJWT()
	if err != nil {
		return "", err
	}
	sysJWT, err := a.SystemAccountJWT()
	if err != nil {
		return "", err
	}
	accJWT, err := a.AccountJWT(nil)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "operator: %s\n", opJWT)
	fmt.Fprintf(&b, "system_account: %s\n", a.SystemAccountPublicKey())
	fmt.Fprintf(&b, "resolver: {\n  type: full\n  dir: %q\n  allow_delete: false\n  interval: \"2m\"\n}\n", resolverDir)
	fmt.Fprintf(&b, "resolver_preload: {\n  %s: %s\n  %s: %s\n}\n", a.SystemAccountPublicKey(), sysJWT, a.AccountPublicKey(), accJWT)
	return b.String(), nil
}
