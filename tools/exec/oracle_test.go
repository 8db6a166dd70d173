package exectool

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/wire"
)

// TestHostPathOracle: argv[0] and cwd outside every grant get the same
// code, field and message whether the host path exists or not, whether it
// is a file, a directory or a dangling link, and whatever a symlink the
// caller planted in its own writable grant points to (issue #13). Inside
// the grants the caller is told exactly what is wrong.
func TestHostPathOracle(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	work, host := filepath.Join(base, "work"), filepath.Join(base, "host")
	for _, d := range []string{work, host, filepath.Join(host, "dir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(p string, mode os.FileMode) string {
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hostProg := mk(filepath.Join(host, "prog"), 0o755)
	hostData := mk(filepath.Join(host, "data"), 0o644)
	mk(filepath.Join(work, "prog"), 0o755)
	mk(filepath.Join(work, "data"), 0o644)
	if err := os.MkdirAll(filepath.Join(work, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Links the caller could plant in its writable grant: one to an
	// existing host file, one to a missing one, one dangling in place.
	link := func(name, target string) string {
		p := filepath.Join(work, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	toExisting := link("to-existing", hostProg)
	toMissing := link("to-missing", filepath.Join(host, "missing"))
	toExistingDir := link("to-existing-dir", filepath.Join(host, "dir"))
	toMissingDir := link("to-missing-dir", filepath.Join(host, "nodir"))
	loop := link("loop", filepath.Join(work, "loop"))
	grant := wire.Decision{Allow: true, FSGrants: []wire.FSGrant{{Path: work, Mode: "rw"}}}
	tool := newTool()

	enforce := func(t *testing.T, in map[string]any) *wire.Error {
		t.Helper()
		raw, _ := json.Marshal(in)
		call, err := tool.Prepare(context.Background(), raw)
		if err != nil {
			t.Fatalf("Prepare %v must accept any absolute path (the answer waits for the grants): %v", in, err)
		}
		_, err = call.Enforce(context.Background(), grant)
		if err == nil {
			return nil
		}
		return wireErr(t, err)
	}
	// The answer must not depend on the host: compare it with the
	// answer for the same request with a path that was never there.
	same := func(t *testing.T, field string, paths []string, build func(p string) map[string]any) {
		t.Helper()
		for _, p := range paths {
			we := enforce(t, build(p))
			if we == nil {
				t.Fatalf("%s %s outside the grants was accepted", field, p)
			}
			never := filepath.Join(base, "never-there", "x")
			ref := enforce(t, build(never))
			if we.Code != wire.CodeFSDenied || we.Details["field"] != field || we.Details["path"] != p {
				t.Errorf("%s %s: %s %v %q, want fs_denied naming the path as given", field, p, we.Code, we.Details, we.Message)
			}
			// The same message but for the path itself.
			if want := strings.Replace(ref.Message, strconv.Quote(never), strconv.Quote(p), 1); we.Message != want {
				t.Errorf("%s %s: message differs from a path that never existed:\n got %s\nwant %s", field, p, we.Message, want)
			}
		}
	}
	t.Run("argv[0] outside the grants", func(t *testing.T) {
		t.Parallel()
		same(t, "argv[0]", []string{hostProg, hostData, filepath.Join(host, "dir"), filepath.Join(host, "missing"), "/etc/passwd", "/etc/no-such-file",
			toExisting, toMissing, filepath.Join(toExistingDir, "x"), filepath.Join(toMissingDir, "x")},
			func(p string) map[string]any { return map[string]any{"argv": []string{p}} })
	})
	t.Run("cwd outside the grants", func(t *testing.T) {
		t.Parallel()
		same(t, "cwd", []string{filepath.Join(host, "dir"), filepath.Join(host, "nodir"), hostProg, "/etc", "/no-such-dir", toExistingDir, toMissingDir},
			func(p string) map[string]any {
				return map[string]any{"argv": []string{filepath.Join(work, "prog")}, "cwd": p}
			})
	})
	t.Run("inside the grants: told what is wrong", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			in    map[string]any
			code  wire.Code
			field string
		}{
			{map[string]any{"argv": []string{filepath.Join(work, "prog")}}, "", ""},
			{map[string]any{"argv": []string{filepath.Join(work, "missing")}}, wire.CodeInvalidInput, "argv[0]"},
			{map[string]any{"argv": []string{filepath.Join(work, "data")}}, wire.CodeInvalidInput, "argv[0]"},
			{map[string]any{"argv": []string{filepath.Join(work, "sub")}}, wire.CodeInvalidInput, "argv[0]"},
			{map[string]any{"argv": []string{loop}}, wire.CodeInvalidInput, "argv[0]"},
			{map[string]any{"argv": []string{filepath.Join(work, "prog")}, "cwd": filepath.Join(work, "nodir")}, wire.CodeInvalidInput, "cwd"},
			{map[string]any{"argv": []string{filepath.Join(work, "prog")}, "cwd": filepath.Join(work, "data")}, wire.CodeInvalidInput, "cwd"},
			{map[string]any{"argv": []string{filepath.Join(work, "prog")}, "cwd": filepath.Join(work, "sub")}, "", ""},
		} {
			we := enforce(t, tc.in)
			switch {
			case tc.code == "" && we != nil:
				t.Errorf("%v: %v", tc.in, we)
			case tc.code != "" && (we == nil || we.Code != tc.code || we.Details["field"] != tc.field):
				t.Errorf("%v: %+v, want %s on %s", tc.in, we, tc.code, tc.field)
			}
		}
	})
}
