// Command natsauthgen creates ConfigSync's NATS security domain for a deployment — or reuses the one
// already in the output directory — and writes the NATS servers' auth include, one creds file per
// service, the system user's creds, config-api's issuer document, the credential service's account signer
// document and, optionally, agents' creds. The layout is documented in
// deploy/internal/natsbundle; deploy/README.md says where each file goes.
//
//	go run ./deploy/natsauthgen -out deploy/.secrets/nats -agents compose-agent-1,compose-agent-2
//
// It prints no secret; the files are mode 0600.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/configsync/configsync/deploy/internal/natsbundle"
)

func main() {
	var opts natsbundle.Options
	var agents, tlsHosts string
	flag.StringVar(&opts.Out, "out", "", "output directory (required)")
	flag.StringVar(&opts.ResolverDir, "resolver-dir", "/data/jwt", "account JWT directory inside each nats-server container")
	flag.StringVar(&agents, "agents", "", "comma-separated agent ids to issue credentials for")
	flag.StringVar(&tlsHosts, "tls-hosts", "", "comma-separated extra names (or IPs) the NATS servers' certificate is valid for")
	flag.Parse()
	if opts.Out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: natsauthgen -out DIR [-resolver-dir DIR] [-agents ID,ID...] [-tls-hosts NAME,NAME...]")
		os.Exit(2)
	}
	for _, id := range strings.Split(agents, ",") {
		if id = strings.TrimSpace(id); id != "" {
			opts.Agents = append(opts.Agents, id)
		}
	}
	for _, h := range strings.Split(tlsHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			opts.TLSHosts = append(opts.TLSHosts, h)
		}
	}
	res, err := natsbundle.Write(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsauthgen:", err)
		os.Exit(1)
	}
	state := "reused the authority"
	switch {
	case res.AuthorityCreated:
		state = "created a new authority"
	case res.AuthorityUpgraded:
		state = "upgraded the authority (added an operator signing key)"
	}
	fmt.Printf("natsauthgen: %s; wrote %d files under %s\n", state, len(res.Files), opts.Out)
	if res.AuthorityUpgraded && res.AuthConfKept {
		fmt.Printf("natsauthgen: rewrote only the operator line of %s (preloaded accounts kept); restart the NATS servers with it before config-api\n", natsbundle.AuthConf)
	} else if res.AuthConfKept {
		fmt.Printf("natsauthgen: kept the existing %s (delete it to render a new one)\n", natsbundle.AuthConf)
	}
	fmt.Printf("natsauthgen: config-api's NATS_AUTHORITY_FILE is %s, the credential service's CREDENTIAL_NATS_ACCOUNT_SIGNER_FILE is %s; %s stays with you\n",
		natsbundle.IssuerFile, natsbundle.AccountSignerFile, natsbundle.AuthorityFile)
}
