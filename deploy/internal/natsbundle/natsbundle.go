// Package natsbundle writes the files of ConfigSync's NATS security domain that a deployment needs
// (libs/natsauth: decentralized JWT auth, one user per agent), in one directory layout shared by
// deploy/natsauthgen, compose.yaml and the Kubernetes overlay:
//
//	authority.json            the domain's secret seeds (operator, system account, account, agent signer).
//	                          Reused on every later run, so issued credentials stay valid. config-api
//	                          holds it to issue agent credentials and push revocations.
//	nats/auth.conf            included by deploy/nats/nats-server.conf: trusted operator, system account,
//	                          full resolver, preloaded account JWTs.
//	services/<service>.creds  one unrestricted user of the CONFIGSYNC account per service.
//	services/system.creds     a system-account user (config-api pushes revocations with it).
//	agents/<agent id>.creds   an agent user per requested agent (normally config-api issues these when a
//	                          host registers; this is for fixed fleets such as compose).
//
// Files are written atomically with mode 0600 in 0700 directories. An existing auth.conf is kept for an
// existing authority, never re-rendered: the servers' resolver keeps the newest account JWT it has seen,
// so a freshly signed one would replace the account and drop the revocations pushed since.
package natsbundle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/natsauth/natsserver"
)

// Paths inside the output directory.
const (
	AuthorityFile = "authority.json"
	AuthConf      = "nats/auth.conf"
	SystemCreds   = "services/system.creds"
)

// Services are the backend services that each get their own NATS user.
var Services = []string{"config-api", "resolver", "credential", "delivery", "ack-ingest"}

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
}

// Result reports what Write did.
type Result struct {
	AuthorityCreated bool
	AuthConfKept     bool
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
	a, created, err := loadOrCreate(authPath)
	if err != nil {
		return res, err
	}
	res.AuthorityCreated = created
	if created {
		res.Files = append(res.Files, authPath)
	}

	confPath := filepath.Join(opts.Out, AuthConf)
	if _, err := os.Stat(confPath); err == nil && !created {
		res.AuthConfKept = true
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
	issuer := a.Issuer()
	for _, id := range opts.Agents {
		c, err := issuer.IssueAgent(id)
		if err := write(AgentCreds(id), c, err); err != nil {
			return res, err
		}
	}
	return res, nil
}

// loadOrCreate reads the authority's seeds from path, or creates a new authority and stores it there.
func loadOrCreate(path string) (*natsauth.Authority, bool, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		var seeds natsauth.Seeds
		if err := json.Unmarshal(b, &seeds); err != nil {
			return nil, false, fmt.Errorf("natsbundle: read %s: %w", path, err)
		}
		a, err := natsauth.LoadAuthority(seeds)
		if err != nil {
			return nil, false, fmt.Errorf("natsbundle: read %s: %w", path, err)
		}
		return a, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("natsbundle: %w", err)
	}
	a, err := natsauth.NewAuthority()
	if err != nil {
		return nil, false, fmt.Errorf("natsbundle: %w", err)
	}
	b, err = json.MarshalIndent(a.Seeds(), "", "  ")
	if err != nil {
		return nil, false, fmt.Errorf("natsbundle: %w", err)
	}
	if err := writeSecret(path, b); err != nil {
		return nil, false, err
	}
	return a, true, nil
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
