package statedir_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/gateway/statedir"
	"github.com/portcullis/portcullis/wire"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newDirs(t *testing.T, retention time.Duration) (*statedir.Dirs, *clock) {
	t.Helper()
	c := &clock{t: time.Now()}
	d, err := statedir.New(statedir.Options{Root: filepath.Join(t.TempDir(), "state"), Retention: retention, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return d, c
}

var grants = []wire.FSGrant{{Path: "/usr", Mode: wire.ModeRead}, {Alias: wire.AliasState, Mode: wire.ModeReadWrite}}

func TestNameSeparatesPrincipalsAndSessions(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, c := range [][2]string{{"a", "s1"}, {"a", "s2"}, {"b", "s1"}, {"a\x00s", "1"}, {"a", "\x00s1"}, {"as", "1"}, {"", "as1"}} {
		n := statedir.Name(c[0], c[1])
		if prev, dup := seen[n]; dup {
			t.Errorf("%q and %q share state directory %s", prev, c, n)
		}
		seen[n] = strings.Join(c[:], "|")
		if strings.ContainsAny(n, "/.") || len(n) != 40 {
			t.Errorf("Name(%q) = %q: not a plain 40-character name", c, n)
		}
	}
}

func TestBind(t *testing.T) {
	t.Parallel()
	d, _ := newDirs(t, time.Hour)
	ctx := context.Background()
	got, notes, err := d.Bind(ctx, "agent", "s1", grants)
	if err != nil || len(notes) != 0 {
		t.Fatalf("Bind: %v %v", notes, err)
	}
	want := filepath.Join(d.Root(), statedir.Rel("agent", "s1"))
	if len(got) != 2 || got[0] != grants[0] || got[1].Path != want || got[1].Alias != wire.AliasState || got[1].Mode != wire.ModeReadWrite {
		t.Fatalf("Bind = %+v, want @state at %s", got, want)
	}
	if grants[1].Path != "" {
		t.Errorf("Bind changed its argument: %+v", grants)
	}
	for _, dir := range []string{d.Root(), filepath.Dir(want), want} {
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want a 0700 directory", dir, fi, err)
		}
	}
	// The directory is reused, and its mode forced back.
	if err := os.Chmod(want, 0o755); err != nil {
		t.Fatal(err)
	}
	if again, _, err := d.Bind(ctx, "agent", "s1", grants); err != nil || again[1].Path != want {
		t.Fatalf("second Bind: %+v %v", again, err)
	}
	if fi, _ := os.Lstat(want); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode after rebind: %v", fi.Mode())
	}

	// No session: the grant is dropped and a note says why.
	got, notes, err = d.Bind(ctx, "agent", "", grants)
	if err != nil || len(got) != 1 || got[0] != grants[0] || len(notes) != 1 || !strings.Contains(notes[0], "session_id") {
		t.Errorf("Bind without a session = %+v %q %v", got, notes, err)
	}
	// Nothing to bind: the grants come back as they are, with no I/O.
	plain := grants[:1]
	if got, notes, err := d.Bind(ctx, "agent", "", plain); err != nil || len(notes) != 0 || len(got) != 1 {
		t.Errorf("Bind without @state = %+v %q %v", got, notes, err)
	}
	if got, notes := statedir.Unbound(grants); len(got) != 1 || len(notes) != 1 {
		t.Errorf("Unbound = %+v %q", got, notes)
	}
}

// TestBindRefusesPlantedPaths: whoever can write beside the state root
// (it is the gateway's data_dir) cannot make a state directory a symlink
// or a file and have a call's grant follow it.
func TestBindRefusesPlantedPaths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	target := t.TempDir()

	d, _ := newDirs(t, time.Hour)
	if err := os.MkdirAll(filepath.Join(d.Root(), statedir.PrincipalName("agent")), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(d.Root(), statedir.Rel("agent", "s1"))); err != nil {
		t.Fatal(err)
	}
	if got, _, err := d.Bind(ctx, "agent", "s1", grants); err == nil {
		t.Errorf("Bind followed a symlink planted as the state directory: %+v", got)
	}
	if err := os.WriteFile(filepath.Join(d.Root(), statedir.Rel("agent", "s2")), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _, err := d.Bind(ctx, "agent", "s2", grants); err == nil {
		t.Errorf("Bind took a file as the state directory: %+v", got)
	}

	// A symlinked root is refused too.
	d2, err := statedir.New(statedir.Options{Root: filepath.Join(t.TempDir(), "state")})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, d2.Root()); err != nil {
		t.Fatal(err)
	}
	if got, _, err := d2.Bind(ctx, "agent", "s1", grants); err == nil {
		t.Errorf("Bind followed a symlinked state root: %+v", got)
	}
	// So is a symlink planted as a principal's directory.
	d3, _ := newDirs(t, time.Hour)
	if err := os.MkdirAll(d3.Root(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(d3.Root(), statedir.PrincipalName("agent"))); err != nil {
		t.Fatal(err)
	}
	if got, _, err := d3.Bind(ctx, "agent", "s1", grants); err == nil {
		t.Errorf("Bind followed a symlink planted as the principal's directory: %+v", got)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Errorf("Bind created %d entries in a symlink's target", len(ents))
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, c := newDirs(t, time.Hour)
	bind := func(session string) string {
		t.Helper()
		g, _, err := d.Bind(ctx, "agent", session, grants)
		if err != nil {
			t.Fatal(err)
		}
		return g[1].Path
	}
	old := bind("old")
	if err := os.MkdirAll(filepath.Join(old, "deep", "er"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A symlink inside is removed, not followed.
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep.txt")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(old, "deep", "link")); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(50 * time.Minute)
	fresh := bind("fresh")
	reused := bind("old") // used again: kept however old its creation
	if reused != old {
		t.Fatalf("rebind moved the directory: %s vs %s", reused, old)
	}
	c.t = c.t.Add(30 * time.Minute)
	if n, err := d.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep inside retention removed %d (%v)", n, err)
	}
	c.t = c.t.Add(31 * time.Minute)
	if n, err := d.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("Sweep past retention removed %d (%v), want 2", n, err)
	}
	for _, dir := range []string{old, fresh} {
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("%s survived the sweep: %v", dir, err)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the sweep followed a symlink out of the state directory: %v", err)
	}
	if ents, _ := os.ReadDir(d.Root()); len(ents) != 0 {
		t.Errorf("state root after the sweep: %d entries", len(ents))
	}
	// A session swept comes back empty.
	if again := bind("old"); again != old {
		t.Errorf("rebind after sweep: %s", again)
	} else if ents, _ := os.ReadDir(again); len(ents) != 0 {
		t.Errorf("a swept session's state came back with %d entries", len(ents))
	}
}

// TestBindCapsDirectoriesPerPrincipal: varying session_id cannot make a
// principal an unbounded number of directories; reusing a session, or
// another principal, is not affected, and retention frees room.
func TestBindCapsDirectoriesPerPrincipal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock{t: time.Now()}
	d, err := statedir.New(statedir.Options{Root: filepath.Join(t.TempDir(), "state"), Retention: time.Hour, MaxPerPrincipal: 3, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, _, err := d.Bind(ctx, "agent", fmt.Sprint("s", i), grants); err != nil {
			t.Fatalf("Bind s%d under the cap: %v", i, err)
		}
		c.t = c.t.Add(time.Minute)
	}
	_, _, err = d.Bind(ctx, "agent", "s3", grants)
	var le *statedir.LimitError
	if !errors.As(err, &le) || le.Max != 3 {
		t.Fatalf("a fourth directory for one principal: %v, want a LimitError with Max 3", err)
	}
	// The oldest (s0, used 3 minutes ago) frees in 57 minutes.
	if le.RetryAfter < 56*time.Minute || le.RetryAfter > 58*time.Minute {
		t.Errorf("RetryAfter = %s, want about 57m", le.RetryAfter)
	}
	if _, err := os.Lstat(filepath.Join(d.Root(), statedir.Rel("agent", "s3"))); !os.IsNotExist(err) {
		t.Errorf("a refused Bind left a directory behind: %v", err)
	}
	if _, _, err := d.Bind(ctx, "agent", "s1", grants); err != nil {
		t.Errorf("reusing a session at the cap: %v", err)
	}
	if _, _, err := d.Bind(ctx, "other", "s3", grants); err != nil {
		t.Errorf("another principal is capped by agent's directories: %v", err)
	}
	c.t = c.t.Add(60 * time.Minute) // s0 and s2 now past retention; s1 was reused
	if n, err := d.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("Sweep removed %d (%v), want 2", n, err)
	}
	if _, _, err := d.Bind(ctx, "agent", "s3", grants); err != nil {
		t.Errorf("Bind after the sweep freed room: %v", err)
	}
}

// TestSweepFlatLayout: directories of the earlier layout (root/<h>) are
// swept by the same rule, and empty principal directories go too.
func TestSweepFlatLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, c := newDirs(t, time.Hour)
	legacy := filepath.Join(d.Root(), statedir.Name("agent", "old"))
	if err := os.MkdirAll(filepath.Join(legacy, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(legacy, c.t, c.t); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Bind(ctx, "agent", "s", grants); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(2 * time.Hour)
	if n, err := d.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("Sweep removed %d (%v), want 2", n, err)
	}
	if ents, _ := os.ReadDir(d.Root()); len(ents) != 0 {
		t.Errorf("state root after the sweep holds %d entries, want none", len(ents))
	}
}

func TestNewRefusesRelativeRoot(t *testing.T) {
	t.Parallel()
	if _, err := statedir.New(statedir.Options{Root: "state"}); err == nil {
		t.Error("New accepted a relative root")
	}
}
