package app

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRunCommand(t *testing.T) {
	var got []string
	commands := Commands{
		"ok":   func(args []string) error { got = args; return nil },
		"fail": func([]string) error { return errors.New("-name is required") },
	}
	var stderr strings.Builder

	if ran, code := runCommand("svc", nil, commands, &stderr); ran || code != 0 {
		t.Fatalf("no arguments: ran %v code %d, want the service to run", ran, code)
	}
	if ran, _ := runCommand("svc", []string{"-flag"}, commands, &stderr); ran {
		t.Fatal("an argument naming no command ran one")
	}
	if ran, code := runCommand("svc", []string{"ok", "-name", "x"}, commands, &stderr); !ran || code != 0 || !slices.Equal(got, []string{"-name", "x"}) {
		t.Fatalf("ok: ran %v code %d args %q, want ran, 0, [-name x]", ran, code, got)
	}
	if stderr.Len() != 0 {
		t.Fatalf("stderr after successes = %q, want empty", stderr.String())
	}
	if ran, code := runCommand("svc", []string{"fail"}, commands, &stderr); !ran || code != 1 {
		t.Fatalf("fail: ran %v code %d, want ran, 1", ran, code)
	}
	if want := "svc fail: -name is required\n"; stderr.String() != want {
		t.Fatalf("stderr = %q, want %q", stderr.String(), want)
	}
	if ran, _ := runCommand("svc", []string{"ok"}, nil, &stderr); ran {
		t.Fatal("a binary without commands ran one")
	}
}
