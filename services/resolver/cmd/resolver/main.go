// Command resolver runs the resolver service: the nats.go micro service that resolves hosts' effective
// agent configs, plus /healthz and /readyz. Configuration comes from the environment (see README.md).
// `resolver sign-trusted-keys -version N -keys id=base64,...` instead prints a trusted-key list signed
// with the configured signing key (RESOLVER_SIGNING_KEY_FILE or RESOLVER_VAULT_*), the content of
// RESOLVER_TRUSTED_KEYS_FILE for a key rotation.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"go.uber.org/fx"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/services/resolver"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "sign-trusted-keys" {
		if err := signTrustedKeys(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "resolver sign-trusted-keys:", err)
			os.Exit(1)
		}
		return
	}
	fx.New(app.Module("resolver", pgdb.Module, resolver.Module)).Run()
}

func signTrustedKeys(args []string) error {
	fs := flag.NewFlagSet("sign-trusted-keys", flag.ContinueOnError)
	version := fs.Int64("version", 0, "list version; agents adopt a list newer than the last they accepted")
	keys := fs.String("keys", "", "the complete new trusted set, id=base64 public key, comma separated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var cfg resolver.Config
	if err := envconfig.Load(&cfg); err != nil {
		return err
	}
	out, err := resolver.SignTrustedKeys(context.Background(), cfg, *version, *keys)
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(out))
	return err
}
