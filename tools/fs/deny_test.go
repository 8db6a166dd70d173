package fstool

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/wire"
)

// TestDenyListHidesWhatTheSandboxHides: the decision's fs_deny and .env
// files stay out of reach of every file tool, inside a granted tree, as the
// OS sandbox hides them from programs.
func TestDenyListHidesWhatTheSandboxHides(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	secrets := filepath.Join(f.work, "secrets")
	must(t, os.MkdirAll(secrets, 0o755))
	writeT(t, filepath.Join(secrets, "key.txt"), "needle in the denied dir\n")
	writeT(t, filepath.Join(f.work, ".env"), "TOKEN=needle-env\n")
	must(t, os.MkdirAll(filepath.Join(f.work, "sub", ".env.d"), 0o755))
	writeT(t, filepath.Join(f.work, "sub", ".env.d", "x"), "needle-envdir\n")
	d := f.decision
	d.FSDeny = []string{secrets}

	for _, tc := range []struct {
		name, tool string
		input      map[string]any
	}{
		{"read in fs_deny", NameRead, map[string]any{"path": "@w/secrets/key.txt"}},
		{"list fs_deny dir", NameList, map[string]any{"path": "@w/secrets"}},
		{"read .env", NameRead, map[string]any{"path": "@w/.env"}},
		{"read inside a .env dir", NameRead, map[string]any{"path": filepath.Join(f.work, "sub", ".env.d", "x")}},
		{"write into fs_deny", NameWrite, map[string]any{"path": "@w/secrets/new.txt", "content": "x"}},
		{"overwrite .env", NameWrite, map[string]any{"path": "@w/.env", "content": "x"}},
	} {
		o := f.doWith(t, tc.tool, tc.input, d)
		if o.code != string(wire.CodeFSDenied) {
			t.Errorf("%s: code %q (stage %s), want fs_denied", tc.name, o.code, o.stage)
		}
	}
	if _, err := os.Stat(filepath.Join(secrets, "new.txt")); err == nil {
		t.Error("a write landed in the denied directory")
	}
	if readT(t, filepath.Join(f.work, ".env")) != "TOKEN=needle-env\n" {
		t.Error(".env was overwritten")
	}

	// Walks skip the hidden subtrees without failing the call.
	list := f.doWith(t, NameList, map[string]any{"path": "@w"}, d)
	if list.code != "" || strings.Contains(string(list.data), `"secrets"`) {
		t.Errorf("fs.list of the grant: code %q, data %s; want success without the denied entry", list.code, list.data)
	}
	search := f.doWith(t, NameSearch, map[string]any{"path": "@w", "pattern": "needle"}, d)
	if search.code != "" || !strings.Contains(string(search.data), `"matches":[]`) {
		t.Errorf("fs.search of the grant: code %q, data %s; want no match from hidden files", search.code, search.data)
	}
	// Without the deny entry the same directory is readable: the refusal
	// above comes from fs_deny, not from something else.
	if o := f.do(t, NameRead, map[string]any{"path": "@w/secrets/key.txt"}); o.code != "" {
		t.Errorf("control: read without fs_deny: code %q", o.code)
	}
}

// TestHomeSecretsCache: the credential stores are resolved through
// symlinks, reused for homeSecretsTTL, and re-resolved after it, so a store
// relinked elsewhere is hidden at its new place within the TTL.
func TestHomeSecretsCache(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	elsewhere := t.TempDir()
	first := filepath.Join(elsewhere, "ssh-1")
	second := filepath.Join(elsewhere, "ssh-2")
	must(t, os.MkdirAll(first, 0o700))
	must(t, os.MkdirAll(second, 0o700))
	must(t, os.Symlink(first, filepath.Join(home, ".ssh")))

	now := time.Unix(1_700_000_000, 0)
	calls := 0
	h := &homeSecrets{
		now:  func() time.Time { return now },
		home: func() (string, error) { calls++; return home, nil },
	}
	realFirst, err := filepath.EvalSymlinks(first)
	must(t, err)
	realSecond, err := filepath.EvalSymlinks(second)
	must(t, err)
	hidden := func(real string) bool {
		d := newDenyList(nil, h.get(), newResolveCache())
		_, ok := d.byPath(filepath.Join(real, "id_ed25519"))
		return ok
	}

	if !hidden(realFirst) {
		t.Fatalf("the .ssh symlink's target is not hidden: %v", h.get().list.paths)
	}
	if !slices.Contains(h.get().list.paths, filepath.Join(home, ".aws")) {
		t.Errorf("a missing store is not denied by name: %v", h.get().list.paths)
	}
	// Relinked: within the TTL the old resolution is reused (one lookup).
	must(t, os.Remove(filepath.Join(home, ".ssh")))
	must(t, os.Symlink(second, filepath.Join(home, ".ssh")))
	now = now.Add(homeSecretsTTL / 2)
	if hidden(realSecond) || calls != 1 {
		t.Errorf("within the TTL: hidden(new target) = %v after %d resolutions, want false after 1", hidden(realSecond), calls)
	}
	// After the TTL the new target is hidden and the old one no longer.
	now = now.Add(homeSecretsTTL)
	if !hidden(realSecond) || hidden(realFirst) {
		t.Errorf("after the TTL: new target hidden %v, old hidden %v; want true, false", hidden(realSecond), hidden(realFirst))
	}
	// A clock stepping back forces a fresh resolution rather than trusting
	// a resolution "from the future".
	before := calls
	now = now.Add(-time.Hour)
	h.get()
	if calls != before+1 {
		t.Errorf("clock stepped back: %d resolutions, want %d", calls, before+1)
	}
}
