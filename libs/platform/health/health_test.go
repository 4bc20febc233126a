package health

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRun(t *testing.T) {
	checks := []Check{
		{Name: "ok", Func: func(context.Context) error { return nil }},
		{Name: "down", Func: func(context.Context) error { return errors.New("connection refused") }},
		{Name: "slow", Func: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{Name: "panics", Func: func(context.Context) error { panic("boom") }},
		{Name: "nil"},
	}
	results, ok := Run(context.Background(), checks, 50*time.Millisecond)
	if ok {
		t.Fatal("Run reported ready with failing checks")
	}
	wantOK := []bool{true, false, false, false, false}
	for i, r := range results {
		if r.Name != checks[i].Name || r.OK != wantOK[i] {
			t.Errorf("result %d = %+v, want name %s ok %v", i, r, checks[i].Name, wantOK[i])
		}
		if !r.OK && r.Error == "" {
			t.Errorf("result %s failed without an error", r.Name)
		}
	}

	results, ok = Run(context.Background(), checks[:1], time.Second)
	if !ok || len(results) != 1 {
		t.Fatalf("got %v %v", results, ok)
	}
	if _, ok := Run(context.Background(), nil, time.Second); !ok {
		t.Fatal("no checks means ready")
	}
}

func TestAsCheckJoinsTheReadinessGroup(t *testing.T) {
	var got struct {
		fx.In
		Checks []Check `group:"readiness"`
	}
	app := fx.New(fx.NopLogger,
		fx.Provide(AsCheck(func() Check { return Check{Name: "a"} })),
		fx.Provide(AsCheck(func() Check { return Check{Name: "b"} })),
		fx.Populate(&got),
	)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got.Checks) != 2 {
		t.Fatalf("group has %d checks, want 2", len(got.Checks))
	}
}
