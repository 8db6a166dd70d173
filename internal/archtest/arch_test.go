package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/portcullis/portcullis/"

// allowed is the table of docs/architecture.md: for each package, the
// project packages it may import (an entry ending in "/..." admits the
// package and everything below it). Every package of the module must have
// a row, so a new package is placed deliberately. Tests may import more.
var allowed = map[string][]string{
	"wire": {},

	// Where calls run. Nothing here knows of tools, the gateway or evidence.
	"backends":          {"backends/sandbox"},
	"backends/sandbox":  {"wire"},
	"backends/cgroup":   {},
	"backends/egress":   {"wire"},
	"backends/process":  {"backends/cgroup", "backends/sandbox", "wire"},
	"backends/bwrap":    {"backends/cgroup", "backends/egress", "backends/process", "backends/sandbox", "wire"},
	"backends/seatbelt": {"backends/process", "backends/sandbox", "wire"},

	// The tools. A tool imports the contract, the runner interface and
	// what it runs on, never another tool.
	"tools":                      {"backends/sandbox", "wire"},
	"tools/internal/strictjson":  {"wire"},
	"tools/internal/inputschema": {"tools/internal/strictjson", "wire"},
	"tools/exec":                 {"tools", "tools/internal/...", "backends", "backends/process", "backends/sandbox", "wire"},
	"tools/fs":                   {"tools", "tools/internal/...", "tools/fs/...", "backends/sandbox", "wire"},
	"tools/fs/udiff":             {},
	"tools/httpget":              {"tools", "tools/internal/...", "backends/egress", "wire"},
	"tools/coderun":              {"tools", "tools/internal/...", "tools/coderun/...", "backends", "backends/egress", "backends/sandbox", "wire"},
	"tools/coderun/tsdecl":       {"wire"},
	"tools/readresult":           {"tools", "tools/internal/...", "evidence/results", "wire"},
	// Upstream MCP servers' tools: tools like the built-ins, over the
	// go-sdk client; the sandbox and the launch decision come from above.
	"upstream": {"tools", "backends/egress", "wire"},

	// Policy and evidence.
	"policies":                   {"wire"},
	"bundles":                    {"policies", "wire"},
	"migrations":                 {},
	"evidence":                   {"wire"},
	"evidence/internal/rowcodec": {"wire"},
	"evidence/internal/schema":   {"migrations"},
	"evidence/results":           {"evidence", "wire"},
	"evidence/postgres":          {"evidence", "evidence/internal/...", "migrations", "wire"},
	"evidence/sqlite":            {"evidence", "evidence/internal/...", "migrations", "wire"},
	"evidence/storetest":         {"evidence", "wire"},

	// The HTTP layer: it runs tools through the contract and never
	// touches a runner.
	"gateway":          {"gateway/...", "upstream", "tools", "tools/coderun/tsdecl", "tools/readresult", "evidence", "evidence/results", "wire"},
	"gateway/identity": {"wire"},
	"gateway/statedir": {"wire"},
	"gateway/ui":       {},

	// The binaries wire everything together.
	"cmd/gateway":                 {"..."},
	"cmd/gateway/internal/config": {"gateway/identity", "upstream"},
	"cmd/portcullis-exec-helper":  {"backends/process"},

	"sdk":               {"wire"},
	"examples/go":       {"sdk", "wire"},
	"internal/testutil": {},
	"internal/archtest": {},
	// deploy/dockerfile-check is a module of its own (the Dockerfile's
	// linter, run by scripts/test.sh); it imports nothing of the project.
	"deploy/dockerfile-check": {},
	"tests/bench":             {"..."},
}

// TestLayering reads every non-test Go file of the module and holds each
// package's project imports to the table: no upward or sideways arrow
// (a runner importing a tool, a tool importing another, the gateway
// importing a runner) can come in unnoticed.
func TestLayering(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		if pkg == "tests" {
			return nil // the end-to-end suite: test files only
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		if imports[pkg] == nil {
			imports[pkg] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if after, ok := strings.CutPrefix(p, module); ok {
				imports[pkg][after] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 20 {
		t.Fatalf("found only %d packages under %s: wrong root?", len(imports), root)
	}
	for pkg, imps := range imports {
		rules, ok := allowed[pkg]
		if !ok {
			t.Errorf("package %s has no row in the layering table (internal/archtest, docs/architecture.md): add one", pkg)
			continue
		}
		for imp := range imps {
			if !admits(rules, imp) {
				t.Errorf("%s imports %s, which its row does not allow (%v)", pkg, imp, rules)
			}
		}
	}
	for pkg := range allowed {
		if _, ok := imports[pkg]; !ok {
			t.Errorf("the layering table has a row for %s, which has no Go files: remove it", pkg)
		}
	}
}

func admits(rules []string, imp string) bool {
	return slices.ContainsFunc(rules, func(r string) bool {
		if r == "..." {
			return true
		}
		if base, ok := strings.CutSuffix(r, "/..."); ok {
			return imp == base || strings.HasPrefix(imp, base+"/")
		}
		return r == imp
	})
}
