package deploy

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/configsync/configsync/agent/agentrun"
)

// TestComposeSigning checks that compose runs signed configs end to end in both key modes. Key file
// (compose.yaml): the signing-key step generates the key in a volume that only it and the resolver
// mount (agents never see the private key), the resolver signs with that file, and every agent
// verifies with trust.public_keys_file, the file the step writes into a volume the agent mounts
// read-only; no agent skips verification. Vault Transit (compose.vault-signing.yaml on top): the
// resolver and the step use the dev Vault, whose init creates the ed25519 key the resolver names, and
// the agents read the public keys the step wrote.
func TestComposeSigning(t *testing.T) {
	for _, files := range composeVariants {
		t.Run(strings.Join(files, "+"), func(t *testing.T) {
			p := loadComposeFiles(t, files...)
			vault := len(files) > 1
			step, ok := p.Services["signing-key"]
			if !ok {
				t.Fatal("no signing-key service")
			}
			if composeBinary(t, step) != "resolver" || step.Restart != "no" || len(step.Command) == 0 || step.Command[0] != "public-keys" {
				t.Fatalf("signing-key: target %s, restart %q, command %v; want a one-shot `resolver public-keys`", composeBinary(t, step), step.Restart, step.Command)
			}
			out := flagValue(step.Command, "-out")
			trustVolume := volumeContaining(step, out)
			if out == "" || trustVolume == "" {
				t.Fatalf("signing-key writes the public keys to %q, on no named volume", out)
			}
			resolver := p.Services["resolver"]
			keyFile := envOf(step, "RESOLVER_SIGNING_KEY_FILE")
			if vault {
				for _, svc := range []types.ServiceConfig{step, resolver} {
					if addr := envOf(svc, "RESOLVER_VAULT_ADDR"); !strings.HasPrefix(addr, "http://vault:") || envOf(svc, "RESOLVER_VAULT_TOKEN") == "" {
						t.Errorf("%s: RESOLVER_VAULT_ADDR %q, token set %v; want the compose Vault", svc.Name, addr, envOf(svc, "RESOLVER_VAULT_TOKEN") != "")
					}
					if _, ok := svc.DependsOn["vault-init"]; !ok {
						t.Errorf("%s does not wait for vault-init, which creates the signing key", svc.Name)
					}
				}
				if slices.Contains(step.Command, "-create") {
					t.Error("signing-key creates a key file in Vault mode")
				}
				vaultInit := strings.Join(p.Services["vault-init"].Command, " ")
				if !strings.Contains(vaultInit, "transit/keys/configsync-signing type=ed25519") {
					t.Errorf("vault-init does not create the ed25519 key configsync-signing: %s", vaultInit)
				}
			} else {
				keyVolume := volumeContaining(step, keyFile)
				if keyFile == "" || keyVolume == "" || !slices.Contains(step.Command, "-create") {
					t.Fatalf("signing-key: RESOLVER_SIGNING_KEY_FILE %q on volume %q, command %v; want a key created on a named volume", keyFile, keyVolume, step.Command)
				}
				if keyVolume == trustVolume {
					t.Errorf("the private key and the agents' public keys share the volume %s", keyVolume)
				}
				if got := envOf(resolver, "RESOLVER_SIGNING_KEY_FILE"); got != keyFile || volumeContaining(resolver, got) != keyVolume {
					t.Errorf("resolver signs with %q (volume %q), want the key file %s the step made", got, volumeContaining(resolver, got), keyFile)
				}
				for _, name := range sortedServiceNames(p) {
					svc := p.Services[name]
					for _, v := range svc.Volumes {
						if v.Type == types.VolumeTypeVolume && v.Source == keyVolume && name != "signing-key" && name != "resolver" {
							t.Errorf("compose service %s mounts the signing key volume %s", name, keyVolume)
						}
					}
				}
			}
			if _, ok := resolver.DependsOn["signing-key"]; !ok {
				t.Error("resolver does not wait for signing-key")
			}
			agents := 0
			for _, name := range sortedServiceNames(p) {
				svc := p.Services[name]
				if composeBinary(t, svc) != "agent" {
					continue
				}
				agents++
				cfg, err := agentrun.LoadConfig(bindSource(svc, "/etc/configsync/agent.yaml"))
				if err != nil {
					t.Errorf("agent %s: %v", name, err)
					continue
				}
				if cfg.Trust.InsecureSkipVerify || cfg.Trust.PublicKeysFile != out {
					t.Errorf("agent %s: insecure_skip_verify %v, public_keys_file %q; want verification with %s", name, cfg.Trust.InsecureSkipVerify, cfg.Trust.PublicKeysFile, out)
				}
				if volumeContaining(svc, out) != trustVolume || !readOnlyAt(svc, out) {
					t.Errorf("agent %s does not mount the trust volume %s read-only where %s is", name, trustVolume, out)
				}
				if _, ok := svc.DependsOn["signing-key"]; !ok {
					t.Errorf("agent %s does not wait for signing-key", name)
				}
			}
			if agents != 2 {
				t.Errorf("%d agents, want 2", agents)
			}
		})
	}
}

func envOf(svc types.ServiceConfig, name string) string {
	if v := svc.Environment[name]; v != nil {
		return *v
	}
	return ""
}

// volumeContaining is the named volume mounted in svc over the directory holding file, or "".
func volumeContaining(svc types.ServiceConfig, file string) string {
	for _, v := range svc.Volumes {
		if v.Type == types.VolumeTypeVolume && file != "" && strings.HasPrefix(file, v.Target+"/") {
			return v.Source
		}
	}
	return ""
}

func readOnlyAt(svc types.ServiceConfig, file string) bool {
	for _, v := range svc.Volumes {
		if v.Type == types.VolumeTypeVolume && strings.HasPrefix(file, v.Target+"/") {
			return v.ReadOnly
		}
	}
	return false
}

// bindSource is the host path bound at target in svc, or "".
func bindSource(svc types.ServiceConfig, target string) string {
	for _, v := range svc.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == target {
			return v.Source
		}
	}
	return ""
}

// TestKubernetesSigning: on Kubernetes the resolver signs with the Vault Transit key (a Secret-mounted
// key file cannot be 0600 for the resolver's non-root user, see deploy/README.md), its token comes
// from a Secret only the resolver reads, and no other Deployment is given a signing key.
func TestKubernetesSigning(t *testing.T) {
	m := renderBase(t)
	for _, name := range sortedKeys(m.deployments) {
		d := m.deployments[name]
		for _, c := range d.Spec.Template.Spec.Containers {
			env := containerEnv(t, m, "k8s Deployment "+name, c)
			signs := env["RESOLVER_VAULT_ADDR"] != "" || env["RESOLVER_SIGNING_KEY_FILE"] != ""
			refsToken := false
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "configsync-resolver-vault" {
					refsToken = true
				}
			}
			if name != "resolver" {
				if signs || refsToken {
					t.Errorf("k8s Deployment %s is given a signing key", name)
				}
				continue
			}
			if !strings.HasPrefix(env["RESOLVER_VAULT_ADDR"], "https://") || env["RESOLVER_VAULT_SIGNING_KEY"] != "configsync-signing" || !refsToken {
				t.Errorf("k8s resolver: RESOLVER_VAULT_ADDR %q, RESOLVER_VAULT_SIGNING_KEY %q, token from the Secret %v; want Vault Transit signing",
					env["RESOLVER_VAULT_ADDR"], env["RESOLVER_VAULT_SIGNING_KEY"], refsToken)
			}
		}
	}
}

// TestKubernetesSigningKeyFileComponent builds the base with the signing-keyfile component, as an
// overlay would: the resolver no longer talks to Vault, signs with RESOLVER_SIGNING_KEY_FILE on an
// in-memory emptyDir mounted read-only, and an init container of the same image installs it there
// (`resolver install-signing-key`) from the Secret configsync-signing-key, which only that init container
// mounts; every variable set is one the resolver reads.
func TestKubernetesSigningKeyFileComponent(t *testing.T) {
	mem := filesys.MakeFsInMemory()
	for _, dir := range []string{"k8s", "nats"} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return mem.WriteFile(filepath.Join("/deploy", p), b)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	overlay := "/deploy/k8s/overlays/keyfile-test"
	if err := mem.WriteFile(overlay+"/kustomization.yaml", []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"+
		"resources:\n  - ../../base\ncomponents:\n  - ../../components/signing-keyfile\n"+
		"images:\n  - name: configsync/resolver\n    newName: registry.example.com/configsync/resolver\n    newTag: 0.1.0\n")); err != nil {
		t.Fatal(err)
	}
	m := render(t, mem, overlay)
	d, ok := m.deployments["resolver"]
	if !ok {
		t.Fatal("no resolver Deployment")
	}
	pod := d.Spec.Template.Spec
	var main corev1.Container
	for _, c := range pod.Containers {
		if c.Name == "resolver" {
			main = c
		}
	}
	env := containerEnv(t, m, "resolver with signing-keyfile", main)
	checkEnv(t, "resolver", "resolver with signing-keyfile", sortedKeys(env))
	keyFile := env["RESOLVER_SIGNING_KEY_FILE"]
	for k := range env {
		if strings.HasPrefix(k, "RESOLVER_VAULT_") {
			t.Errorf("the resolver still sets %s (Vault would win over the key file)", k)
		}
	}
	emptyDirs := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
			emptyDirs[v.Name] = true
		}
	}
	onMemory := func(c corev1.Container, file string, readOnly bool) bool {
		for _, vm := range c.VolumeMounts {
			if emptyDirs[vm.Name] && path.Dir(file) == vm.MountPath && vm.ReadOnly == readOnly {
				return true
			}
		}
		return false
	}
	if keyFile == "" || !onMemory(main, keyFile, true) {
		t.Fatalf("RESOLVER_SIGNING_KEY_FILE %q is not on an in-memory emptyDir mounted read-only", keyFile)
	}
	if len(pod.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the key installer", len(pod.InitContainers))
	}
	installer := pod.InitContainers[0]
	if main.Image != "registry.example.com/configsync/resolver:0.1.0" || installer.Image != main.Image || len(installer.Args) == 0 || installer.Args[0] != "install-signing-key" || flagValue(installer.Args, "-to") != keyFile {
		t.Fatalf("init container %s %v: want `resolver install-signing-key -to %s` from the resolver's image %s", installer.Image, installer.Args, keyFile, main.Image)
	}
	if !onMemory(installer, keyFile, false) {
		t.Error("the init container cannot write the key's emptyDir")
	}
	from := flagValue(installer.Args, "-from")
	if content, ok := fileContent(m, pod, installer, from); !ok || content == "" {
		t.Errorf("-from %s is not a mounted Secret key", from)
	}
	secretName := ""
	for _, v := range pod.Volumes {
		if v.Secret != nil && strings.HasPrefix(v.Secret.SecretName, "configsync-signing-key") {
			secretName = v.Name
		}
	}
	for _, vm := range main.VolumeMounts {
		if vm.Name == secretName {
			t.Error("the resolver container mounts the signing key Secret itself")
		}
	}
	if s, ok := m.secrets["configsync-signing-key"]; !ok || !strings.Contains(secretKeys(s)["signing.key"], "REPLACE_ME") {
		t.Errorf("the component's Secret is not a placeholder: %v", ok)
	}
	for name, other := range m.deployments {
		if name == "resolver" {
			continue
		}
		for _, v := range other.Spec.Template.Spec.Volumes {
			if v.Secret != nil && strings.HasPrefix(v.Secret.SecretName, "configsync-signing-key") {
				t.Errorf("Deployment %s mounts the signing key", name)
			}
		}
	}
}
