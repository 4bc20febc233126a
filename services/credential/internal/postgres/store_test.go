package postgres_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential/internal/credential"
	"github.com/configsync/configsync/services/credential/internal/postgres"
	"github.com/configsync/configsync/services/credential/internal/seed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

func rec(clientID, envID, name string) credential.Record {
	return credential.Record{ID: uuid.NewString(), ClientID: clientID, EnvironmentID: envID, Name: name,
		Fields: []string{"password", "username"}, Ciphertext: "local:v1:abc", KeyVersion: "local:v1"}
}

func TestStore(t *testing.T) {
	pool := testinfra.Postgres(t)
	s := postgres.NewStore(pool)
	a, aEnvs := seed.Client(t, pool, "acme", 2)
	b, bEnvs := seed.Client(t, pool, "globex", 1)

	created, err := s.Create(ctx, rec(a, aEnvs[0], "db"))
	if err != nil {
		t.Fatal(err)
	}
	if created.CreatedAt.IsZero() || created.EnvironmentID != aEnvs[0] || !slices.Equal(created.Fields, []string{"password", "username"}) {
		t.Fatalf("created %+v", created)
	}
	anyEnv, err := s.Create(ctx, rec(a, "", "any"))
	if err != nil {
		t.Fatal(err)
	}
	if anyEnv.EnvironmentID != "" {
		t.Fatalf("client-wide credential got environment %q", anyEnv.EnvironmentID)
	}

	t.Run("create errors", func(t *testing.T) {
		if _, err := s.Create(ctx, rec(a, "", "db")); !errors.Is(err, credential.ErrConflict) {
			t.Fatalf("duplicate name: %v", err)
		}
		if _, err := s.Create(ctx, rec(b, "", "db")); err != nil {
			t.Fatalf("same name, other client: %v", err)
		}
		if _, err := s.Create(ctx, rec(a, bEnvs[0], "cross")); !errors.Is(err, credential.ErrNotFound) {
			t.Fatalf("environment of another client: %v", err)
		}
		if _, err := s.Create(ctx, rec(a, uuid.NewString(), "noenv")); !errors.Is(err, credential.ErrNotFound) {
			t.Fatalf("missing environment: %v", err)
		}
		if _, err := s.Create(ctx, rec(uuid.NewString(), "", "noclient")); !errors.Is(err, credential.ErrNotFound) {
			t.Fatalf("missing client: %v", err)
		}
	})

	t.Run("get and list are scoped by client", func(t *testing.T) {
		got, err := s.Get(ctx, a, created.ID)
		if err != nil || got.Ciphertext != "local:v1:abc" || got.Name != "db" {
			t.Fatalf("get: %+v %v", got, err)
		}
		if _, err := s.Get(ctx, b, created.ID); !errors.Is(err, credential.ErrNotFound) {
			t.Fatalf("get as another client: %v", err)
		}
		all, err := s.List(ctx, a, "")
		if err != nil || len(all) != 2 || all[0].Name != "any" || all[1].Name != "db" {
			t.Fatalf("list: %+v %v", all, err)
		}
		inEnv, err := s.List(ctx, a, aEnvs[0])
		if err != nil || len(inEnv) != 1 || inEnv[0].ID != created.ID {
			t.Fatalf("list env: %+v %v", inEnv, err)
		}
		none, err := s.List(ctx, a, aEnvs[1])
		if err != nil || len(none) != 0 {
			t.Fatalf("list empty env: %+v %v", none, err)
		}
	})

	t.Run("sealed by ids ignores clients and unknown ids", func(t *testing.T) {
		got, err := s.SealedByIDs(ctx, []string{created.ID, anyEnv.ID, uuid.NewString(), "not-a-uuid"})
		if err != nil || len(got) != 2 {
			t.Fatalf("sealed: %+v %v", got, err)
		}
		if g := got[created.ID]; g.ClientID != a || g.EnvironmentID != aEnvs[0] || g.Ciphertext != "local:v1:abc" {
			t.Fatalf("sealed row %+v", g)
		}
		if got[anyEnv.ID].EnvironmentID != "" {
			t.Fatal("client-wide credential has an environment")
		}
	})

	t.Run("update", func(t *testing.T) {
		updated, err := s.Update(ctx, a, created.ID, func(r credential.Record) (credential.Record, error) {
			if r.Ciphertext != "local:v1:abc" {
				t.Errorf("fn saw %q", r.Ciphertext)
			}
			r.Fields, r.Ciphertext, r.KeyVersion = []string{"token"}, "local:v2:def", "local:v2"
			return r, nil
		})
		if err != nil || updated.KeyVersion != "local:v2" || updated.Ciphertext != "local:v2:def" || !slices.Equal(updated.Fields, []string{"token"}) {
			t.Fatalf("update: %+v %v", updated, err)
		}
		if updated.UpdatedAt.Before(created.UpdatedAt) {
			t.Fatal("updated_at moved back")
		}
		boom := errors.New("cipher down")
		if _, err := s.Update(ctx, a, created.ID, func(credential.Record) (credential.Record, error) { return credential.Record{}, boom }); !errors.Is(err, boom) {
			t.Fatalf("fn error: %v", err)
		}
		if got, _ := s.Get(ctx, a, created.ID); got.Ciphertext != "local:v2:def" {
			t.Fatal("a failed update changed the row")
		}
		if _, err := s.Update(ctx, b, created.ID, func(r credential.Record) (credential.Record, error) { return r, nil }); !errors.Is(err, credential.ErrNotFound) {
			t.Fatalf("update as another client: %v", err)
		}
	})

	t.Run("concurrent updates serialise on the row lock", func(t *testing.T) {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				_, err := s.Update(ctx, a, anyEnv.ID, func(r credential.Record) (credential.Record, error) {
					r.Fields = append(slices.Clone(r.Fields), "f")
					return r, nil
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		got, _ := s.Get(ctx, a, anyEnv.ID)
		if len(got.Fields) != 2+8 {
			t.Fatalf("lost updates: %d fields", len(got.Fields))
		}
	})

	t.Run("delete", func(t *testing.T) {
		if _, err := s.Delete(ctx, b, created.ID); !errors.Is(err, credential.ErrNotFound) {
			t.Fatalf("delete as another client: %v", err)
		}
		gone, err := s.Delete(ctx, a, created.ID)
		if err != nil || gone.ID != created.ID {
			t.Fatalf("delete: %+v %v", gone, err)
		}
		if _, err := s.Get(ctx, a, created.ID); !errors.Is(err, credential.ErrNotFound) {
			t.Fatalf("get after delete: %v", err)
		}
		if _, err := s.Delete(ctx, a, created.ID); !errors.Is(err, credential.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
	})
}
