package vaulttransit

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/vault/api"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/backoff"
	"github.com/configsync/configsync/services/credential/internal/credential"
)

// Backoff bounds for retrying a failed login in the background.
const (
	minLoginBackoff = 500 * time.Millisecond
	maxLoginBackoff = 30 * time.Second
)

// authenticate logs in with AppRole, or, with a static token, looks it up to learn whether it can be
// renewed. Either way a renewable token becomes t.auth for the renewal loop.
func (t *Transit) authenticate(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.authenticateLocked(ctx)
}

// authenticateIfGen authenticates unless another caller already did since generation gen.
func (t *Transit) authenticateIfGen(ctx context.Context, gen uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen.Load() != gen {
		return nil
	}
	return t.authenticateLocked(ctx)
}

// authenticateLocked authenticates; on failure it marks the token stale so the loop keeps trying.
func (t *Transit) authenticateLocked(ctx context.Context) error {
	var err error
	if t.cfg.appRole() {
		err = t.loginLocked(ctx)
	} else {
		err = t.lookupLocked(ctx)
	}
	if err != nil {
		t.stale = true
		t.signal()
	}
	return err
}

// loginLocked logs in with AppRole and switches the client to the new token.
func (t *Transit) loginLocked(ctx context.Context) error {
	secret, err := t.login.Logical().WriteWithContext(ctx, "auth/"+t.cfg.AppRoleMount+"/login", map[string]any{
		"role_id":   t.cfg.RoleID,
		"secret_id": t.cfg.SecretID,
	})
	if err != nil {
		return classify("approle login", err)
	}
	if secret == nil || secret.Auth == nil || secret.Auth.ClientToken == "" {
		return fmt.Errorf("%w: vault approle login returned no token", credential.ErrUnavailable)
	}
	t.client.SetToken(secret.Auth.ClientToken)
	t.log.Info("vault approle login succeeded",
		zap.Int("ttl_seconds", secret.Auth.LeaseDuration), zap.Bool("renewable", secret.Auth.Renewable))
	if !secret.Auth.Renewable {
		secret = nil
	}
	t.setAuthLocked(secret)
	return nil
}

// lookupLocked checks a static token and, when it is renewable, hands it to the renewal loop.
func (t *Transit) lookupLocked(ctx context.Context) error {
	self, err := t.client.Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		return classify("token lookup", err)
	}
	renewable, _ := self.TokenIsRenewable()
	ttl, _ := self.TokenTTL()
	if !renewable || ttl <= 0 {
		t.log.Info("vault token is not renewable; using it as is")
		t.setAuthLocked(nil)
		return nil
	}
	// RenewSelf returns the token as an auth secret, which is what the LifetimeWatcher renews.
	secret, err := t.client.Auth().Token().RenewSelfWithContext(ctx, 0)
	if err != nil {
		return classify("token renew", err)
	}
	if secret == nil || secret.Auth == nil {
		return fmt.Errorf("%w: vault token renew returned no auth data", credential.ErrUnavailable)
	}
	t.setAuthLocked(secret)
	return nil
}

// setAuthLocked records a new token generation and wakes the renewal loop.
func (t *Transit) setAuthLocked(secret *api.Secret) {
	t.gen.Add(1)
	t.auth = secret
	t.stale = false
	t.signal()
}

// signal wakes the renewal loop without blocking.
func (t *Transit) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// reloginIfStale logs in again unless another caller already did since generation gen was current.
func (t *Transit) reloginIfStale(ctx context.Context, gen uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen.Load() != gen {
		return nil
	}
	t.log.Info("vault refused the token; logging in again")
	return t.authenticateLocked(ctx)
}

// run keeps a token usable until ctx ends: it renews the current token with a LifetimeWatcher and
// authenticates again when renewal stops or authentication failed, with backoff between failures.
func (t *Transit) run(ctx context.Context) {
	defer close(t.done)
	wait := minLoginBackoff
	for {
		t.mu.Lock()
		auth, gen, stale := t.auth, t.gen.Load(), t.stale
		t.mu.Unlock()
		switch {
		case stale:
			if err := t.authenticateIfGen(ctx, gen); err != nil {
				t.log.Warn("vault authentication failed; retrying", zap.String("method", t.cfg.method()),
					zap.Duration("retry_in", wait), zap.Error(err))
				if !backoff.Sleep(ctx, wait) {
					return
				}
				wait = min(2*wait, maxLoginBackoff)
				continue
			}
			wait = minLoginBackoff
		case auth != nil:
			if !t.watch(ctx, auth, gen) {
				return
			}
		default:
			// Nothing to renew: wait for a request's re-login or the end.
			select {
			case <-ctx.Done():
				return
			case <-t.wake:
			}
		}
	}
}

// watch renews auth until renewal stops (the generation becomes stale), a newer login or a failed one
// supersedes it, or ctx ends. It reports whether ctx is still live.
func (t *Transit) watch(ctx context.Context, auth *api.Secret, gen uint64) bool {
	w, err := t.client.NewLifetimeWatcher(&api.LifetimeWatcherInput{Secret: auth})
	if err != nil {
		t.log.Error("vault token watcher failed", zap.Error(err))
		t.markStale(gen)
		return backoff.Sleep(ctx, minLoginBackoff)
	}
	go w.Start()
	stop := func() {
		w.Stop()
		<-w.DoneCh()
	}
	for {
		select {
		case <-ctx.Done():
			stop()
			return false
		case <-t.wake:
			t.mu.Lock()
			superseded := t.gen.Load() != gen || t.stale
			t.mu.Unlock()
			if superseded {
				stop()
				return true
			}
		case r := <-w.RenewCh():
			ttl := 0
			if r != nil && r.Secret != nil && r.Secret.Auth != nil {
				ttl = r.Secret.Auth.LeaseDuration
			}
			t.log.Info("vault token renewed", zap.Int("ttl_seconds", ttl))
		case err := <-w.DoneCh():
			if err != nil {
				t.log.Warn("vault token renewal stopped", zap.Error(classify("token renew", err)))
			} else {
				t.log.Info("vault token reached the end of its lifetime; authenticating again")
			}
			t.markStale(gen)
			return true
		}
	}
}

// markStale records that generation gen's token can no longer be renewed.
func (t *Transit) markStale(gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen.Load() == gen {
		t.auth = nil
		t.stale = true
	}
}

// method names the auth method for logs.
func (c Config) method() string {
	if c.appRole() {
		return "approle"
	}
	return "token"
}
