package deploy

import (
	"path"
	"testing"

	"github.com/configsync/configsync/deploy/internal/natsbundle"
	"github.com/configsync/configsync/libs/natsauth"
)

// checkServiceIdentity: a service connects as its own user (its creds file), with its own inbox prefix,
// and manages the streams only when its user may.
func checkServiceIdentity(t *testing.T, where, svc string, env map[string]string) {
	t.Helper()
	perm, err := natsauth.ServicePermissionOf(svc)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if got, want := path.Base(env["NATS_CREDS"]), path.Base(natsbundle.ServiceCreds(svc)); got != want {
		t.Errorf("%s: NATS_CREDS=%s, want its own user's %s", where, env["NATS_CREDS"], want)
	}
	if got, want := env["NATS_INBOX_PREFIX"], natsauth.ServiceInboxPrefix(svc); got != want {
		t.Errorf("%s: NATS_INBOX_PREFIX=%q, want %q (the only inbox its user may subscribe)", where, got, want)
	}
	if env["NATS_TLS_CA"] == "" {
		t.Errorf("%s: no NATS_TLS_CA (NATS serves TLS only)", where)
	}
	manage := env["NATS_MANAGE_STREAMS"]
	if manage == "" {
		manage = "true" // natsconn's default
	}
	if want := map[bool]string{true: "true", false: "false"}[perm.ManagesStreams]; manage != want {
		t.Errorf("%s: NATS_MANAGE_STREAMS=%s, want %s (its user may manage streams: %v)", where, manage, want, perm.ManagesStreams)
	}
}

func TestComposeServiceIdentities(t *testing.T) {
	p := loadCompose(t)
	seen := map[string]bool{}
	for _, name := range sortedServiceNames(p) {
		svc := p.Services[name]
		bin := composeBinary(t, svc)
		if _, err := natsauth.ServicePermissionOf(bin); err != nil {
			continue // not a backend service
		}
		env := map[string]string{}
		for k, v := range svc.Environment {
			if v != nil {
				env[k] = *v
			}
		}
		if env["NATS_URL"] == "" {
			continue // a one-shot tool of the same image that does not connect to NATS (bootstrap-token)
		}
		seen[bin] = true
		checkServiceIdentity(t, "compose service "+name, bin, env)
	}
	for _, svc := range natsauth.ServiceNames {
		if !seen[svc] {
			t.Errorf("compose.yaml runs no %s", svc)
		}
	}
}

func TestKubernetesServiceIdentities(t *testing.T) {
	m := renderBase(t)
	for _, svc := range natsauth.ServiceNames {
		d, ok := m.deployments[svc]
		if !ok || len(d.Spec.Template.Spec.Containers) != 1 {
			t.Errorf("k8s/base has no single-container Deployment %s", svc)
			continue
		}
		where := "Deployment " + svc
		checkServiceIdentity(t, where, svc, containerEnv(t, m, where, d.Spec.Template.Spec.Containers[0]))
	}
}
