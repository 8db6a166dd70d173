package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testutil"
	"github.com/portcullis/portcullis/wire"
)

// fsTools are the file tools under test.
var fsTools = []string{"fs.list", "fs.read", "fs.search", "fs.write", "fs.apply_patch"}

// fsEnv is a gateway whose policy (testdata/fs/fs.rego) grants the file
// tools over work/ (rw, @w) and ro/ (r, @ro); outside/ is never granted.
type fsEnv struct {
	g                 *gateway
	work, ro, outside string
}

const fsSecret = "TOP SECRET outside every grant\n"

func newFSEnv(t *testing.T) *fsEnv {
	t.Helper()
	d := newDeployment(t, storeSQLite)
	e := &fsEnv{work: filepath.Join(d.dir, "work"), ro: filepath.Join(d.dir, "ro"), outside: filepath.Join(d.dir, "outside")}
	for _, dir := range []string{e.work, filepath.Join(e.work, "sub"), e.ro, e.outside} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(e.work, "a.txt"), []byte("alpha\nbeta\ngamma\n"))
	writeFile(t, filepath.Join(e.work, "sub", "b.txt"), []byte("bee\n"))
	writeFile(t, filepath.Join(e.ro, "r.txt"), []byte("read only\n"))
	writeFile(t, filepath.Join(e.outside, "secret.txt"), []byte(fsSecret))
	for link, to := range map[string]string{"leak.txt": "../outside/secret.txt", "escape": "../outside"} {
		if err := os.Symlink(to, filepath.Join(e.work, link)); err != nil {
			t.Fatal(err)
		}
	}

	// Our own policy replaces the suite's default one in the bundle.
	if err := os.Remove(filepath.Join(d.bundleDir, "e2e.rego")); err != nil {
		t.Fatal(err)
	}
	rego, err := os.ReadFile(filepath.Join("testdata", "fs", "fs.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.bundleDir, "fs.rego"), rego)
	grants := []map[string]string{
		{"path": e.work, "mode": "rw", "alias": "@w"},
		{"path": e.ro, "mode": "r", "alias": "@ro"},
	}
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), map[string]any{"fs": map[string]any{"principals": map[string]any{
		agentFull:   map[string]any{"tools": fsTools, "fs_grants": grants},
		agentNarrow: map[string]any{"tools": fsTools, "fs_grants": grants, "limits": map[string]any{"fsize_bytes": 1000, "max_output_bytes": 1024}},
	}}})
	e.g = d.start(t)
	return e
}

func (e *fsEnv) call(t testing.TB, key, tool string, input any) *toolCallResult {
	t.Helper()
	return e.g.call(t, e.g.dep.keys[key], map[string]any{"tool": tool, "input": input})
}

func wantFS(t testing.TB, res *toolCallResult, status int, code string) {
	t.Helper()
	if res.status != status || res.errCode() != code {
		t.Fatalf("got HTTP %d code %q, want %d %q\n%s", res.status, res.errCode(), status, code, res.response)
	}
	if code != "" && res.Output.Error.Details["field"] == nil && code != "permission_denied" {
		t.Errorf("error details lack field\n%s", res.response)
	}
}

func (e *fsEnv) outsideUnchanged(t testing.TB) {
	t.Helper()
	ents, err := os.ReadDir(e.outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("outside/ has %d entries, want only secret.txt: something was written outside the grants", len(ents))
	}
	if b, _ := os.ReadFile(filepath.Join(e.outside, "secret.txt")); string(b) != fsSecret {
		t.Errorf("outside/secret.txt changed: %q", b)
	}
}

func noTempFiles(t testing.TB, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".portcullis-") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

func TestFSTools(t *testing.T) {
	t.Parallel()
	e := newFSEnv(t)
	t.Run("tools listed", func(t *testing.T) {
		r := e.g.do(t, http.MethodGet, "/v1/tools", e.g.dep.keys[agentFull], nil)
		for _, name := range fsTools { // listed by model-safe name, mapped back in names
			safe := wire.ModelSafeName(name)
			if !strings.Contains(string(r.body), `"name":"`+safe+`"`) || !strings.Contains(string(r.body), `"`+safe+`":"`+name+`"`) {
				t.Errorf("GET /v1/tools lacks %s as %s\n%s", name, safe, r)
			}
		}
	})
	t.Run("success shapes", func(t *testing.T) { testFSSuccess(t, e) })
	t.Run("errors", func(t *testing.T) { testFSErrors(t, e) })
	t.Run("limits", func(t *testing.T) { testFSLimits(t, e) })
	t.Run("receipts hold no content", func(t *testing.T) { testFSReceipts(t, e) })
	t.Run("symlink swap race", func(t *testing.T) { testFSSwapRace(t, e) })
	t.Run("atomic writes", func(t *testing.T) { testFSAtomic(t, e) })
	e.outsideUnchanged(t)
	noTempFiles(t, e.g.dep.dir)
}

func testFSSuccess(t *testing.T, e *fsEnv) {
	res := e.call(t, agentFull, "fs.write", map[string]any{"path": "@w/new/n.txt", "content": "one\ntwo\n", "ifMatchSha256": ""})
	wantFS(t, res, 200, "")
	var wd struct {
		Path         string `json:"path"`
		BytesWritten int    `json:"bytesWritten"`
		SHA256After  string `json:"sha256After"`
	}
	mustDecode(t, res, &wd)
	if wd.BytesWritten != 8 || wd.SHA256After != sha256Hex("one\ntwo\n") || wd.Path != "@w/new/n.txt" {
		t.Errorf("fs.write data: %+v", wd)
	}
	if res.Output.Metadata["backend"] != "fs" {
		t.Errorf("metadata.backend = %v", res.Output.Metadata["backend"])
	}

	res = e.call(t, agentFull, "fs.read", map[string]any{"path": e.work + "/new/n.txt", "startLine": 2, "endLine": 2})
	wantFS(t, res, 200, "")
	var rd struct {
		Content   *string `json:"content"`
		Bytes     int64   `json:"bytes"`
		SHA256    string  `json:"sha256"`
		Truncated bool    `json:"truncated"`
		Binary    bool    `json:"binary"`
	}
	mustDecode(t, res, &rd)
	if rd.Content == nil || *rd.Content != "two\n" || rd.Bytes != 8 || rd.SHA256 != sha256Hex("one\ntwo\n") || rd.Truncated || rd.Binary {
		t.Errorf("fs.read data: %s", res.Output.Data)
	}

	writeFile(t, filepath.Join(e.work, "bin.dat"), []byte("\x7fELF\x00\x00binary"))
	res = e.call(t, agentFull, "fs.read", map[string]any{"path": "@w/bin.dat"})
	wantFS(t, res, 200, "")
	mustDecode(t, res, &rd)
	if !rd.Binary || rd.Content != nil {
		t.Errorf("binary file: %s", res.Output.Data)
	}

	res = e.call(t, agentFull, "fs.list", map[string]any{"path": "@w"})
	wantFS(t, res, 200, "")
	var ld struct {
		Entries []struct {
			Name string `json:"name"`
			Type string `json:"type"`
			Size int64  `json:"size"`
		} `json:"entries"`
		Truncated bool `json:"truncated"`
	}
	mustDecode(t, res, &ld)
	var names []string
	for _, en := range ld.Entries {
		names = append(names, en.Name+":"+en.Type)
	}
	if got := strings.Join(names, ","); got != "a.txt:file,bin.dat:file,new:dir,sub:dir" {
		t.Errorf("fs.list entries = %s (symlinks and hidden entries must be skipped)", got)
	}

	res = e.call(t, agentFull, "fs.search", map[string]any{"path": "@w", "pattern": "/^B/i", "after": 1})
	wantFS(t, res, 200, "")
	var sd struct {
		Matches []struct {
			Path  string   `json:"path"`
			Line  int      `json:"line"`
			Text  string   `json:"text"`
			After []string `json:"after"`
		} `json:"matches"`
		Stats struct {
			FilesScanned int `json:"filesScanned"`
		} `json:"stats"`
	}
	mustDecode(t, res, &sd)
	if len(sd.Matches) != 2 || sd.Matches[0].Path != "@w/a.txt" || sd.Matches[0].Line != 2 || sd.Matches[0].After[0] != "gamma" || sd.Matches[1].Text != "bee" {
		t.Errorf("fs.search data: %s", res.Output.Data)
	}
	if strings.Contains(string(res.Output.Data), "TOP SECRET") {
		t.Errorf("search followed a symlink out of the grant: %s", res.Output.Data)
	}

	patch := "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n--- a/sub/b.txt\n+++ b/sub/b.txt\n@@ -1 +1 @@\n-bee\n+BEE\n"
	res = e.call(t, agentFull, "fs.apply_patch", map[string]any{"path": "@w", "patch": patch,
		"ifMatchSha256": map[string]string{"a.txt": sha256Hex("alpha\nbeta\ngamma\n")}})
	wantFS(t, res, 200, "")
	if got := readFileT(t, filepath.Join(e.work, "a.txt")); got != "alpha\nBETA\ngamma\n" {
		t.Errorf("a.txt after patch: %q", got)
	}
	writeFile(t, filepath.Join(e.work, "doc.md"), []byte("---\ntitle: Old\n---\nBody\n"))
	res = e.call(t, agentFull, "fs.apply_patch", map[string]any{"path": "@w/doc.md", "updateFrontmatter": map[string]any{"title": "New", "draft": false}})
	wantFS(t, res, 200, "")
	if got := readFileT(t, filepath.Join(e.work, "doc.md")); got != "---\ntitle: New\ndraft: false\n---\nBody\n" {
		t.Errorf("doc.md after updateFrontmatter: %q", got)
	}

	// Seed 001's shape and operations, through the real gateway; invalid
	// YAML has its own code and names the line; values stay out of the receipt.
	writeFile(t, filepath.Join(e.work, "workflow.md"), []byte("---\nstepsCompleted: [plan]\n---\n# Run\n"))
	res = e.call(t, agentFull, "fs.apply_patch", map[string]any{"path": "@w/workflow.md", "patch": map[string]any{
		"operation": "updateFrontmatter", "ifMatchSha256": sha256Hex("---\nstepsCompleted: [plan]\n---\n# Run\n"),
		"update": map[string]any{"stepsCompleted.append": []string{"plan", "build"}, "variables.set": map[string]any{"ticket": "SECRET-VALUE-42"},
			"decisionLog.append": []any{map[string]any{"node": "build", "why": "tests pass"}}}}})
	wantFS(t, res, 200, "")
	if got, want := readFileT(t, filepath.Join(e.work, "workflow.md")),
		"---\nstepsCompleted: [plan, build]\ndecisionLog:\n  - node: build\n    why: tests pass\nvariables:\n  ticket: SECRET-VALUE-42\n---\n# Run\n"; got != want {
		t.Errorf("workflow.md after the seed-shaped update:\n%s\nwant:\n%s", got, want)
	}
	if rec := e.g.do(t, http.MethodGet, "/v1/receipts/"+res.ReceiptID, e.g.dep.keys[auditor], nil); rec.status != 200 || strings.Contains(string(rec.body), "SECRET-VALUE-42") {
		t.Errorf("receipt (HTTP %d) missing or holding a front-matter value:\n%s", rec.status, rec.body)
	}
	writeFile(t, filepath.Join(e.work, "broken.md"), []byte("---\ntitle: x\n  bad: [\n---\n"))
	res = e.call(t, agentFull, "fs.apply_patch", map[string]any{"path": "@w/broken.md", "patch": map[string]any{
		"operation": "updateFrontmatter", "update": map[string]any{"title": "y"}}})
	wantFS(t, res, 200, "invalid_frontmatter")
	if line := res.Output.Error.Details["line"]; fmt.Sprint(line) != "3" {
		t.Errorf("invalid_frontmatter names line %v, want 3: %s", line, res.response)
	}
}

func testFSErrors(t *testing.T, e *fsEnv) {
	for _, c := range []struct {
		name   string
		key    string
		tool   string
		input  map[string]any
		status int
		code   string
	}{
		{"traversal", agentFull, "fs.read", map[string]any{"path": "@w/../outside/secret.txt"}, 403, "sandbox_violation"},
		{"traversal absolute", agentFull, "fs.read", map[string]any{"path": e.work + "/../outside/secret.txt"}, 403, "sandbox_violation"},
		{"unknown alias", agentFull, "fs.read", map[string]any{"path": "@nope/a.txt"}, 403, "sandbox_violation"},
		{"absolute outside", agentFull, "fs.read", map[string]any{"path": e.outside + "/secret.txt"}, 403, "fs_denied"},
		{"NUL", agentFull, "fs.read", map[string]any{"path": "@w/a.txt\x00"}, 400, "invalid_input"},
		{"symlink escape read", agentFull, "fs.read", map[string]any{"path": "@w/leak.txt"}, 403, "sandbox_violation"},
		{"symlink escape list", agentFull, "fs.list", map[string]any{"path": "@w/escape"}, 403, "sandbox_violation"},
		{"symlink escape write", agentFull, "fs.write", map[string]any{"path": "@w/escape/planted.txt", "content": "x"}, 403, "sandbox_violation"},
		{"symlink escape overwrite", agentFull, "fs.write", map[string]any{"path": e.work + "/leak.txt", "content": "x"}, 403, "sandbox_violation"},
		{"symlink escape patch", agentFull, "fs.apply_patch", map[string]any{"patch": "--- a/@w/leak.txt\n+++ b/@w/leak.txt\n@@ -1 +1 @@\n-" + strings.TrimSuffix(fsSecret, "\n") + "\n+x\n"}, 403, "sandbox_violation"},
		{"read-only grant", agentFull, "fs.write", map[string]any{"path": "@ro/r.txt", "content": "x"}, 403, "fs_denied"},
		{"read-only grant patch", agentFull, "fs.apply_patch", map[string]any{"patch": "--- " + e.ro + "/r.txt\n+++ " + e.ro + "/r.txt\n@@ -1 +1 @@\n-read only\n+x\n"}, 403, "fs_denied"},
		{"missing file", agentFull, "fs.read", map[string]any{"path": "@w/missing.txt"}, 200, "not_found"},
		{"ifMatch mismatch", agentFull, "fs.write", map[string]any{"path": "@w/sub/b.txt", "content": "x", "ifMatchSha256": sha256Hex("other")}, 200, "precondition_failed"},
		{"patch does not apply", agentFull, "fs.apply_patch", map[string]any{"path": "@w", "patch": "--- a/sub/b.txt\n+++ b/sub/b.txt\n@@ -1 +1 @@\n-wasp\n+x\n"}, 200, "precondition_failed"},
		{"unknown field", agentFull, "fs.read", map[string]any{"path": "@w/a.txt", "lines": 3}, 400, "invalid_input"},
		{"policy denies by resolved name", agentFull, "fs.read", map[string]any{"path": "@w/id.key"}, 403, "permission_denied"},
		{"policy denies by resolved real path", agentFull, "fs.read", map[string]any{"path": e.work + "/keylink"}, 403, "permission_denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "policy denies by resolved real path" {
				// An innocent name whose real path is a .key file.
				writeFile(t, filepath.Join(e.work, "id.key"), []byte("k"))
				_ = os.Symlink("id.key", filepath.Join(e.work, "keylink"))
			}
			res := e.call(t, c.key, c.tool, c.input)
			wantFS(t, res, c.status, c.code)
			if strings.Contains(string(res.body), "TOP SECRET") {
				t.Errorf("answer leaks the outside file\n%s", res.response)
			}
			if res.ReceiptID == "" {
				t.Errorf("no receipt")
			}
		})
	}
	e.outsideUnchanged(t)
	if got := readFileT(t, filepath.Join(e.ro, "r.txt")); got != "read only\n" {
		t.Errorf("read-only file changed: %q", got)
	}
}

func testFSLimits(t *testing.T, e *fsEnv) {
	// Large file, default policy: truncated at 50 KiB with a hint, hash of the whole file.
	big := strings.Repeat("0123456789abcdef\n", 6000) // 102 KB
	writeFile(t, filepath.Join(e.work, "big.txt"), []byte(big))
	res := e.call(t, agentFull, "fs.read", map[string]any{"path": "@w/big.txt"})
	wantFS(t, res, 200, "")
	var rd struct {
		Content       string `json:"content"`
		SHA256        string `json:"sha256"`
		Truncated     bool   `json:"truncated"`
		NextStartLine int    `json:"nextStartLine"`
		Hint          string `json:"hint"`
	}
	mustDecode(t, res, &rd)
	if !rd.Truncated || len(rd.Content) > 50<<10 || len(rd.Content) < 50<<10-17 || rd.SHA256 != sha256Hex(big) || rd.NextStartLine == 0 || rd.Hint == "" {
		t.Errorf("large read: truncated=%v len=%d next=%d hint=%q", rd.Truncated, len(rd.Content), rd.NextStartLine, rd.Hint)
	}
	// agent-narrow: fsize_bytes 1000 bounds reads and writes.
	res = e.call(t, agentNarrow, "fs.read", map[string]any{"path": "@w/big.txt"})
	wantFS(t, res, 200, "read_limit")
	res = e.call(t, agentNarrow, "fs.write", map[string]any{"path": "@w/w.txt", "content": strings.Repeat("x", 1001)})
	wantFS(t, res, 413, "write_limit")
	if _, err := os.Stat(filepath.Join(e.work, "w.txt")); !os.IsNotExist(err) {
		t.Errorf("refused write created the file: %v", err)
	}
	res = e.call(t, agentFull, "fs.write", map[string]any{"path": "@w/w.txt", "content": strings.Repeat("x", 100<<10+1)})
	wantFS(t, res, 413, "write_limit")
}

func testFSReceipts(t *testing.T, e *fsEnv) {
	const body = "confidential body text 8d1f\n"
	res := e.call(t, agentFull, "fs.write", map[string]any{"path": "@w/conf.txt", "content": body})
	wantFS(t, res, 200, "")
	rc := e.g.waitReceipt(t, res.ReceiptID, 5*time.Second, func(r receipt) bool { return r.status() == "succeeded" })
	if strings.Contains(rc.raw, "confidential body") {
		t.Errorf("receipt holds the written content:\n%s", rc.raw)
	}
	if !strings.Contains(string(rc.Args), sha256Hex(body)) || rc.Tool != "fs.write" || rc.Outcome.Backend != "fs" {
		t.Errorf("receipt lacks the content digest, tool or backend:\n%s", rc.raw)
	}
	patch := "--- a/conf.txt\n+++ b/conf.txt\n@@ -1 +1 @@\n-confidential body text 8d1f\n+confidential patch text 77aa\n"
	res = e.call(t, agentFull, "fs.apply_patch", map[string]any{"path": "@w", "patch": patch})
	wantFS(t, res, 200, "")
	rc = e.g.waitReceipt(t, res.ReceiptID, 5*time.Second, func(r receipt) bool { return r.status() == "succeeded" })
	if strings.Contains(rc.raw, "confidential") {
		t.Errorf("receipt holds the patch:\n%s", rc.raw)
	}
}

// testFSSwapRace flips work/flip between a directory and a symlink to
// outside/ while writes and reads run through the gateway.
func testFSSwapRace(t *testing.T, e *fsEnv) {
	flip := filepath.Join(e.work, "flip")
	real := filepath.Join(e.work, "flip.real")
	if err := os.Mkdir(flip, 0o755); err != nil {
		t.Fatal(err)
	}
	// Run at least 3 s, and on until both states were exercised (a loaded
	// machine may need longer to land a write between flips), at most 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var flips, ok, refused atomic.Int64
	go func() {
		minimum := time.After(3 * time.Second)
		<-minimum
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			if flips.Load() >= 5 && ok.Load() > 0 {
				cancel()
				return
			}
			<-tick.C
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if !testutil.SwapToSymlink(flip, real, e.outside, 100*time.Microsecond) {
				continue
			}
			flips.Add(1)
			// Hold the real state a moment too: on a loaded machine a
			// flipper that swaps straight back starves every write of a
			// window to land in, and the race would test one state only.
			time.Sleep(time.Millisecond)
		}
	}()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				input := map[string]any{"path": fmt.Sprintf("@w/flip/w%d-%d.txt", w, i), "content": "pwned"}
				tool := "fs.write"
				if i%2 == 1 {
					tool, input = "fs.read", map[string]any{"path": "@w/flip/secret.txt"}
				}
				r, err := e.g.tryDo(ctx, http.MethodPost, "/v1/tool-calls", "Bearer "+e.g.dep.keys[agentFull], map[string]any{"tool": tool, "input": input})
				if err != nil {
					return // deadline
				}
				if strings.Contains(string(r.body), "TOP SECRET") {
					t.Errorf("a read returned the outside file: %s", r.body)
				}
				var out struct {
					Output struct {
						Success bool `json:"success"`
					} `json:"output"`
				}
				_ = json.Unmarshal(r.body, &out)
				if out.Output.Success && tool == "fs.write" {
					ok.Add(1)
				} else if !out.Output.Success {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("flips %d, writes ok %d, refused %d", flips.Load(), ok.Load(), refused.Load())
	e.outsideUnchanged(t)
	if flips.Load() < 5 || ok.Load() == 0 {
		t.Errorf("the race did not exercise both states: flips %d, writes ok %d", flips.Load(), ok.Load())
	}
}

// testFSAtomic: a reader polling a file rewritten through the gateway only
// ever sees complete versions, and no temporary file is left.
func testFSAtomic(t *testing.T, e *fsEnv) {
	p := filepath.Join(e.work, "atomic.txt")
	version := func(i int) string { return strings.Repeat(fmt.Sprintf("version %02d\n", i), 8000) } // 88 KB
	valid := map[string]bool{}
	for i := range 10 {
		valid[version(i)] = true
	}
	writeFile(t, p, []byte(version(0)))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var reads, torn atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			b, err := os.ReadFile(p)
			reads.Add(1)
			if err != nil || !valid[string(b)] {
				torn.Add(1)
			}
		}
	}()
	for i := 1; i < 10; i++ {
		res := e.call(t, agentFull, "fs.write", map[string]any{"path": "@w/atomic.txt", "content": version(i)})
		wantFS(t, res, 200, "")
	}
	cancel()
	wg.Wait()
	if torn.Load() > 0 {
		t.Errorf("%d of %d concurrent reads saw a partial or missing file", torn.Load(), reads.Load())
	}
	noTempFiles(t, e.work)
}

func mustDecode(t testing.TB, res *toolCallResult, v any) {
	t.Helper()
	if err := json.Unmarshal(res.Output.Data, v); err != nil {
		t.Fatalf("decode data: %v\n%s", err, res.response)
	}
}

func readFileT(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
