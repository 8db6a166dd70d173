package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// The shipped Exec profiles against the real gateway: every shape of the
// shipped library runs under the shipped limits, no shape runs code a
// hostile working tree planted, and every argument that names a path is
// held against the grants on every backend.

// profileDeployment is a gateway running the shipped policy library as it
// ships, with two principals added to its data: agent-full on the shipped
// passive profile and agent-narrow on the shipped full profile, both over
// /usr (read-only, as shipped) and a workspace (read-write, so that code a
// plant manages to run could leave its marker there).
type profileDeployment struct {
	*deployment
	ws string
}

func newProfileDeployment(t *testing.T, backend string) *profileDeployment {
	t.Helper()
	d := newDeploymentWith(t, storeSQLite, backend)
	p := &profileDeployment{deployment: d, ws: filepath.Join(d.dir, "ws")}
	if err := os.MkdirAll(p.ws, 0o755); err != nil {
		t.Fatal(err)
	}
	// The shipped library, as shipped (its Rego tests left out).
	if err := os.RemoveAll(d.bundleDir); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(repoRoot, "policies", "bundle")
	err := filepath.WalkDir(src, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		dst := filepath.Join(d.bundleDir, rel)
		if e.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if strings.HasSuffix(path, "_test.rego") || rel == "data.json" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	data := shippedData(t)
	ws := []map[string]string{{"path": p.ws, "mode": "rw"}}
	cfg := data["portcullis"].(map[string]any)["config"].(map[string]any)
	cfg["principals"] = map[string]any{
		agentFull:   map[string]any{"tools": map[string]any{"Exec": map[string]any{"fs_add": ws}, "code.run": map[string]any{"fs": ws}}},
		agentNarrow: map[string]any{"tools": map[string]any{"Exec": map[string]any{"profile": "full", "fs_add": ws}}},
	}
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), data)
	return p
}

// shippedData is policies/bundle/data.json, decoded.
func shippedData(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "policies", "bundle", "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	return data
}

// shippedShapeIDs are the rule ids of every shape of a shipped profile,
// named the way the library names them (exec.shape.PROGRAM[.PREFIX...]).
func shippedShapeIDs(t *testing.T, profile string) []string {
	t.Helper()
	cfg := shippedData(t)["portcullis"].(map[string]any)["config"].(map[string]any)
	prof := cfg["exec"].(map[string]any)["profiles"].(map[string]any)[profile].(map[string]any)
	programs, _ := prof["programs"].(map[string]any)
	seen := map[string]bool{}
	for prog, shapes := range programs {
		for _, s := range shapes.([]any) {
			parts := []string{"exec.shape", prog}
			if prog == "*" {
				parts[1] = "any"
			}
			if pre, ok := s.(map[string]any)["prefix"].([]any); ok {
				for _, a := range pre {
					parts = append(parts, a.(string))
				}
			}
			seen[strings.Join(parts, ".")] = true
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// installed is the first of paths that exists, "" when none does.
func installed(paths ...string) string {
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

// execIn is an Exec tool-call body with a working directory.
func execIn(cwd string, argv ...string) map[string]any {
	in := map[string]any{"argv": argv}
	if cwd != "" {
		in["cwd"] = cwd
	}
	return map[string]any{"tool": "Exec", "input": in}
}

// gitHost runs git on the host to build fixtures, with the user's and the
// system's config out of the way.
func gitHost(t *testing.T, dir string, args ...string) {
	t.Helper()
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@example.com", "GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@example.com"}
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "Text file busy") {
		// A script just written can be held open for writing by a child
		// that another test forked at that moment (until it execs).
		time.Sleep(200 * time.Millisecond)
		cmd = exec.Command(cmd.Path, cmd.Args[1:]...)
		cmd.Dir, cmd.Env = dir, env
		out, err = cmd.CombinedOutput()
	}
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// cleanTree is a working tree a well-behaved agent would have: a Python
// file, a Go module without dependencies, a git repository with a change,
// a text file.
func cleanTree(t *testing.T, dir string) {
	t.Helper()
	for name, content := range map[string]string{
		"a.py":       "def f(x):\n    return x + 1\n",
		"notes.txt":  "one\ntwo\nthree\n",
		"m/go.mod":   "module example.com/m\n\ngo 1.22\n",
		"m/m.go":     "package m\n\n// F adds one.\nfunc F(x int) int { return x + 1 }\n",
		"repo/a.txt": "first\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, []byte(content))
	}
	repo := filepath.Join(dir, "repo")
	gitHost(t, repo, "init", "-q", ".")
	gitHost(t, repo, "add", "a.txt")
	gitHost(t, repo, "commit", "-qm", "first")
	writeFile(t, filepath.Join(repo, "a.txt"), []byte("first\nsecond\n"))
}

// shapeRun is one shipped shape run as an agent would: argv with argv[0]
// found on this machine, in cwd (relative to the clean tree).
type shapeRun struct {
	id   string
	prog []string // candidate paths of argv[0]
	args []string
	cwd  string
}

var (
	pythonPaths = []string{"/usr/bin/python3", "/usr/local/bin/python3"}
	goPaths     = []string{"/usr/local/go/bin/go", "/usr/lib/go/bin/go"}
	gofmtPaths  = []string{"/usr/local/go/bin/gofmt", "/usr/lib/go/bin/gofmt"}
	gitPaths    = []string{"/usr/bin/git"}
)

func binPaths(name string) []string { return []string{"/usr/bin/" + name, "/usr/local/bin/" + name} }

var passiveRuns = []shapeRun{
	{"exec.shape.python3.--version", pythonPaths, []string{"--version"}, ""},
	{"exec.shape.python3.-V", pythonPaths, []string{"-V"}, ""},
	{"exec.shape.python3.-m.py_compile", pythonPaths, []string{"-m", "py_compile", "a.py"}, "."},
	{"exec.shape.node.--version", binPaths("node"), []string{"--version"}, "."},
	{"exec.shape.node.-v", binPaths("node"), []string{"-v"}, "."},
	{"exec.shape.npm.--version", binPaths("npm"), []string{"--version"}, "."},
	{"exec.shape.ruby.--version", binPaths("ruby"), []string{"--version"}, "."},
	{"exec.shape.ruby.-v", binPaths("ruby"), []string{"-v"}, "."},
	{"exec.shape.go.version", goPaths, []string{"version"}, "m"},
	{"exec.shape.go.vet", goPaths, []string{"vet", "./..."}, "m"},
	{"exec.shape.gofmt", gofmtPaths, []string{"-l", "-d", "m.go"}, "m"},
	{"exec.shape.ruff.--version", binPaths("ruff"), []string{"--version"}, "."},
	{"exec.shape.ruff.check", binPaths("ruff"), []string{"check", "a.py"}, "."},
	{"exec.shape.mypy.--version", binPaths("mypy"), []string{"--version"}, "."},
	{"exec.shape.mypy", binPaths("mypy"), []string{"a.py"}, "."},
	{"exec.shape.pyflakes.--version", binPaths("pyflakes"), []string{"--version"}, "."},
	{"exec.shape.pyflakes", binPaths("pyflakes"), []string{"a.py"}, "."},
	{"exec.shape.ls.--version", binPaths("ls"), []string{"--version"}, ""},
	{"exec.shape.ls", binPaths("ls"), []string{"-la", "."}, "."},
	{"exec.shape.cat.--version", binPaths("cat"), []string{"--version"}, ""},
	{"exec.shape.cat", binPaths("cat"), []string{"-n", "notes.txt"}, "."},
	{"exec.shape.head.--version", binPaths("head"), []string{"--version"}, ""},
	{"exec.shape.head", binPaths("head"), []string{"-n", "2", "notes.txt"}, "."},
	{"exec.shape.tail.--version", binPaths("tail"), []string{"--version"}, ""},
	{"exec.shape.tail", binPaths("tail"), []string{"-n", "1", "notes.txt"}, "."},
	{"exec.shape.wc.--version", binPaths("wc"), []string{"--version"}, ""},
	{"exec.shape.wc", binPaths("wc"), []string{"-l", "notes.txt"}, "."},
	{"exec.shape.echo", binPaths("echo"), []string{"hi", "/etc/shadow"}, ""},
	{"exec.shape.uname.--version", binPaths("uname"), []string{"--version"}, ""},
	{"exec.shape.uname", binPaths("uname"), []string{"-a"}, ""},
	{"exec.shape.pwd", binPaths("pwd"), nil, "."},
	{"exec.shape.true", binPaths("true"), nil, ""},
	{"exec.shape.git.--version", gitPaths, []string{"--version"}, ""},
	{"exec.shape.git.status", gitPaths, []string{"status", "--short"}, "repo"},
	{"exec.shape.git.log", gitPaths, []string{"log", "--oneline", "-n", "5"}, "repo"},
	{"exec.shape.git.diff", gitPaths, []string{"diff", "--no-ext-diff", "--no-textconv", "--stat"}, "repo"},
}

// TestExecShippedShapesUnderShippedLimits runs every shape of the shipped
// passive profile, and a set of ordinary workloads under the full profile
// and code.run, on bwrap under the shipped limits (512 MiB memory, the
// timeout as CPU time), and expects each to succeed: the limits bound
// memory, not address space, so the Go toolchain, Node and Deno start. A
// shape whose program is not installed here is skipped by name (the Rego
// tests cover its decision); one that is installed must run.
func TestExecShippedShapesUnderShippedLimits(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	p := newProfileDeployment(t, "bwrap")
	tree := filepath.Join(p.ws, "clean")
	cleanTree(t, tree)
	g := startVariant(t, p.deployment)

	covered := map[string]bool{}
	for _, r := range passiveRuns {
		covered[r.id] = true
	}
	for _, id := range shippedShapeIDs(t, "passive") {
		if !covered[id] {
			t.Errorf("shipped shape %s has no end-to-end run in passiveRuns", id)
		}
	}
	if len(shippedShapeIDs(t, "full")) != 0 {
		t.Error("the full profile grew shapes; give them runs here")
	}

	var memoryLimit string
	for _, r := range passiveRuns {
		t.Run("passive/"+r.id, func(t *testing.T) {
			prog := installed(r.prog...)
			if prog == "" {
				t.Skipf("%v not installed here; %s is covered by the Rego tests only", r.prog, r.id)
			}
			cwd := ""
			if r.cwd != "" {
				cwd = filepath.Join(tree, r.cwd)
			}
			res := g.call(t, p.keys[agentFull], execIn(cwd, append([]string{prog}, r.args...)...))
			if res.status != http.StatusOK || !res.Output.Success {
				t.Fatalf("%s under the shipped limits: %s", r.id, res.response)
			}
			rc := g.waitReceipt(t, res.ReceiptID, 10*time.Second, func(rc receipt) bool { return rc.status() != "pending" })
			if !strings.Contains(rc.raw, `"`+r.id+`"`) {
				t.Errorf("receipt does not name shape %s:\n%s", r.id, rc.raw)
			}
			var scope struct {
				Scope struct {
					Limits      map[string]any `json:"limits"`
					MemoryLimit string         `json:"memory_limit"`
				} `json:"scope"`
			}
			_ = json.Unmarshal([]byte(rc.raw), &scope)
			if scope.Scope.Limits["memory_bytes"] != float64(512<<20) || scope.Scope.Limits["cpu_seconds"] != float64(60) {
				t.Errorf("scope limits %v, want the shipped 512 MiB and cpu_seconds = timeout 60", scope.Scope.Limits)
			}
			memoryLimit = scope.Scope.MemoryLimit
			if memoryLimit != "cgroup" && memoryLimit != "rlimit_data" {
				t.Errorf("scope memory_limit %q, want cgroup or rlimit_data", memoryLimit)
			}
		})
	}

	// The full profile runs anything: ordinary workloads must survive the
	// same limits.
	full := []struct {
		name string
		prog []string
		args []string
		cwd  string
	}{
		{"go version", goPaths, []string{"version"}, "m"},
		{"go vet", goPaths, []string{"vet", "./..."}, "m"},
		{"python script", pythonPaths, []string{"-c", "import json; print(json.dumps({'ok': True}))"}, "."},
		{"node script", binPaths("node"), []string{"-e", "console.log(JSON.stringify({ok: true}))"}, "."},
		{"shell pipeline", []string{"/bin/sh"}, []string{"-c", "seq 1 1000 | sort -n | tail -1"}, "."},
	}
	for _, w := range full {
		t.Run("full/"+w.name, func(t *testing.T) {
			prog := installed(w.prog...)
			if prog == "" {
				t.Skipf("%v not installed here", w.prog)
			}
			res := g.call(t, p.keys[agentNarrow], execIn(filepath.Join(tree, w.cwd), append([]string{prog}, w.args...)...))
			if res.status != http.StatusOK || !res.Output.Success {
				t.Fatalf("%s under the shipped limits: %s", w.name, res.response)
			}
		})
	}

	t.Run("code.run/deno", func(t *testing.T) {
		if os.Getenv("PORTCULLIS_DENO") == "" {
			if os.Getenv("PORTCULLIS_REQUIRE_DENO") == "1" {
				t.Fatal("PORTCULLIS_REQUIRE_DENO=1 but PORTCULLIS_DENO is not set")
			}
			t.Skip("no Deno (set PORTCULLIS_DENO)")
		}
		res := g.call(t, p.keys[agentFull], map[string]any{"tool": "code.run", "input": map[string]any{"code": "const a = new Array(1e6).fill(1); console.log(a.length)"}})
		if res.status != http.StatusOK || !res.Output.Success {
			t.Fatalf("code.run under the shipped limits: %s", res.response)
		}
	})
	t.Logf("memory_bytes enforced by %s", memoryLimit)
}

// plant is a hostile working tree for one profile entry: files that would
// make the entry run code (or fetch a toolchain) if it were not hardened.
type plant struct {
	name  string
	runs  []shapeRun
	setup func(t *testing.T, dir string)
	// control: the same argv under the full profile, which forces
	// nothing, shows that the plant works (markers appear, or stderr
	// matches controlOut). False where no tree-borne attack on the
	// program is known: the run then guards against a regression only.
	control    bool
	controlOut *regexp.Regexp
	// hardenedOut must match the hardened run's stderr, when set.
	hardenedOut *regexp.Regexp
	// mustSucceed: the hardened run must exit 0 in the hostile tree.
	mustSucceed bool
}

// markerScript is Python that leaves MARK.<vector> in the plant's dir.
func markerPy(dir, vector string) string {
	return fmt.Sprintf("open(%q, 'w').write('ran')\n", filepath.Join(dir, "MARK."+vector))
}

// markerSh is a shell script that leaves MARK.<vector> in dir.
func markerSh(t *testing.T, dir, name, vector string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\ntouch "+filepath.Join(dir, "MARK."+vector)+"\ncat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// markers lists the MARK.* files in dir.
func markers(dir string) []string {
	ms, _ := filepath.Glob(filepath.Join(dir, "MARK.*"))
	for i := range ms {
		ms[i] = filepath.Base(ms[i])
	}
	return ms
}

// plantPython puts modules Python would import from the working tree
// without -I: the module -m names, site hooks, and a .pth file.
func plantPython(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "py_compile.py"), []byte(markerPy(dir, "py_compile")))
	writeFile(t, filepath.Join(dir, "sitecustomize.py"), []byte(markerPy(dir, "sitecustomize")))
	writeFile(t, filepath.Join(dir, "usercustomize.py"), []byte(markerPy(dir, "usercustomize")))
	writeFile(t, filepath.Join(dir, "evil.pth"), []byte("import os; "+strings.TrimSpace(markerPy(dir, "pth"))+"\n"))
	writeFile(t, filepath.Join(dir, "a.py"), []byte("x = 1\n"))
}

// plantGit makes dir a repository whose own configuration runs commands:
// a clean filter on every file (git status and diff run it), an fsmonitor
// hook, hooks, gpg.program with log.showSignature and a signed commit
// (git log runs it), a textconv and external diff driver, a pager, and
// the same again in a bare repository git would discover in a subdir.
func plantGit(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "a.txt"), []byte("first\n"))
	gitHost(t, dir, "init", "-q", ".")
	gitHost(t, dir, "add", "a.txt")
	signer := filepath.Join(dir, ".signer.sh")
	// The stand-in reads what git gives it to sign: exiting before git wrote
	// it all fails the write (EPIPE) and with it the commit.
	writeExecutable(t, signer, []byte("#!/bin/sh\ncat >/dev/null\necho '[GNUPG:] SIG_CREATED D 1 8 00 1 X' >&2\nprintf -- '-----BEGIN PGP SIGNATURE-----\\n\\nabc\\n-----END PGP SIGNATURE-----\\n'\n"))
	gitHost(t, dir, "-c", "gpg.program="+signer, "commit", "-S", "-qm", "signed")
	if err := os.Remove(signer); err != nil {
		t.Fatal(err)
	}
	hooks := filepath.Join(dir, "evilhooks")
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"post-index-change", "pre-commit", "post-checkout", "reference-transaction", "fsmonitor-watchman"} {
		markerSh(t, hooks, h, "hook-"+h)
	}
	for _, h := range []string{"post-index-change", "reference-transaction"} {
		markerSh(t, filepath.Join(dir, ".git", "hooks"), h, "githook-"+h)
	}
	cfg := fmt.Sprintf(`
[core]
	fsmonitor = %s
	hooksPath = %s
	pager = %s
[filter "x"]
	clean = %s
	smudge = %s
[diff "x"]
	textconv = %s
	command = %s
[diff]
	external = %s
[log]
	showSignature = true
[gpg]
	program = %s
[pager]
	status = %s
	log = %s
	diff = %s
`, markerSh(t, dir, ".fsmonitor.sh", "fsmonitor"), hooks, markerSh(t, dir, ".pager.sh", "pager"),
		markerSh(t, dir, ".clean.sh", "filter"), markerSh(t, dir, ".smudge.sh", "smudge"),
		markerSh(t, dir, ".textconv.sh", "textconv"), markerSh(t, dir, ".extdiff.sh", "diffcommand"),
		markerSh(t, dir, ".external.sh", "external"), markerSh(t, dir, ".gpg.sh", "gpg"),
		markerSh(t, dir, ".pst.sh", "pager-status"), markerSh(t, dir, ".plog.sh", "pager-log"), markerSh(t, dir, ".pdiff.sh", "pager-diff"))
	f, err := os.OpenFile(filepath.Join(dir, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(cfg); err != nil {
		t.Fatal(err)
	}
	f.Close()
	writeFile(t, filepath.Join(dir, ".gitattributes"), []byte("* filter=x diff=x\n"))
	// A change of the same size and a new mtime: git cannot tell from
	// the stat data and must hash the file, running the clean filter.
	writeFile(t, filepath.Join(dir, "a.txt"), []byte("FIRST\n"))
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "a.txt"), later, later); err != nil {
		t.Fatal(err)
	}
}

// plantGo is a module that asks for a toolchain this machine does not
// have (go.mod toolchain and go lines, go.work): without GOTOOLCHAIN=local
// the go command downloads and runs another Go.
func plantGo(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "go.mod"), []byte("module example.com/evil\n\ngo 1.99\n\ntoolchain go1.99.0\n"))
	writeFile(t, filepath.Join(dir, "go.work"), []byte("go 1.99\n\ntoolchain go1.99.0\n\nuse .\n"))
	writeFile(t, filepath.Join(dir, "m.go"), []byte("package m\n\nfunc F() int { return 1 }\n"))
}

// plantNode leaves what Node and npm could read from a project: .npmrc
// settings that name scripts, package.json scripts, a node config file.
func plantNode(t *testing.T, dir string) {
	t.Helper()
	evil := filepath.Join(dir, "evil.js")
	writeFile(t, evil, []byte(fmt.Sprintf("require('fs').writeFileSync(%q, 'ran')\n", filepath.Join(dir, "MARK.node"))))
	writeFile(t, filepath.Join(dir, ".npmrc"), []byte("onload-script="+evil+"\nnode-options=--require "+evil+"\n"))
	writeFile(t, filepath.Join(dir, "package.json"), []byte(`{"name":"x","version":"1.0.0","scripts":{"preversion":"node evil.js","version":"node evil.js","prepare":"node evil.js"}}`))
	writeFile(t, filepath.Join(dir, "node.config.json"), []byte(`{"nodeOptions":{"require":["./evil.js"]}}`))
}

// plantAll is every plant at once, for programs that read no project
// configuration at all: whatever they might start reading, it is there.
func plantAll(t *testing.T, dir string) {
	t.Helper()
	plantPython(t, dir)
	plantNode(t, dir)
	writeFile(t, filepath.Join(dir, ".editorconfig"), []byte("root = true\n"))
	writeFile(t, filepath.Join(dir, "notes.txt"), []byte("one\ntwo\n"))
	writeFile(t, filepath.Join(dir, "m.go"), []byte("package m\n"))
}

func runsOf(ids ...string) []shapeRun {
	var out []shapeRun
	for _, r := range passiveRuns {
		if slices.Contains(ids, r.id) {
			r.cwd = "."
			out = append(out, r)
		}
	}
	return out
}

// TestExecPlantedFiles: for every entry of the shipped passive profile, a
// working tree planted with what would make the program run code (or fetch
// another toolchain) does not: the planted code's marker files stay absent.
// Where a tree-borne attack on the program is known, the same argv under
// the full profile (no hardening) is run as the control and must trip it,
// so the plant is proven live and the hardening is what stops it.
func TestExecPlantedFiles(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	p := newProfileDeployment(t, "bwrap")
	g := startVariant(t, p.deployment)

	downloading := regexp.MustCompile(`downloading go1\.99`)
	plants := []plant{
		{name: "python py_compile", runs: runsOf("exec.shape.python3.-m.py_compile"), setup: plantPython, control: true, mustSucceed: true},
		{name: "python version", runs: runsOf("exec.shape.python3.--version", "exec.shape.python3.-V"), setup: plantPython, mustSucceed: true},
		{name: "git status", runs: runsOf("exec.shape.git.status"), setup: plantGit, control: true},
		{name: "git diff", runs: runsOf("exec.shape.git.diff"), setup: plantGit, control: true},
		{name: "git log", runs: []shapeRun{{"exec.shape.git.log", gitPaths, []string{"log", "--format=%H %G?", "-n", "1"}, "."}}, setup: plantGit, control: true},
		{name: "git version", runs: runsOf("exec.shape.git.--version"), setup: plantGit, mustSucceed: true},
		{name: "go version", runs: runsOf("exec.shape.go.version"), setup: plantGo, control: true, controlOut: downloading, mustSucceed: true},
		{name: "go vet", runs: runsOf("exec.shape.go.vet"), setup: plantGo, control: true, controlOut: downloading, hardenedOut: regexp.MustCompile(`GOTOOLCHAIN=local`)},
		{name: "gofmt", runs: []shapeRun{{"exec.shape.gofmt", gofmtPaths, []string{"-l", "m.go"}, "."}}, setup: plantAll, mustSucceed: true},
		{name: "node", runs: runsOf("exec.shape.node.--version", "exec.shape.node.-v"), setup: plantNode, mustSucceed: true},
		{name: "npm", runs: runsOf("exec.shape.npm.--version"), setup: plantNode, mustSucceed: true},
		{name: "ruby", runs: runsOf("exec.shape.ruby.--version", "exec.shape.ruby.-v"), setup: plantAll, mustSucceed: true},
		{name: "ruff", runs: runsOf("exec.shape.ruff.--version", "exec.shape.ruff.check"), setup: plantAll, mustSucceed: true},
		{name: "mypy", runs: runsOf("exec.shape.mypy.--version", "exec.shape.mypy"), setup: plantAll},
		{name: "pyflakes", runs: runsOf("exec.shape.pyflakes.--version", "exec.shape.pyflakes"), setup: plantAll},
		{name: "coreutils", runs: []shapeRun{
			{"exec.shape.ls", binPaths("ls"), []string{"-la"}, "."},
			{"exec.shape.cat", binPaths("cat"), []string{"notes.txt"}, "."},
			{"exec.shape.head", binPaths("head"), []string{"-n", "1", "notes.txt"}, "."},
			{"exec.shape.tail", binPaths("tail"), []string{"-n", "1", "notes.txt"}, "."},
			{"exec.shape.wc", binPaths("wc"), []string{"-l", "notes.txt"}, "."},
			{"exec.shape.echo", binPaths("echo"), []string{"hi"}, "."},
			{"exec.shape.uname", binPaths("uname"), []string{"-s"}, "."},
			{"exec.shape.pwd", binPaths("pwd"), nil, "."},
			{"exec.shape.true", binPaths("true"), nil, "."},
		}, setup: plantAll, mustSucceed: true},
	}
	planted := map[string]bool{}
	for _, pl := range plants {
		for _, r := range pl.runs {
			planted[r.id] = true
		}
	}
	for _, id := range shippedShapeIDs(t, "passive") {
		if !planted[id] && !strings.HasSuffix(id, ".--version") {
			t.Errorf("shipped shape %s has no planted-file run", id)
		}
	}

	for i, pl := range plants {
		t.Run(pl.name, func(t *testing.T) {
			if len(pl.runs) == 0 {
				t.Fatal("no runs")
			}
			for j, r := range pl.runs {
				prog := installed(r.prog...)
				if prog == "" {
					t.Logf("%v not installed here; %s is covered by the Rego tests only", r.prog, r.id)
					continue
				}
				dir := filepath.Join(p.ws, fmt.Sprintf("plant-%d-%d", i, j))
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				pl.setup(t, dir)
				argv := append([]string{prog}, r.args...)

				res := g.call(t, p.keys[agentFull], execIn(dir, argv...))
				if res.status != http.StatusOK {
					t.Fatalf("%s in a hostile tree: %s", r.id, res.response)
				}
				d := res.exec(t)
				if m := markers(dir); len(m) > 0 {
					t.Errorf("%s ran planted code: %v (stderr %q)", r.id, m, d.Stderr)
				}
				if pl.mustSucceed && !res.Output.Success {
					t.Errorf("%s failed in a hostile tree: exit %v stderr %q", r.id, d.ExitCode, d.Stderr)
				}
				if pl.hardenedOut != nil && !pl.hardenedOut.MatchString(d.Stderr) {
					t.Errorf("%s stderr %q does not match %s", r.id, d.Stderr, pl.hardenedOut)
				}
				if pl.controlOut != nil && pl.controlOut.MatchString(d.Stdout+d.Stderr) {
					t.Errorf("%s hardened run went for another toolchain: %q", r.id, d.Stderr)
				}
				if strings.Contains(r.id, "py_compile") {
					if _, err := os.Stat(filepath.Join(dir, "__pycache__")); err == nil {
						t.Errorf("py_compile wrote bytecode into the working tree")
					}
				}
				if !pl.control {
					continue
				}
				if strings.HasPrefix(r.id, "exec.shape.go.") && !goSwitchesToolchains(prog) {
					t.Logf("control skipped: this Go installation's go.env pins GOTOOLCHAIN=local, so even unhardened it never fetches the toolchain go.mod asks for")
					continue
				}
				ctl := g.call(t, p.keys[agentNarrow], execIn(dir, argv...))
				if ctl.status != http.StatusOK {
					t.Fatalf("control %s: %s", r.id, ctl.response)
				}
				cd := ctl.exec(t)
				switch {
				case pl.controlOut != nil:
					if !pl.controlOut.MatchString(cd.Stdout + cd.Stderr) {
						t.Errorf("control: unhardened %s did not take the bait (stderr %q); the plant proves nothing", r.id, cd.Stderr)
					}
				case len(markers(dir)) == 0:
					t.Errorf("control: unhardened %s ran no planted code (stderr %q); the plant proves nothing", r.id, cd.Stderr)
				default:
					t.Logf("control: unhardened %s ran %v", r.id, markers(dir))
				}
			}
		})
	}
}

// goSwitchesToolchains reports whether the go command at prog, left to its
// installation's defaults (GOROOT/go.env), follows a go.mod that asks for
// another toolchain (GOTOOLCHAIN auto, the default of Go's own releases).
func goSwitchesToolchains(prog string) bool {
	real, err := filepath.EvalSymlinks(prog)
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(real)), "go.env"))
	if err != nil {
		return true // no go.env: the built-in default, auto
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "GOTOOLCHAIN="); ok {
			return v != "local"
		}
	}
	return true
}

// TestExecPathArguments: on both backends, an argument the shipped
// profile names as a path is held against the grants before anything
// runs: a host file outside every grant, a symlink out of the grant, a
// secret-shaped file deep in the grant, an option-less git diff outside a
// repository (which reads any two files), are refused with fs_denied and a
// receipt that records nothing ran (backend none), in words that do not
// say whether the host file exists. The controls read a file in the grant.
func TestExecPathArguments(t *testing.T) {
	for _, backend := range []string{"process", "bwrap"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "bwrap" {
				requireBwrap(t)
			}
			t.Parallel()
			p := newProfileDeployment(t, backend)
			secret := "TOPSECRET-" + randHex(t, 8)
			outside := filepath.Join(p.dir, "outside")
			for _, dir := range []string{outside, filepath.Join(p.ws, "deep", "a", "b")} {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, filepath.Join(outside, "secret.txt"), []byte(secret))
			writeFile(t, filepath.Join(p.ws, "deep", "a", "b", ".env"), []byte("API_KEY="+secret))
			writeFile(t, filepath.Join(p.ws, "ok.txt"), []byte("fine\n"))
			for name, target := range map[string]string{"link": filepath.Join(outside, "secret.txt"), "passwd": "/etc/passwd", "dirlink": outside} {
				if err := os.Symlink(target, filepath.Join(p.ws, name)); err != nil {
					t.Fatal(err)
				}
			}
			g := startVariant(t, p.deployment)
			key := p.keys[agentFull]
			cat, head, git := installed(binPaths("cat")...), installed(binPaths("head")...), installed(gitPaths...)

			refused := []struct {
				name string
				argv []string
			}{
				{"cat /etc/shadow", []string{cat, "/etc/shadow"}},
				{"cat a missing host file", []string{cat, "/etc/portcullis-no-such-file"}},
				{"cat /etc/passwd", []string{cat, "/etc/passwd"}},
				{"symlink operand out of the grant", []string{cat, "link"}},
				{"symlink to /etc/passwd", []string{head, "-n", "1", "passwd"}},
				{"through a directory symlink", []string{cat, "dirlink/secret.txt"}},
				{"relative climb", []string{cat, "../outside/secret.txt"}},
				{".env deep in the grant", []string{cat, "deep/a/b/.env"}},
				{"git diff of host files", []string{git, "diff", "--no-ext-diff", "--no-textconv", "/etc/passwd", "ok.txt"}},
			}
			words := map[string]string{}
			for _, tt := range refused {
				t.Run(tt.name, func(t *testing.T) {
					res := g.call(t, key, execIn(p.ws, tt.argv...))
					wantStatus(t, res, http.StatusForbidden, "fs_denied")
					if strings.Contains(string(res.body), secret) || strings.Contains(string(res.body), outside) || strings.Contains(string(res.body), "root:") {
						t.Errorf("the refusal reveals what the path holds or resolves to:\n%s", res.response)
					}
					rc := g.checkReceipt(t, res, expectReceipt{principal: agentFull, decision: "deny", statuses: []string{"error"}, errorCode: "fs_denied", secrets: []string{secret}}, "", "")
					if rc.Outcome == nil || rc.Outcome.Backend != "none" || rc.Outcome.ExitCode != nil {
						t.Errorf("receipt outcome %+v, want nothing run (backend none, no exit code)\n%s", rc.Outcome, rc.raw)
					}
					if !strings.Contains(rc.raw, `"enforce.fs_denied"`) {
						t.Errorf("receipt does not name enforce.fs_denied:\n%s", rc.raw)
					}
					words[tt.name] = strings.Replace(res.Output.Error.Message, tt.argv[len(tt.argv)-1], "ARG", 1)
				})
			}
			if a, b := words["cat /etc/shadow"], words["cat a missing host file"]; a == "" || a != b {
				t.Errorf("the refusal of an existing host file and of a missing one differ:\n%q\n%q", a, b)
			}

			for _, argv := range [][]string{{cat, "ok.txt"}, {head, "-n", "1", filepath.Join(p.ws, "ok.txt")}} {
				res := g.call(t, key, execIn(p.ws, argv...))
				if res.status != http.StatusOK || !res.Output.Success || res.exec(t).Stdout != "fine\n" {
					t.Errorf("control %v: %s", argv, res.response)
				}
			}
		})
	}
}
