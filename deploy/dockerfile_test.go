package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	dockerfilePath = "docker/Dockerfile"
	distroless     = "gcr.io/distroless/static-debian12:nonroot"
)

// stage is one FROM ... AS name section of the Dockerfile, as plain instructions.
type stage struct {
	base         string
	instructions []string // "COPY ...", "USER ...", with line continuations joined
}

// dockerStages reads deploy/docker/Dockerfile into its named stages.
func dockerStages(t *testing.T) map[string]*stage {
	t.Helper()
	raw, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(l)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	fromRE := regexp.MustCompile(`(?i)^FROM\s+(?:--platform=\S+\s+)?(\S+)\s+AS\s+(\S+)$`)
	stages := map[string]*stage{}
	var st *stage
	for _, l := range lines {
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			m := fromRE.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("%s: every stage must be named (FROM image AS name): %q", dockerfilePath, l)
			}
			st = &stage{base: m[1]}
			stages[m[2]] = st
			continue
		}
		if st != nil {
			st.instructions = append(st.instructions, l)
		}
	}
	return stages
}

func TestDockerfileTargets(t *testing.T) {
	stages := dockerStages(t)
	build, ok := stages["build"]
	if !ok {
		t.Fatal("Dockerfile has no build stage")
	}
	if !strings.HasPrefix(build.base, "golang:") {
		t.Errorf("build stage is FROM %s, want golang:<version>", build.base)
	}
	var goBuild string
	for _, in := range build.instructions {
		if strings.HasPrefix(in, "RUN ") && strings.Contains(in, "go build") {
			goBuild = in
		}
	}
	for _, want := range []string{"CGO_ENABLED=0"} {
		found := strings.Contains(goBuild, want)
		for _, in := range build.instructions {
			found = found || (strings.HasPrefix(in, "ENV ") && strings.Contains(in, want))
		}
		if !found {
			t.Errorf("build stage does not set %s", want)
		}
	}
	if !strings.Contains(goBuild, "-trimpath") {
		t.Error("go build runs without -trimpath")
	}
	for name, pkg := range binaries {
		st, ok := stages[name]
		if !ok {
			t.Errorf("Dockerfile has no target %q", name)
			continue
		}
		if st.base != distroless {
			t.Errorf("target %s is FROM %s, want %s", name, st.base, distroless)
		}
		if !strings.Contains(goBuild, " "+pkg+" ") && !strings.HasSuffix(goBuild, " "+pkg) {
			t.Errorf("the build stage's go build does not build %s (target %s)", pkg, name)
		}
		// The package must exist and be a command.
		src, err := os.ReadFile(filepath.Join("..", pkg, "main.go"))
		if err != nil || !strings.Contains(string(src), "package main") {
			t.Errorf("target %s: %s/main.go is not a main package (%v)", name, pkg, err)
		}
		var copied, user, entry bool
		for _, in := range st.instructions {
			copied = copied || strings.HasPrefix(in, "COPY --from=build /out/"+name+" ")
			user = user || in == "USER 65532:65532"
			entry = entry || strings.HasPrefix(in, `ENTRYPOINT ["/usr/local/bin/`+name+`"]`)
		}
		if !copied || !user || !entry {
			t.Errorf("target %s: copies its binary %v, runs as 65532 %v, enters it %v", name, copied, user, entry)
		}
	}
	for name := range stages {
		if _, ok := binaries[name]; !ok && name != "build" {
			t.Errorf("Dockerfile target %q builds no known binary", name)
		}
	}
}
