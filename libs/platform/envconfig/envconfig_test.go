package envconfig

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type inner struct {
	Addr string `env:"INNER_ADDR" default:"127.0.0.1:1"`
}

type all struct {
	S        string        `env:"S"`
	B        bool          `env:"B"`
	I        int           `env:"I"`
	I32      int32         `env:"I32"`
	I64      int64         `env:"I64"`
	U        uint16        `env:"U"`
	F        float64       `env:"F"`
	D        time.Duration `env:"D"`
	L        []string      `env:"L"`
	Nested   inner
	Embedded struct {
		Deep string `env:"DEEP"`
	}
	NoTag      string
	unexported string `env:"UNEXPORTED"`
}

func lookup(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadEveryKind(t *testing.T) {
	var c all
	err := LoadFrom(&c, lookup(map[string]string{
		"S": "text", "B": "true", "I": "-7", "I32": "2147483647", "I64": "9000000000", "U": "65535",
		"F": "0.25", "D": "1m30s", "L": " a, b ,,c ", "INNER_ADDR": "10.0.0.1:80", "DEEP": "x",
		"UNEXPORTED": "ignored",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := all{S: "text", B: true, I: -7, I32: 2147483647, I64: 9000000000, U: 65535, F: 0.25,
		D: 90 * time.Second, L: []string{"a", "b", "c"}, Nested: inner{Addr: "10.0.0.1:80"}}
	want.Embedded.Deep = "x"
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
}

func TestLoadDefaults(t *testing.T) {
	var c struct {
		Level   string        `env:"LEVEL" default:"info"`
		Port    int           `env:"PORT" default:"8080"`
		Timeout time.Duration `env:"TIMEOUT" default:"5s"`
		On      bool          `env:"ON" default:"true"`
		Peers   []string      `env:"PEERS" default:"a,b"`
		Nested  inner
		Unset   string `env:"UNSET"`
	}
	if err := LoadFrom(&c, lookup(map[string]string{"PORT": "9090", "ON": ""})); err != nil {
		t.Fatal(err)
	}
	if c.Level != "info" || c.Port != 9090 || c.Timeout != 5*time.Second || !c.On ||
		!reflect.DeepEqual(c.Peers, []string{"a", "b"}) || c.Nested.Addr != "127.0.0.1:1" || c.Unset != "" {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestLoadRequired(t *testing.T) {
	type cfg struct {
		URL string `env:"DATABASE_URL" required:"true"`
	}
	var c cfg
	err := LoadFrom(&c, lookup(nil))
	if err == nil || err.Error() != "config: DATABASE_URL is required" {
		t.Fatalf("got %v", err)
	}
	// An empty value counts as missing.
	if err := LoadFrom(&c, lookup(map[string]string{"DATABASE_URL": ""})); err == nil {
		t.Fatal("empty required variable accepted")
	}
	if err := LoadFrom(&c, lookup(map[string]string{"DATABASE_URL": "postgres://x"})); err != nil || c.URL != "postgres://x" {
		t.Fatalf("got %v, %q", err, c.URL)
	}
}

func TestLoadAggregatesEveryProblem(t *testing.T) {
	var c struct {
		URL     string        `env:"DATABASE_URL" required:"true"`
		Token   string        `env:"TOKEN" required:"true"`
		Port    int           `env:"PORT"`
		Small   int8          `env:"SMALL"`
		Timeout time.Duration `env:"TIMEOUT"`
		On      bool          `env:"ON"`
		Ratio   float64       `env:"RATIO"`
		Count   uint          `env:"COUNT"`
		Nested  struct {
			NATS string `env:"NATS_URL" required:"true"`
		}
	}
	err := LoadFrom(&c, lookup(map[string]string{
		"PORT": "eighty", "SMALL": "300", "TIMEOUT": "5", "ON": "maybe", "RATIO": "x", "COUNT": "-1",
	}))
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("want *Error, got %T %v", err, err)
	}
	want := []string{
		"DATABASE_URL is required",
		"TOKEN is required",
		"PORT: invalid integer",
		"SMALL: invalid integer",
		"TIMEOUT: invalid duration",
		"ON: invalid boolean",
		"RATIO: invalid number",
		"COUNT: invalid unsigned integer",
		"NATS_URL is required",
	}
	if len(cerr.Problems) != len(want) {
		t.Fatalf("problems %q, want %d", cerr.Problems, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(cerr.Problems[i], w) {
			t.Errorf("problem %d = %q, want prefix %q", i, cerr.Problems[i], w)
		}
	}
	if !strings.HasPrefix(err.Error(), "config: DATABASE_URL is required; TOKEN is required; PORT: ") {
		t.Errorf("error text %q", err.Error())
	}
}

func TestLoadRejectsBadDestinations(t *testing.T) {
	var s struct{}
	for _, dst := range []any{nil, s, &[]string{}, (*struct{})(nil)} {
		if err := LoadFrom(dst, lookup(nil)); err == nil {
			t.Errorf("LoadFrom(%T) accepted", dst)
		}
	}
	var unsupported struct {
		M map[string]string `env:"M"`
		N []int             `env:"N"`
	}
	err := LoadFrom(&unsupported, lookup(map[string]string{"M": "a", "N": "1"}))
	if err == nil || !strings.Contains(err.Error(), "M: unsupported field type") || !strings.Contains(err.Error(), "N: unsupported field type") {
		t.Fatalf("got %v", err)
	}
}

func TestLoadReadsTheProcessEnvironment(t *testing.T) {
	t.Setenv("CONFIGSYNC_ENVCONFIG_TEST", "from-env")
	var c struct {
		V string `env:"CONFIGSYNC_ENVCONFIG_TEST"`
	}
	if err := Load(&c); err != nil || c.V != "from-env" {
		t.Fatalf("got %v %q", err, c.V)
	}
}

func TestProvide(t *testing.T) {
	type cfg struct {
		Name string `env:"CONFIGSYNC_ENVCONFIG_NAME" default:"fallback"`
	}
	var got cfg
	app := fx.New(fx.NopLogger, Provide[cfg](), fx.Populate(&got))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if got.Name != "fallback" {
		t.Fatalf("got %+v", got)
	}

	type strict struct {
		URL string `env:"CONFIGSYNC_ENVCONFIG_MISSING" required:"true"`
	}
	var s strict
	app = fx.New(fx.NopLogger, Provide[strict](), fx.Populate(&s))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "CONFIGSYNC_ENVCONFIG_MISSING is required") {
		t.Fatalf("want a start error naming the variable, got %v", err)
	}
}
