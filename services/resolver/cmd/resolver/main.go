// Command resolver runs the resolver service: the nats.go micro service that resolves hosts' effective
// agent configs, plus /healthz and /readyz. Configuration comes from the environment (see README.md).
// `resolver sign-trusted-keys -version N -keys id=base64,...` instead prints a trusted-key list signed
// with the configured signing key (RESOLVER_SIGNING_KEY_FILE or RESOLVER_VAULT_*), the content of
// RESOLVER_TRUSTED_KEYS_FILE for a key rotation. `resolver public-keys [-create] [-out FILE]` writes the
// public keys of the configured signing key in the form agents trust (trust.public_keys_file,
// CONFIGSYNC_TRUST_PUBLIC_KEYS); -create first generates a missing key file (a deployment's init step).
// `resolver install-signing-key -from SRC -to DST` copies a key file to DST with mode 0600 for the running
// user (a Kubernetes init container: Secret volumes cannot give a non-root user a 0600 file).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/services/resolver"
)

func main() {
	app.Main("resolver", app.Commands{
		"sign-trusted-keys":   signTrustedKeys,
		"install-signing-key": installSigningKey,
		"public-keys":         publicKeys,
	}, pgdb.Module, resolver.Module)
}

func signTrustedKeys(args []string) error {
	fs := flag.NewFlagSet("sign-trusted-keys", flag.ContinueOnError)
	version := fs.Int64("version", 0, "list version; agents adopt a list newer than the last they accepted")
	keys := fs.String("keys", "", "the complete new trusted set, id=base64 public key, comma separated")
	cfg, err := loadConfig(fs, args)
	if err != nil {
		return err
	}
	out, err := resolver.SignTrustedKeys(context.Background(), cfg, *version, *keys)
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(out))
	return err
}

func publicKeys(args []string) error {
	fs := flag.NewFlagSet("public-keys", flag.ContinueOnError)
	create := fs.Bool("create", false, "generate RESOLVER_SIGNING_KEY_FILE (0600) when it does not exist")
	out := fs.String("out", "", "write the keys to this file (0644, replaced atomically) instead of standard output")
	cfg, err := loadConfig(fs, args)
	if err != nil {
		return err
	}
	keys, err := resolver.PublicKeys(context.Background(), cfg, *create)
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = fmt.Println(keys)
		return err
	}
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, []byte(keys+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, *out)
}

func installSigningKey(args []string) error {
	fs := flag.NewFlagSet("install-signing-key", flag.ContinueOnError)
	from := fs.String("from", "", "the key file as mounted (a Secret volume)")
	to := fs.String("to", "", "where the resolver reads it (RESOLVER_SIGNING_KEY_FILE), written 0600")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *from == "" || *to == "" {
		return errors.New("-from and -to are required")
	}
	keys, err := resolver.InstallSigningKeyFile(*from, *to)
	if err != nil {
		return err
	}
	// The public half only: what agents must trust.
	_, err = fmt.Println(keys)
	return err
}

// loadConfig parses a command's args into the flags of fs, then loads the resolver's Config from the
// environment.
func loadConfig(fs *flag.FlagSet, args []string) (resolver.Config, error) {
	var cfg resolver.Config
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	return cfg, envconfig.Load(&cfg)
}
