// Package natsbundle writes the files of ConfigSync's NATS security domain that a deployment needs
// (libs/natsauth: decentralized JWT auth, one user per agent), in one directory layout shared by
// deploy/natsauthgen, compose.yaml and the Kubernetes overlay:
//
//	authority.json            the domain's secret seeds (operator and its signing key, system account,
//	                          account, agent signer). Reused on every later run, so issued credentials
//	                          stay valid. Keep it with the operator of the deployment; no service mounts it.
//	config-api-issuer.json    the narrow issuer document config-api holds (NATS_AUTHORITY_FILE): the
//	                          account's public key and the agent signing key — to issue and renew agent
//	                          credentials, nothing more.
//	credential-account-signer.json
//	                          the credential service's account signer document
//	                          (CREDENTIAL_NATS_ACCOUNT_SIGNER_FILE): the operator signing key and the
//	                          account's public keys — to re-sign the account with config-api's revocations.
//	nats/auth.conf            included by deploy/nats/nats-server.conf: trusted operator, system account,
//	                          full resolver, preloaded account JWTs.
//	services/<service>.creds  one least-privilege user of the CONFIGSYNC account per service, with the
//	                          allow-lists of natsauth.ServicePermissions (the service connects with
//	                          NATS_INBOX_PREFIX=_INBOX_<service>).
//	services/system.creds     a system-account user (the credential service pushes the account with it).
//	agents/<agent id>.creds   an agent user per requested agent (normally config-api issues these when a
//	                          host registers; this is for fixed fleets such as compose).
//	tls/                      a local CA (ca.pem, ca-key.pem) and the servers' certificate (tlsgen), for a
//	                          deployment without a PKI of its own; kept and reused like authority.json.
//	nats/ca.pem, nats/server.pem, nats/server-key.pem
//	                          the NATS servers' TLS material (client port and cluster routes).
//	services/nats-ca.pem, agents/nats-ca.pem
//	                          the CA services (NATS_TLS_CA) and agents (nats.tls.ca_file) verify NATS with.
//
// Files are written atomically with mode 0600 in 0700 directories. An existing auth.conf is kept for an
// existing authority, never re-rendered: the servers' resolver keeps the newest account JWT it has seen,
// so a freshly signed one would replace the account and drop the revocations pushed since. An
// authority.json from before operator signing keys is upgraded: the key is added, every other key kept,
// and only the operator line of an existing auth.conf is rewritten (its preloaded accounts stay).
package natsbundle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/natsauth/natsserver"
	"github.com/configsync/configsync/libs/natsauth/tlsgen"
)

// Paths inside the output directory.
const (
	AuthorityFile = "authority.json"
	IssuerFile    = "config-api-issuer.json"
	// AccountSignerFile is the credential service's account signer document.
	AccountSignerFile = "credential-account-signer.json"
	AuthConf          = "nats/auth.conf"
	SystemCreds       = "services/system.creds"
	TLSDir            = "tls"
	NATSCA            = "nats/ca.pem"
	NATSServerCert    = "nats/server.pem"
	NATSServerKey     = "nats/server-key.pem"
	ServicesCA        = "services/nats-ca.pem"
	AgentsCA          = "agents/nats-ca.pem"
)

// TLSHosts are the names the NATS servers' certificate is valid for: the node and client Service names
// of compose and Kubernetes (namespace configsync), and loopback.
var TLSHosts = []string{
	"nats-0", "nats-1", "nats-2", "nats-0.nats", "nats-1.nats", "nats-2.nats", "nats", "nats-client",
	"nats-0.nats.configsync.svc.cluster.local", "nats-1.nats.configsync.svc.cluster.local", "nats-2.nats.configsync.svc.cluster.local",
	"nats-client.configsync.svc", "nats-client.configsync.svc.cluster.local", "localhost", "127.0.0.1",
}

// Services are the backend services that each get their own NATS user.
var Services = natsauth.ServiceNames

// ServiceCreds is the path of a service's creds file inside the output directory.
func ServiceCreds(service string) string { return "services/" + service + ".creds" }

// AgentCreds is the path of an agent's creds file inside the output directory.
func AgentCreds(agentID string) string { return "agents/" + agentID + ".creds" }

// Options says where to write and for whom.
type Options struct {
	// Out is the output directory.
	Out string
	// ResolverDir is where each nats-server keeps account JWTs (a path inside its container).
	ResolverDir string
	// Agents are agent ids to issue credentials for.
	Agents []string
	// TLSHosts are names the servers' certificate is valid for besides TLSHosts.
	TLSHosts []string
}

// Result reports what Write did.
type Result struct {
	AuthorityCreated bool
	// AuthorityUpgraded: authority.json predated operator signing keys and got one; the NATS servers
	// need the rewritten auth.conf (its new operator JWT) before config-api pushes with the key.
	AuthorityUpgraded bool
	AuthConfKept      bool
	// Files are the paths written.
	Files []string
}

// Write creates or reuses the authority in opts.Out and writes the layout of the package comment.
func Write(opts Options) (Result, error) {
	var res Result
	if opts.Out == "" || opts.ResolverDir == "" {
		return res, errors.New("natsbundle: output and resolver directories are required")
	}
	authPath := filepath.Join(opts.Out, AuthorityFile)
	a, state, err := loadOrCreate(authPath)
	if err != nil {
		return res, err
	}
	created := state == authorityCreated
	res.AuthorityCreated, res.AuthorityUpgraded = created, state == authorityUpgraded
	if state != authorityLoaded {
		res.Files = append(res.Files, authPath)
	}

	confPath := filepath.Join(opts.Out, AuthConf)
	if current, err := os.ReadFile(confPath); err == nil && !created {
		res.AuthConfKept = true
		if res.AuthorityUpgraded {
			conf, err := replaceOperator(current, a)
			if err != nil {
				return res, err
			}
			if err := writeSecret(confPath, conf); err != nil {
				return res, err
			}
			res.Files = append(res.Files, confPath)
		}
	} else {
		conf, err := natsserver.ConfigFile(a, opts.ResolverDir)
		if err != nil {
			return res, fmt.Errorf("natsbundle: render auth.conf: %w", err)
		}
		if err := writeSecret(confPath, []byte(conf)); err != nil {
			return res, err
		}
		res.Files = append(res.Files, confPath)
	}

	issuer, err := json.MarshalIndent(a.IssuerSeeds(), "", "  ")
	if err != nil {
		return res, fmt.Errorf("natsbundle: %w", err)
	}
	issuerPath := filepath.Join(opts.Out, IssuerFile)
	if err := writeSecret(issuerPath, issuer); err != nil {
		return res, err
	}
	res.Files = append(res.Files, issuerPath)

	signer, err := json.MarshalIndent(a.AccountSignerSeeds(), "", "  ")
	if err != nil {
		return res, fmt.Errorf("natsbundle: %w", err)
	}
	signerPath := filepath.Join(opts.Out, AccountSignerFile)
	if err := writeSecret(signerPath, signer); err != nil {
		return res, err
	}
	res.Files = append(res.Files, signerPath)

	write := func(rel string, c natsauth.Creds, err error) error {
		if err != nil {
			return fmt.Errorf("natsbundle: issue %s: %w", rel, err)
		}
		p := filepath.Join(opts.Out, rel)
		if err := writeSecret(p, c.File); err != nil {
			return err
		}
		res.Files = append(res.Files, p)
		return nil
	}
	for _, svc := range Services {
		c, err := a.ServiceCreds(svc)
		if err := write(ServiceCreds(svc), c, err); err != nil {
			return res, err
		}
	}
	sys, err := a.SystemCreds("config-api-system")
	if err := write(SystemCreds, sys, err); err != nil {
		return res, err
	}
	tlsFiles, err := tlsgen.Ensure(filepath.Join(opts.Out, TLSDir), append(slices.Clone(TLSHosts), opts.TLSHosts...)...)
	if err != nil {
		return res, fmt.Errorf("natsbundle: %w", err)
	}
	for rel, src := range map[string]string{NATSCA: tlsFiles.CA, NATSServerCert: tlsFiles.ServerCert, NATSServerKey: tlsFiles.ServerKey,
		ServicesCA: tlsFiles.CA, AgentsCA: tlsFiles.CA} {
		data, err := os.ReadFile(src)
		if err != nil {
			return res, fmt.Errorf("natsbundle: %w", err)
		}
		p := filepath.Join(opts.Out, rel)
		if err := writeSecret(p, data); err != nil {
			return res, err
		}
		res.Files = append(res.Files, p)
	}
	agents := a.Issuer()
	for _, id := range opts.Agents {
		c, err := agents.IssueAgent(id)
		if err := write(AgentCreds(id), c, err); err != nil {
			return res, err
		}
	}
	return res, nil
}

type authorityState int

const (
	authorityLoaded authorityState = iota
	authorityCreated
	authorityUpgraded
)

// loadOrCreate reads the authority's seeds from path — adding an operator signing key to seeds from
// before them — or creates a new authority and stores it there.
func loadOrCreate(path string) (*natsauth.Authority, authorityState, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		var seeds natsauth.Seeds
		if err := json.Unmarshal(b, &seeds); err != nil {
			return nil, 0, fmt.Errorf("natsbundle: read %s: %w", path, err)
		}
		a, err := natsauth.LoadAuthority(seeds)
		if err == nil {
			return a, authorityLoaded, nil
		}
		if !errors.Is(err, natsauth.ErrNoOperatorSigner) {
			return nil, 0, fmt.Errorf("natsbundle: read %s: %w", path, err)
		}
		if seeds, err = natsauth.UpgradeSeeds(seeds); err != nil {
			return nil, 0, fmt.Errorf("natsbundle: %w", err)
		}
		if a, err = natsauth.LoadAuthority(seeds); err != nil {
			return nil, 0, fmt.Errorf("natsbundle: upgrade %s: %w", path, err)
		}
		if err := writeSeeds(path, seeds); err != nil {
			return nil, 0, err
		}
		return a, authorityUpgraded, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("natsbundle: %w", err)
	}
	a, err := natsauth.NewAuthority()
	if err != nil {
		return nil, 0, fmt.Errorf("natsbundle: %w", err)
	}
	if err := writeSeeds(path, a.Seeds()); err != nil {
		return nil, 0, err
	}
	return a, authorityCreated, nil
}

func writeSeeds(path string, seeds natsauth.Seeds) error {
	b, err := json.MarshalIndent(seeds, "", "  ")
	if err != nil {
		return fmt.Errorf("natsbundle: %w", err)
	}
	return writeSecret(path, b)
}

// operatorLine is the line natsserver.ConfigFile renders the trusted operator JWT on.
var operatorLine = regexp.MustCompile(`(?m)^operator: \S+$`)

// replaceOperator puts a's operator JWT into an existing auth.conf, leaving its preloaded accounts (and
// so the revocations the servers hold, which are newer) alone.
func replaceOperator(conf []byte, a *natsauth.Authority) ([]byte, error) {
	if len(operatorLine.FindAll(conf, -1)) != 1 {
		return nil, fmt.Errorf("natsbundle: %s has no single operator line to upgrade; delete it to render a new one", AuthConf)
	}
	opJWT, err := a.OperatorJWT()
	if err != nil {
		return nil, fmt.Errorf("natsbundle: %w", err)
	}
	return operatorLine.ReplaceAllLiteral(conf, []byte("operator: "+opJWT)), nil
}

// writeSecret replaces path with data, mode 0600, in a 0700 directory.
func writeSecret(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("natsbundle: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".natsbundle-*")
	if err != nil {
		return fmt.Errorf("natsbundle: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("natsbundle: write %s: %w", path, err)
	}
	return nil
}
