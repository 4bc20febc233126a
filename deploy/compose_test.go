package deploy

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/configsync/configsync/agent/agentrun"
	"github.com/configsync/configsync/deploy/internal/natsbundle"
)

// loadCompose loads compose.yaml the way `docker compose` does (compose-go: schema validation,
// anchors and merge keys, interpolation), with every profile enabled.
func loadCompose(t *testing.T) *types.Project { return loadComposeFiles(t, "compose.yaml") }

// loadComposeFiles loads compose files as `docker compose -f a -f b` does (later files override).
func loadComposeFiles(t *testing.T, files ...string) *types.Project {
	t.Helper()
	wd, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var cfs []types.ConfigFile
	for _, f := range files {
		cfs = append(cfs, types.ConfigFile{Filename: filepath.Join(wd, f)})
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  wd,
		ConfigFiles: cfs,
		Environment: types.Mapping{},
	}, loader.WithProfiles([]string{"*"}), func(o *loader.Options) { o.SetProjectName("configsync", true) })
	if err != nil {
		t.Fatalf("%s does not load: %v", strings.Join(files, " + "), err)
	}
	return p
}

// composeBinary says which ConfigSync binary a compose service runs ("" for third-party images).
func composeBinary(t *testing.T, svc types.ServiceConfig) string {
	t.Helper()
	if svc.Build == nil {
		if strings.HasPrefix(svc.Image, "configsync/") {
			t.Errorf("compose service %s uses image %s without building it", svc.Name, svc.Image)
		}
		return ""
	}
	if svc.Build.Dockerfile != dockerfilePath && svc.Build.Dockerfile != "deploy/"+dockerfilePath {
		t.Errorf("compose service %s builds %s, want deploy/%s", svc.Name, svc.Build.Dockerfile, dockerfilePath)
	}
	if svc.Build.Target == "" {
		t.Errorf("compose service %s builds no target", svc.Name)
	}
	return svc.Build.Target
}

func TestComposeEnvironmentIsReadByTheBinaries(t *testing.T) {
	for _, files := range composeVariants {
		t.Run(strings.Join(files, "+"), func(t *testing.T) { checkComposeEnvironment(t, loadComposeFiles(t, files...)) })
	}
}

// composeVariants are the ways the compose stack is started: key-file signing, Vault Transit signing.
var composeVariants = [][]string{{"compose.yaml"}, {"compose.yaml", "compose.vault-signing.yaml"}}

// offlineCommands are subcommands of a service binary that run without its database or NATS (the
// resolver's signing-key tools): the service's required variables do not apply to them.
var offlineCommands = map[string]bool{"resolver public-keys": true, "resolver sign-trusted-keys": true}

func checkComposeEnvironment(t *testing.T, p *types.Project) {
	stages := dockerStages(t)
	conf := natsConfText(t)
	for _, name := range sortedServiceNames(p) {
		svc := p.Services[name]
		var set []string
		for k := range svc.Environment {
			set = append(set, k)
		}
		sort.Strings(set)
		bin := composeBinary(t, svc)
		switch {
		case bin != "":
			if _, ok := stages[bin]; !ok {
				t.Errorf("compose service %s builds target %s, which deploy/%s lacks", name, bin, dockerfilePath)
			}
			if len(svc.Command) > 0 && offlineCommands[bin+" "+svc.Command[0]] {
				checkEnvRead(t, bin, "compose.yaml service "+name, set)
			} else {
				checkEnv(t, bin, "compose.yaml service "+name, set)
			}
		case strings.HasPrefix(svc.Image, "nats:"):
			// nats-server reads only what its config file references, and its Go runtime its own.
			for _, k := range set {
				if !goRuntimeEnv[k] && !strings.Contains(conf, "$"+k) {
					t.Errorf("compose.yaml service %s sets %s, which nats/nats-server.conf never references", name, k)
				}
			}
		}
	}
}

// TestComposeGoRuntime: the services and the nats servers run at the GC target the fleet-scale figures
// were measured with, as in Kubernetes (TestKubernetesGoRuntimeFitsItsLimit; compose sets no memory
// limits, so no GOMEMLIMIT).
func TestComposeGoRuntime(t *testing.T) {
	p := loadCompose(t)
	want := append([]string{"nats-0", "nats-1", "nats-2"}, services...)
	for _, name := range want {
		svc, ok := p.Services[name]
		if !ok {
			t.Errorf("compose has no service %s", name)
			continue
		}
		if v := svc.Environment["GOGC"]; v == nil || *v != "400" {
			t.Errorf("compose service %s: GOGC %v, want 400", name, v)
		}
	}
}

func TestComposeTopology(t *testing.T) {
	p := loadCompose(t)
	count := map[string]int{}
	for _, name := range sortedServiceNames(p) {
		svc := p.Services[name]
		bin := composeBinary(t, svc)
		if bin == "" {
			continue
		}
		replicas := 1
		if svc.Deploy != nil && svc.Deploy.Replicas != nil {
			replicas = *svc.Deploy.Replicas
		}
		// One-shot steps (restart "no", such as signing-key) run a service's image but are no replica.
		if len(svc.Profiles) == 0 && svc.Restart != "no" {
			count[bin] += replicas
		}
		if !svc.ReadOnly || !slices.Contains(svc.CapDrop, "ALL") {
			t.Errorf("compose service %s: read_only %v, cap_drop %v; want a read-only root and no capabilities", name, svc.ReadOnly, svc.CapDrop)
		}
	}
	for _, s := range services {
		if count[s] != 2 {
			t.Errorf("compose runs %d replicas of %s, want 2", count[s], s)
		}
	}
	if count["agent"] != 2 {
		t.Errorf("compose runs %d agents, want 2", count["agent"])
	}
	var nats, postgres, vault int
	for _, svc := range p.Services {
		switch {
		case strings.HasPrefix(svc.Image, "nats:"):
			nats++
		case svc.Image == "postgres:15" || strings.HasPrefix(svc.Image, "postgres:15."):
			postgres++
		case strings.HasPrefix(svc.Image, "hashicorp/vault:") && slices.Contains(svc.Command, "-dev"):
			vault++
		}
	}
	if nats != 3 || postgres != 1 || vault != 1 {
		t.Errorf("compose has %d NATS nodes, %d PostgreSQL 15, %d dev Vault; want 3, 1, 1", nats, postgres, vault)
	}

	// Every cluster route of nats-server.conf reaches a distinct compose NATS node.
	aliases := map[string]string{}
	names := map[string]bool{}
	for _, name := range sortedServiceNames(p) {
		svc := p.Services[name]
		if !strings.HasPrefix(svc.Image, "nats:") {
			continue
		}
		if n := svc.Environment["SERVER_NAME"]; n == nil || names[*n] {
			t.Errorf("compose NATS node %s has no SERVER_NAME of its own", name)
		} else {
			names[*n] = true
		}
		for _, net := range svc.Networks {
			for _, a := range net.Aliases {
				aliases[a] = name
			}
		}
	}
	routes := regexp.MustCompile(`nats-route://([^:"]+):6222`).FindAllStringSubmatch(natsConfText(t), -1)
	reached := map[string]bool{}
	for _, r := range routes {
		node, ok := aliases[r[1]]
		if !ok {
			t.Errorf("nats-server.conf route host %s is no compose network alias", r[1])
		}
		reached[node] = true
	}
	if len(routes) != 3 || len(reached) != 3 {
		t.Errorf("nats-server.conf has %d routes reaching %d compose nodes, want 3 and 3", len(routes), len(reached))
	}
}

// TestComposeSecretsPaths checks that every creds or issuer file a service is pointed at is one
// natsauthgen writes into the volume mounted there (never authority.json, the domain's root keys), and that each agent's YAML config is valid for
// the agent binary (agentrun.ParseConfig) and uses credentials issued for its own id.
func TestComposeSecretsPaths(t *testing.T) {
	p := loadCompose(t)
	gen, ok := p.Services["nats-auth"]
	if !ok {
		t.Fatal("compose.yaml has no nats-auth service")
	}
	genOut := flagValue(gen.Command, "-out")
	genVolume := volumeAt(gen, genOut)
	if genVolume == "" {
		t.Fatalf("nats-auth writes to %s, where no named volume is mounted", genOut)
	}
	issued := map[string]bool{natsbundle.IssuerFile: true, natsbundle.AccountSignerFile: true, natsbundle.AuthConf: true,
		natsbundle.SystemCreds: true, natsbundle.ServicesCA: true, natsbundle.AgentsCA: true}
	for _, s := range natsbundle.Services {
		issued[natsbundle.ServiceCreds(s)] = true
	}
	for _, id := range strings.Split(flagValue(gen.Command, "-agents"), ",") {
		issued[natsbundle.AgentCreds(id)] = true
	}
	// inVolume says whether file, seen inside svc, is one natsauthgen wrote.
	inVolume := func(svc types.ServiceConfig, file string) bool {
		for _, v := range svc.Volumes {
			if v.Type == types.VolumeTypeVolume && v.Source == genVolume && strings.HasPrefix(file, v.Target+"/") {
				return issued[strings.TrimPrefix(file, v.Target+"/")]
			}
		}
		return false
	}
	for _, name := range sortedServiceNames(p) {
		svc := p.Services[name]
		for _, k := range []string{"NATS_CREDS", "NATS_AUTHORITY_FILE", "NATS_SYSTEM_CREDS", "NATS_TLS_CA", "CREDENTIAL_NATS_ACCOUNT_SIGNER_FILE"} {
			if v := svc.Environment[k]; v != nil && !inVolume(svc, *v) {
				t.Errorf("compose service %s: %s=%s is not a file natsauthgen writes into a volume mounted there", name, k, *v)
			}
		}
		if composeBinary(t, svc) == "agent" {
			var cfgFile string
			for _, v := range svc.Volumes {
				if v.Type == types.VolumeTypeBind && v.Target == "/etc/configsync/agent.yaml" {
					cfgFile = v.Source
				}
			}
			if cfgFile == "" {
				t.Errorf("compose agent %s mounts no /etc/configsync/agent.yaml", name)
				continue
			}
			cfg, err := agentrun.LoadConfig(cfgFile)
			if err != nil {
				t.Errorf("compose agent %s: %v", name, err)
				continue
			}
			if cfg.NATS.CredsFile == "" || path.Base(cfg.NATS.CredsFile) != cfg.AgentID+".creds" || !inVolume(svc, cfg.NATS.CredsFile) {
				t.Errorf("compose agent %s (%s): creds_file %s is not the creds natsauthgen issued for it", name, cfg.AgentID, cfg.NATS.CredsFile)
			}
			if cfg.NATS.TLS == nil || !inVolume(svc, cfg.NATS.TLS.CAFile) {
				t.Errorf("compose agent %s: nats.tls.ca_file %v is not the CA natsauthgen wrote (NATS serves TLS only)", name, cfg.NATS.TLS)
			}
			if v := volumeAt(svc, cfg.DataDir); v == "" {
				t.Errorf("compose agent %s: data_dir %s is not on a volume (the root filesystem is read-only)", name, cfg.DataDir)
			}
		}
	}
}

func sortedServiceNames(p *types.Project) []string {
	var names []string
	for n := range p.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func flagValue(cmd []string, flag string) string {
	for i := 0; i+1 < len(cmd); i++ {
		if cmd[i] == flag {
			return cmd[i+1]
		}
	}
	return ""
}

// volumeAt is the named volume mounted at dir in svc, or "".
func volumeAt(svc types.ServiceConfig, dir string) string {
	for _, v := range svc.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Target == dir {
			return v.Source
		}
	}
	return ""
}

func natsConfText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("nats/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
