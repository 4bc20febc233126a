package deploy

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// modulePrefix bounds the scan to ConfigSync's own packages. Third-party libraries may read more
// variables (the Vault client reads VAULT_CACERT, for instance), but deploy/ sets only what ConfigSync
// code reads, so those never need to be allowed here.
const modulePrefix = "github.com/configsync/configsync/"

// binaries maps each binary the Dockerfile builds to its main package (relative to the repo root).
var binaries = map[string]string{
	"config-api":  "./services/config-api/cmd/config-api",
	"resolver":    "./services/resolver/cmd/resolver",
	"credential":  "./services/credential/cmd/credential",
	"delivery":    "./services/delivery/cmd/delivery",
	"ack-ingest":  "./services/ack-ingest/cmd/ack-ingest",
	"agent":       "./agent/cmd/agent",
	"cfgctl":      "./tools/cfgctl",
	"natsauthgen": "./deploy/natsauthgen",
}

// services are the five backend binaries (HTTP health endpoints, two replicas each).
var services = []string{"config-api", "resolver", "credential", "delivery", "ack-ingest"}

// envSet is what one binary reads from its environment.
type envSet struct {
	// Read holds every variable name the binary's own packages read, with where it is read.
	Read map[string]string
	// Required holds the names tagged required:"true".
	Required map[string]bool
}

var (
	envOnce   sync.Once
	envByBin  map[string]envSet
	envErrMsg string
)

// binaryEnv derives, from the source as it is now, the variables each binary reads: `env:"NAME"`
// struct tags (libs/platform/envconfig) and os.Getenv / os.LookupEnv calls with a constant name, in
// the non-test Go files of every ConfigSync package the binary links (go list -deps, linux, CGO off,
// as the Dockerfile builds it). Nothing is hard-coded, so it follows the code as it changes.
func binaryEnv(t *testing.T) map[string]envSet {
	t.Helper()
	envOnce.Do(func() { envByBin, envErrMsg = scanBinaries() })
	if envErrMsg != "" {
		t.Fatal(envErrMsg)
	}
	return envByBin
}

type listedPackage struct {
	dir   string
	files []string
	deps  []string
}

func scanBinaries() (map[string]envSet, string) {
	root, err := filepath.Abs("..")
	if err != nil {
		return nil, err.Error()
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, "the go command is needed to list each binary's packages: " + err.Error()
	}
	// The workspace this module is built in (it lists deploy/ as well as the services).
	out, err := exec.Command(goBin, "env", "GOWORK").Output()
	work := strings.TrimSpace(string(out))
	if err != nil || work == "" || work == "off" {
		return nil, "deploy must be built in the repository's go.work workspace (go env GOWORK = " + strconv.Quote(work) + ")"
	}
	names := make([]string, 0, len(binaries))
	for name := range binaries {
		names = append(names, name)
	}
	sort.Strings(names)
	args := []string{"list", "-e", "-deps", "-f",
		"{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \",\"}}\t{{join .Deps \",\"}}\t{{if .Error}}{{.Error}}{{end}}"}
	for _, name := range names {
		args = append(args, binaries[name])
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK="+work, "CGO_ENABLED=0", "GOOS=linux")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if err != nil {
		return nil, "go list: " + err.Error() + "\n" + stderr.String()
	}
	pkgs := map[string]listedPackage{}
	var problems []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 5 {
			return nil, "go list: unexpected line " + sc.Text()
		}
		if f[4] != "" && strings.HasPrefix(f[0], modulePrefix) {
			problems = append(problems, f[0]+": "+f[4])
		}
		p := listedPackage{dir: f[1]}
		if f[2] != "" {
			p.files = strings.Split(f[2], ",")
		}
		if f[3] != "" {
			p.deps = strings.Split(f[3], ",")
		}
		pkgs[f[0]] = p
	}
	if len(problems) > 0 {
		return nil, "go list reported broken ConfigSync packages:\n" + strings.Join(problems, "\n")
	}

	// Constants first (os.Getenv(EnvName) and os.Getenv(pkg.EnvName) resolve through them).
	fset := token.NewFileSet()
	parsed := map[string][]*ast.File{}
	consts := map[string]map[string]string{}
	for path, p := range pkgs {
		if !strings.HasPrefix(path, modulePrefix) {
			continue
		}
		for _, name := range p.files {
			f, err := parser.ParseFile(fset, filepath.Join(p.dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, "parse: " + err.Error()
			}
			parsed[path] = append(parsed[path], f)
			collectConsts(f, path, consts)
		}
	}
	perPkg := map[string]envSet{}
	for path, files := range parsed {
		s := envSet{Read: map[string]string{}, Required: map[string]bool{}}
		for _, f := range files {
			scanFile(fset, f, path, consts, s)
		}
		perPkg[path] = s
	}

	result := map[string]envSet{}
	for _, name := range names {
		main := modulePrefix + strings.TrimPrefix(binaries[name], "./")
		p, ok := pkgs[main]
		if !ok {
			return nil, "go list did not report " + main
		}
		s := envSet{Read: map[string]string{}, Required: map[string]bool{}}
		for _, path := range append([]string{main}, p.deps...) {
			for k, v := range perPkg[path].Read {
				s.Read[k] = v
			}
			for k := range perPkg[path].Required {
				s.Required[k] = true
			}
		}
		result[name] = s
	}
	return result, ""
}

func collectConsts(f *ast.File, pkgPath string, consts map[string]map[string]string) {
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil {
						if consts[pkgPath] == nil {
							consts[pkgPath] = map[string]string{}
						}
						consts[pkgPath][n.Name] = v
					}
				}
			}
		}
	}
}

func scanFile(fset *token.FileSet, f *ast.File, pkgPath string, consts map[string]map[string]string, s envSet) {
	imports := map[string]string{} // local name -> import path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		local := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			local = im.Name.Name
		}
		imports[local] = p
	}
	resolve := func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				v, err := strconv.Unquote(e.Value)
				return v, err == nil
			}
		case *ast.Ident:
			v, ok := consts[pkgPath][e.Name]
			return v, ok
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok {
				v, ok := consts[imports[x.Name]][e.Sel.Name]
				return v, ok
			}
		}
		return "", false
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if n.Tag == nil {
				return true
			}
			tag, err := strconv.Unquote(n.Tag.Value)
			if err != nil {
				return true
			}
			st := reflect.StructTag(tag)
			if name, ok := st.Lookup("env"); ok && name != "" && name != "-" {
				s.Read[name] = fset.Position(n.Pos()).String()
				if st.Get("required") == "true" {
					s.Required[name] = true
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || len(n.Args) != 1 {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok || imports[x.Name] != "os" || (sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv") {
				return true
			}
			if name, ok := resolve(n.Args[0]); ok {
				s.Read[name] = fset.Position(n.Pos()).String()
			}
		}
		return true
	})
}

// checkEnv reports every name in set that binary does not read, and every variable the binary
// requires that set lacks. where names the manifest and object for the message.
func checkEnv(t *testing.T, binary, where string, set []string) {
	t.Helper()
	env, ok := checkEnvRead(t, binary, where, set)
	if !ok {
		return
	}
	have := map[string]bool{}
	for _, name := range set {
		have[name] = true
	}
	for name := range env.Required {
		if !have[name] {
			t.Errorf("%s does not set %s, which %s requires", where, name, binary)
		}
	}
}

// goRuntimeEnv are the variables the Go runtime of every binary reads itself (the manifests tune the
// garbage collector with them: TestKubernetesGoRuntimeFitsItsLimit).
var goRuntimeEnv = map[string]bool{"GOGC": true, "GOMEMLIMIT": true}

// checkEnvRead fails when set holds a variable binary never reads (the Go runtime's own aside); it
// returns what binary reads.
func checkEnvRead(t *testing.T, binary, where string, set []string) (envSet, bool) {
	t.Helper()
	env, ok := binaryEnv(t)[binary]
	if !ok {
		t.Errorf("%s: unknown ConfigSync binary %q", where, binary)
		return env, false
	}
	for _, name := range set {
		if goRuntimeEnv[name] {
			continue
		}
		if _, ok := env.Read[name]; !ok {
			t.Errorf("%s sets %s, which %s never reads (no env tag or os.Getenv in its packages)", where, name, binary)
		}
	}
	return env, true
}

func TestEnvScanFindsPlatformVariables(t *testing.T) {
	// A sanity check of the scanner itself, on variables that exist as long as libs/platform does.
	env := binaryEnv(t)
	for _, svc := range []string{"config-api", "resolver", "credential", "ack-ingest"} {
		for _, name := range []string{"DATABASE_URL", "NATS_URL", "HTTP_ADDR", "LOG_LEVEL"} {
			if _, ok := env[svc].Read[name]; !ok {
				t.Errorf("scanner: %s should read %s", svc, name)
			}
		}
		if !env[svc].Required["DATABASE_URL"] {
			t.Errorf("scanner: %s should require DATABASE_URL", svc)
		}
	}
	if _, ok := env["delivery"].Read["DATABASE_URL"]; ok {
		t.Error("scanner: delivery links no database package, yet DATABASE_URL was attributed to it")
	}
	if _, ok := env["cfgctl"].Read["CONFIGSYNC_API_URL"]; !ok {
		t.Error("scanner: cfgctl should read CONFIGSYNC_API_URL (os.Getenv)")
	}
}
