package deploy

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/configsync/configsync/deploy/internal/natsbundle"
)

const namespace = "configsync"

// hpaServices are the stateless services the brief scales horizontally.
var hpaServices = []string{"config-api", "resolver", "credential", "delivery"}

// manifests is a kustomization's output, decoded strictly into the Kubernetes API types (an unknown
// or misspelt field fails the decode).
type manifests struct {
	deployments  map[string]appsv1.Deployment
	statefulSets map[string]appsv1.StatefulSet
	services     map[string]corev1.Service
	configMaps   map[string]corev1.ConfigMap
	secrets      map[string]corev1.Secret
	namespaces   map[string]corev1.Namespace
	pdbs         map[string]policyv1.PodDisruptionBudget
	hpas         map[string]autoscalingv2.HorizontalPodAutoscaler
	namespaceOf  map[string]string // kind/name -> namespace
}

// render runs kustomize (the same library `kubectl apply -k` embeds) on dir in fsys.
func render(t *testing.T, fsys filesys.FileSystem, dir string) manifests {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out := manifests{
		deployments: map[string]appsv1.Deployment{}, statefulSets: map[string]appsv1.StatefulSet{},
		services: map[string]corev1.Service{}, configMaps: map[string]corev1.ConfigMap{},
		secrets: map[string]corev1.Secret{}, namespaces: map[string]corev1.Namespace{},
		pdbs: map[string]policyv1.PodDisruptionBudget{}, hpas: map[string]autoscalingv2.HorizontalPodAutoscaler{},
		namespaceOf: map[string]string{},
	}
	for _, r := range m.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		kind, name := r.GetKind(), r.GetName()
		out.namespaceOf[kind+"/"+name] = r.GetNamespace()
		switch kind {
		case "Deployment":
			var v appsv1.Deployment
			decodeStrict(t, doc, &v, kind, name)
			out.deployments[name] = v
		case "StatefulSet":
			var v appsv1.StatefulSet
			decodeStrict(t, doc, &v, kind, name)
			out.statefulSets[name] = v
		case "Service":
			var v corev1.Service
			decodeStrict(t, doc, &v, kind, name)
			out.services[name] = v
		case "ConfigMap":
			var v corev1.ConfigMap
			decodeStrict(t, doc, &v, kind, name)
			out.configMaps[name] = v
		case "Secret":
			var v corev1.Secret
			decodeStrict(t, doc, &v, kind, name)
			out.secrets[name] = v
		case "Namespace":
			var v corev1.Namespace
			decodeStrict(t, doc, &v, kind, name)
			out.namespaces[name] = v
		case "PodDisruptionBudget":
			var v policyv1.PodDisruptionBudget
			decodeStrict(t, doc, &v, kind, name)
			out.pdbs[name] = v
		case "HorizontalPodAutoscaler":
			var v autoscalingv2.HorizontalPodAutoscaler
			decodeStrict(t, doc, &v, kind, name)
			out.hpas[name] = v
		default:
			t.Errorf("%s: unexpected kind %s/%s (add a check for it)", dir, kind, name)
		}
	}
	return out
}

func decodeStrict(t *testing.T, doc []byte, dst any, kind, name string) {
	t.Helper()
	if err := sigsyaml.UnmarshalStrict(doc, dst); err != nil {
		t.Errorf("%s/%s is not a valid %s: %v", kind, name, kind, err)
	}
}

// secretKeys lists a Secret's keys (data and stringData).
func secretKeys(s corev1.Secret) map[string]string {
	keys := map[string]string{}
	for k, v := range s.Data {
		keys[k] = string(v)
	}
	for k, v := range s.StringData {
		keys[k] = v
	}
	return keys
}

// containerEnv resolves a container's environment as the kubelet would: envFrom ConfigMaps and
// Secrets (with prefixes), then env. It reports references to missing objects or keys.
func containerEnv(t *testing.T, m manifests, where string, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := m.configMaps[from.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: envFrom ConfigMap %s does not exist", where, from.ConfigMapRef.Name)
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = v
			}
		case from.SecretRef != nil:
			s, ok := m.secrets[from.SecretRef.Name]
			if !ok {
				t.Errorf("%s: envFrom Secret %s does not exist", where, from.SecretRef.Name)
			}
			for k, v := range secretKeys(s) {
				env[from.Prefix+k] = v
			}
		}
	}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom == nil {
			continue
		}
		switch {
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if _, ok := secretKeys(m.secrets[ref.Name])[ref.Key]; !ok {
				t.Errorf("%s: %s refers to Secret %s key %s, which does not exist", where, e.Name, ref.Name, ref.Key)
			}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			if _, ok := m.configMaps[ref.Name].Data[ref.Key]; !ok {
				t.Errorf("%s: %s refers to ConfigMap %s key %s, which does not exist", where, e.Name, ref.Name, ref.Key)
			}
		}
	}
	return env
}

// fileContent returns the content of file as the pod's mounts provide it: a mount of a Secret or
// ConfigMap volume at file's directory (or at file itself with subPath), holding the key.
func fileContent(m manifests, pod corev1.PodSpec, c corev1.Container, file string) (string, bool) {
	for _, vm := range c.VolumeMounts {
		var rel string
		switch {
		case vm.SubPath != "" && vm.MountPath == file:
			rel = vm.SubPath
		case vm.SubPath == "" && path.Dir(file) == vm.MountPath:
			rel = path.Base(file)
		default:
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != vm.Name {
				continue
			}
			var keys map[string]string
			var items []corev1.KeyToPath
			switch {
			case v.Secret != nil:
				keys, items = secretKeys(m.secrets[v.Secret.SecretName]), v.Secret.Items
			case v.ConfigMap != nil:
				keys, items = m.configMaps[v.ConfigMap.Name].Data, v.ConfigMap.Items
			default:
				return "", false
			}
			key := rel
			if len(items) > 0 {
				key = ""
				for _, it := range items {
					if it.Path == rel {
						key = it.Key
					}
				}
			}
			content, ok := keys[key]
			return content, ok
		}
	}
	return "", false
}

func selects(sel map[string]string, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// imageBinary is the ConfigSync binary an image runs: the last path element, without its tag.
func imageBinary(image string) string {
	base := image[strings.LastIndex(image, "/")+1:]
	if i := strings.IndexAny(base, ":@"); i >= 0 {
		base = base[:i]
	}
	return base
}

func renderBase(t *testing.T) manifests {
	t.Helper()
	return render(t, filesys.MakeFsOnDisk(), "k8s/base")
}

func TestKubernetesEnvironmentIsReadByTheBinaries(t *testing.T) {
	m := renderBase(t)
	if len(m.deployments) == 0 {
		t.Fatal("k8s/base renders no Deployment")
	}
	for _, name := range sortedKeys(m.deployments) {
		d := m.deployments[name]
		for _, c := range d.Spec.Template.Spec.Containers {
			where := fmt.Sprintf("k8s Deployment %s container %s", name, c.Name)
			env := containerEnv(t, m, where, c)
			bin := imageBinary(c.Image)
			checkEnv(t, bin, where, sortedKeys(env))
			// Files the binary is pointed at must be mounted.
			for k, v := range env {
				if strings.HasSuffix(k, "_FILE") || strings.HasSuffix(k, "_CREDS") {
					if _, ok := fileContent(m, d.Spec.Template.Spec, c, v); !ok {
						t.Errorf("%s: %s=%s, but no Secret or ConfigMap key is mounted there", where, k, v)
					}
				}
			}
		}
	}
	for _, name := range sortedKeys(m.statefulSets) {
		s := m.statefulSets[name]
		conf := natsConfText(t)
		for _, c := range s.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				// The server's Go runtime reads these itself (TestKubernetesGoRuntimeFitsItsLimit).
				if goRuntimeEnv[e.Name] {
					continue
				}
				if !strings.Contains(conf, "$"+e.Name) {
					t.Errorf("k8s StatefulSet %s sets %s, which nats/nats-server.conf never references", name, e.Name)
				}
			}
		}
	}
}

func TestKubernetesServices(t *testing.T) {
	m := renderBase(t)
	for _, svc := range services {
		d, ok := m.deployments[svc]
		if !ok {
			t.Errorf("k8s/base has no Deployment %s", svc)
			continue
		}
		pod := d.Spec.Template.Spec
		if len(pod.Containers) != 1 {
			t.Errorf("Deployment %s: %d containers, want 1", svc, len(pod.Containers))
			continue
		}
		c := pod.Containers[0]
		where := "Deployment " + svc
		if b := imageBinary(c.Image); b != svc {
			t.Errorf("%s runs image %s (binary %s)", where, c.Image, b)
		}

		// Probes on the port HTTP_ADDR listens on.
		env := containerEnv(t, m, where, c)
		_, httpPort, err := net.SplitHostPort(env["HTTP_ADDR"])
		if err != nil {
			t.Errorf("%s: HTTP_ADDR %q: %v", where, env["HTTP_ADDR"], err)
		}
		portOf := func(p corev1.ProbeHandler) string {
			if p.HTTPGet == nil {
				return ""
			}
			if p.HTTPGet.Port.IntVal != 0 {
				return p.HTTPGet.Port.String()
			}
			for _, cp := range c.Ports {
				if cp.Name == p.HTTPGet.Port.StrVal {
					return fmt.Sprint(cp.ContainerPort)
				}
			}
			return ""
		}
		for _, pr := range []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
			switch {
			case pr.probe == nil || pr.probe.HTTPGet == nil:
				t.Errorf("%s has no HTTP %s probe", where, pr.name)
			case pr.probe.HTTPGet.Path != pr.path:
				t.Errorf("%s %s probe is on %s, want %s", where, pr.name, pr.probe.HTTPGet.Path, pr.path)
			case portOf(pr.probe.ProbeHandler) != httpPort:
				t.Errorf("%s %s probe port %s is not HTTP_ADDR's port %s", where, pr.name, portOf(pr.probe.ProbeHandler), httpPort)
			}
		}

		// Hardening and resources.
		psc, csc := pod.SecurityContext, c.SecurityContext
		nonRoot := (psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot) || (csc != nil && csc.RunAsNonRoot != nil && *csc.RunAsNonRoot)
		if !nonRoot {
			t.Errorf("%s does not set runAsNonRoot", where)
		}
		if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
			csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
			csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: want readOnlyRootFilesystem, allowPrivilegeEscalation false and capabilities drop ALL", where)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			t.Errorf("%s requests no CPU or no memory", where)
		}

		// Two replicas: its own, or an HPA's minimum.
		hpa, hasHPA := m.hpas[svc]
		switch {
		case hasHPA:
			if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != svc {
				t.Errorf("HPA %s scales %s/%s", svc, hpa.Spec.ScaleTargetRef.Kind, hpa.Spec.ScaleTargetRef.Name)
			}
			if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 {
				t.Errorf("HPA %s allows fewer than 2 replicas", svc)
			}
			if d.Spec.Replicas != nil {
				t.Errorf("%s sets replicas although HPA %s owns them (every apply would reset the scale)", where, svc)
			}
		case d.Spec.Replicas == nil || *d.Spec.Replicas < 2:
			t.Errorf("%s runs fewer than 2 replicas and has no HPA", where)
		}
		if slices.Contains(hpaServices, svc) && !hasHPA {
			t.Errorf("%s has no HorizontalPodAutoscaler", where)
		}

		labels := d.Spec.Template.Labels
		var pdb, service bool
		for _, p := range m.pdbs {
			pdb = pdb || (p.Spec.Selector != nil && selects(p.Spec.Selector.MatchLabels, labels))
		}
		for _, s := range m.services {
			service = service || selects(s.Spec.Selector, labels)
		}
		if !pdb || !service {
			t.Errorf("%s: PodDisruptionBudget %v, Service %v; want both", where, pdb, service)
		}
	}
	for name, h := range m.hpas {
		if _, ok := m.deployments[h.Spec.ScaleTargetRef.Name]; !ok {
			t.Errorf("HPA %s scales a Deployment that does not exist", name)
		}
	}
	for key, ns := range m.namespaceOf {
		if !strings.HasPrefix(key, "Namespace/") && ns != namespace {
			t.Errorf("%s is in namespace %q, want %s", key, ns, namespace)
		}
	}
	if _, ok := m.namespaces[namespace]; !ok {
		t.Errorf("k8s/base does not create namespace %s", namespace)
	}
}

// TestKubernetesSecretsArePlaceholders: the base must never carry a real secret.
func TestKubernetesSecretsArePlaceholders(t *testing.T) {
	m := renderBase(t)
	for name, s := range m.secrets {
		for k, v := range secretKeys(s) {
			if !strings.Contains(v, "REPLACE_ME") {
				t.Errorf("k8s/base Secret %s key %s is not a REPLACE_ME placeholder", name, k)
			}
		}
	}
}

func TestKubernetesNATS(t *testing.T) {
	m := renderBase(t)
	sts, ok := m.statefulSets["nats"]
	if !ok {
		t.Fatal("k8s/base has no nats StatefulSet")
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("nats StatefulSet replicas %v, want 3", sts.Spec.Replicas)
	}
	pod := sts.Spec.Template.Spec
	c := pod.Containers[0]
	conf := natsConfText(t)
	// The rendered config is deploy/nats/nats-server.conf, byte for byte.
	confPath := flagValue(append(c.Command, c.Args...), "--config")
	got, ok := fileContent(m, pod, c, confPath)
	if !ok || got != conf {
		t.Errorf("the nats container's --config %s is not nats/nats-server.conf (mounted %v)", confPath, ok)
	}
	// Its auth include is mounted from the natsauthgen Secret.
	inc := regexp.MustCompile(`(?m)^include\s+"([^"]+)"`).FindStringSubmatch(conf)
	if inc == nil {
		t.Fatal("nats-server.conf includes no auth file")
	}
	incPath := path.Join(path.Dir(confPath), inc[1])
	if _, ok := fileContent(m, pod, c, incPath); !ok || path.Base(incPath) != path.Base(natsbundle.AuthConf) {
		t.Errorf("the auth include %s is not mounted from a Secret key %s", incPath, path.Base(natsbundle.AuthConf))
	}
	// Routes name the StatefulSet's pods through its headless Service.
	headless, ok := m.services[sts.Spec.ServiceName]
	if !ok || headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("nats StatefulSet's service %s must exist, be headless and publish not-ready addresses", sts.Spec.ServiceName)
	}
	for i := range 3 {
		route := fmt.Sprintf("nats-route://%s-%d.%s:6222", sts.Name, i, sts.Spec.ServiceName)
		if !strings.Contains(conf, route) {
			t.Errorf("nats-server.conf lacks route %s", route)
		}
	}
	// Services reach NATS through a Service that exists.
	u := m.configMaps["configsync-common"].Data["NATS_URL"]
	host := strings.TrimSuffix(strings.TrimPrefix(u, "nats://"), ":4222")
	if _, ok := m.services[host]; !ok {
		t.Errorf("NATS_URL %s names no Service", u)
	}
	var pdb bool
	for _, p := range m.pdbs {
		pdb = pdb || (p.Spec.Selector != nil && selects(p.Spec.Selector.MatchLabels, sts.Spec.Template.Labels))
	}
	if !pdb {
		t.Error("nats has no PodDisruptionBudget")
	}
}

// TestKubernetesGoRuntimeFitsItsLimit: the Go runtime of nats-server and of every service collects
// before its container reaches its memory limit (GOMEMLIMIT at about 90% of it, in the runtime's own
// syntax), and at the GC target the fleet-scale figures were measured with: GOGC=400 for nats-server
// (devstack's -nats-gogc, README "nats-server at fleet scale") and for the services (devstack's
// -services-gogc).
func TestKubernetesGoRuntimeFitsItsLimit(t *testing.T) {
	m := renderBase(t)
	containers := map[string]corev1.Container{"StatefulSet nats": m.statefulSets["nats"].Spec.Template.Spec.Containers[0]}
	for _, svc := range services {
		d, ok := m.deployments[svc]
		if !ok {
			t.Errorf("k8s/base has no Deployment %s", svc)
			continue
		}
		containers["Deployment "+svc] = d.Spec.Template.Spec.Containers[0]
	}
	for _, where := range sortedKeys(containers) {
		c := containers[where]
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if env["GOGC"] != "400" {
			t.Errorf("%s: GOGC %q, want 400", where, env["GOGC"])
		}
		limit := c.Resources.Limits.Memory().Value()
		soft, err := goMemLimit(env["GOMEMLIMIT"])
		if err != nil {
			t.Errorf("%s: GOMEMLIMIT: %v", where, err)
			continue
		}
		if limit <= 0 || soft < limit*85/100 || soft > limit*92/100 {
			t.Errorf("%s: GOMEMLIMIT %s (%d bytes) is not about 90%% of its memory limit %d bytes", where, env["GOMEMLIMIT"], soft, limit)
		}
	}
}

// goMemLimit parses a GOMEMLIMIT value as the Go runtime does: an integer with an optional unit B, KiB,
// MiB, GiB or TiB.
func goMemLimit(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a byte count with a unit B, KiB, MiB, GiB or TiB", v)
	}
	return n * mult, nil
}

// TestKustomizationsListEveryFile: a manifest added to a kustomization's directory but not listed in
// it would silently never be applied.
func TestKustomizationsListEveryFile(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != "." {
			return filepath.SkipDir
		}
		if d.Name() == "secrets" && d.IsDir() {
			return filepath.SkipDir // generated, never committed
		}
		if d.Name() == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 2 {
		t.Fatalf("found kustomizations %v, want at least k8s/base and nats", dirs)
	}
	for _, dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Resources  []string `yaml:"resources"`
			Components []string `yaml:"components"`
			Patches    []struct {
				Path string `yaml:"path"`
			} `yaml:"patches"`
			Generators []struct {
				Files []string `yaml:"files"`
				Envs  []string `yaml:"envs"`
			} `yaml:"configMapGenerator"`
			SecretGenerators []struct {
				Files []string `yaml:"files"`
				Envs  []string `yaml:"envs"`
			} `yaml:"secretGenerator"`
		}
		if err := yaml.Unmarshal(raw, &k); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
		listed := map[string]bool{}
		add := func(p string) {
			if i := strings.Index(p, "="); i >= 0 {
				p = p[i+1:]
			}
			listed[filepath.Clean(p)] = true
		}
		for _, r := range append(k.Resources, k.Components...) {
			add(r)
		}
		for _, p := range k.Patches {
			add(p.Path)
		}
		for _, g := range append(k.Generators, k.SecretGenerators...) {
			for _, f := range append(g.Files, g.Envs...) {
				add(f)
			}
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() || e.Name() == "kustomization.yaml" || strings.HasSuffix(e.Name(), ".md") {
				continue
			}
			if !listed[e.Name()] {
				t.Errorf("%s/kustomization.yaml does not list %s", dir, e.Name())
			}
		}
	}
}

// TestKubernetesExampleOverlay builds the example overlay as an operator would after running
// natsauthgen, in memory: every placeholder is replaced, and every reference to a Secret follows the
// generated (hash-suffixed) name.
func TestKubernetesExampleOverlay(t *testing.T) {
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
	gen := t.TempDir()
	if _, err := natsbundle.Write(natsbundle.Options{Out: gen, ResolverDir: "/data/jwt"}); err != nil {
		t.Fatal(err)
	}
	secrets := "/deploy/k8s/overlays/example/secrets"
	err := filepath.WalkDir(gen, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(gen, p)
		return mem.WriteFile(filepath.Join(secrets, "nats", rel), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(mem.WriteFile(secrets+"/database.env", []byte("DATABASE_URL=postgres://configsync:s3cret@db.internal:5432/configsync?sslmode=verify-full\n")))
	must(mem.WriteFile(secrets+"/vault-approle.env", []byte("VAULT_ROLE_ID=role\nVAULT_SECRET_ID=secret\n")))
	must(mem.WriteFile(secrets+"/resolver-vault.env", []byte("RESOLVER_VAULT_TOKEN=token\n")))

	m := render(t, mem, "/deploy/k8s/overlays/example")
	for name, s := range m.secrets {
		for k, v := range secretKeys(s) {
			if strings.Contains(v, "REPLACE_ME") {
				t.Errorf("overlay Secret %s key %s is still a placeholder", name, k)
			}
		}
	}
	wantConf, err := os.ReadFile(filepath.Join(gen, natsbundle.AuthConf))
	if err != nil {
		t.Fatal(err)
	}
	sts := m.statefulSets["nats"]
	pod := sts.Spec.Template.Spec
	conf := natsConfText(t)
	inc := regexp.MustCompile(`(?m)^include\s+"([^"]+)"`).FindStringSubmatch(conf)
	if got, ok := fileContent(m, pod, pod.Containers[0], path.Join("/etc/nats", inc[1])); !ok || got != string(wantConf) {
		t.Errorf("the overlay's nats pods do not mount natsauthgen's auth.conf (mounted %v)", ok)
	}
	for _, name := range sortedKeys(m.deployments) {
		d := m.deployments[name]
		c := d.Spec.Template.Spec.Containers[0]
		if !strings.HasPrefix(c.Image, "registry.example.com/") {
			t.Errorf("overlay Deployment %s runs %s, not the overlay's image", name, c.Image)
		}
		env := containerEnv(t, m, "overlay Deployment "+name, c)
		for k, v := range env {
			if strings.HasSuffix(k, "_FILE") || strings.HasSuffix(k, "_CREDS") {
				content, ok := fileContent(m, d.Spec.Template.Spec, c, v)
				if !ok || strings.Contains(content, "REPLACE_ME") || content == "" {
					t.Errorf("overlay Deployment %s: %s=%s is not mounted from generated secrets", name, k, v)
				}
			}
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				if _, ok := m.secrets[v.Secret.SecretName]; !ok {
					t.Errorf("overlay Deployment %s mounts Secret %s, which the overlay does not render", name, v.Secret.SecretName)
				}
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
