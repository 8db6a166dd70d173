package sqlite_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/wire"
)

// listing is a directory's names with the SHA-256 of each file's content,
// so a test sees a file created, removed or changed.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %x", e.Name(), sha256.Sum256(b)))
	}
	slices.Sort(out)
	return out
}

// writeCalls appends n allowed calls through a Writer.
func writeCalls(t *testing.T, s evidence.Store, n int) {
	t.Helper()
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "ro-test"})
	for i := range n {
		id := uuid.Must(uuid.NewV7())
		d := evidence.Event{ID: id, Kind: evidence.KindDecision, Decision: wire.DecisionAllow, PrincipalID: "p", Tool: "Exec", CallID: fmt.Sprint(i)}
		o := evidence.Event{Kind: evidence.KindOutcome, ReceiptID: id, Outcome: &wire.Outcome{Status: wire.StatusSucceeded}}
		if err := w.Append(context.Background(), d, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func countEvents(t *testing.T, s *sqlite.Store) int {
	t.Helper()
	cs, err := s.Chains(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cs {
		n += int(c.MaxSeq)
	}
	return n
}

// TestOpenReadOnlyRefusesNoStore: verification's open never creates a
// store where there is none, and says which kind of nothing it found.
func TestOpenReadOnlyRefusesNoStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name    string
		prepare func(t *testing.T, path string)
		want    error
	}{
		{"missing", func(*testing.T, string) {}, evidence.ErrNoStore},
		{"zero-bytes", func(t *testing.T, p string) {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			// A WAL beside a 0-byte file: SQLite would delete it.
			if err := os.WriteFile(p+"-wal", []byte("left over"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, evidence.ErrNoStore},
		{"not-sqlite", func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte("this is not a database, just text that is long enough"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, evidence.ErrNoStore},
		{"no-schema", func(t *testing.T, p string) {
			db, err := sql.Open("sqlite", p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("CREATE TABLE unrelated (x INTEGER)"); err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
		}, evidence.ErrNoStore},
		{"older-schema", func(t *testing.T, p string) {
			s, err := sqlite.Open(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			_ = s.RawExec(ctx, "DELETE FROM portcullis_schema_version WHERE version_id = (SELECT max(version_id) FROM portcullis_schema_version)")
			_ = s.Close()
		}, evidence.ErrSchemaMismatch},
		{"newer-schema", func(t *testing.T, p string) {
			s, err := sqlite.Open(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.RawExec(ctx, "INSERT INTO portcullis_schema_version (version_id, is_applied) VALUES (999, 1)"); err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
		}, evidence.ErrSchemaMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "evidence.db")
			tc.prepare(t, path)
			before := listing(t, dir)
			s, err := sqlite.OpenReadOnly(ctx, path)
			if err == nil {
				_ = s.Close()
				t.Fatalf("OpenReadOnly succeeded on a %s store", tc.name)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("OpenReadOnly = %v, want %v", err, tc.want)
			}
			if after := listing(t, dir); !slices.Equal(before, after) {
				t.Errorf("OpenReadOnly changed the directory:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}

// TestOpenReadOnlyCreatesNothing: opening a store for verification, after
// a clean stop (no WAL) and beside a live writer (WAL), leaves every file
// of the directory as it was, and refuses writes.
func TestOpenReadOnlyCreatesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("stopped", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "evidence.db")
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		writeCalls(t, s, 5)
		_ = s.Close()
		if _, err := os.Stat(path + "-wal"); err == nil {
			t.Fatalf("a clean close left %s-wal", path)
		}
		before := listing(t, dir)
		ro, err := sqlite.OpenReadOnly(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if n := countEvents(t, ro); n != 11 {
			t.Errorf("read %d events, want 11 (chain_start + 5 calls)", n)
		}
		if err := ro.Append(ctx, []evidence.Event{{ID: uuid.New()}}); err == nil {
			t.Error("Append on a read-only store succeeded")
		}
		if _, ok, _ := ro.TryLead(ctx); ok {
			t.Error("a read-only store may lead the checkpointer")
		}
		if err := ro.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if after := listing(t, dir); !slices.Equal(before, after) {
			t.Errorf("read-only open changed the directory:\nbefore %q\nafter  %q", before, after)
		}
	})
	t.Run("live-writer", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "evidence.db")
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		writeCalls(t, s, 3)
		if _, err := os.Stat(path + "-wal"); err != nil {
			t.Fatalf("no WAL beside an open store: %v", err)
		}
		before := listing(t, dir)
		ro, err := sqlite.OpenReadOnly(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		n := countEvents(t, ro)
		if n != 7 {
			t.Errorf("read %d events, want 7", n)
		}
		// One snapshot: what the writer commits now is not seen.
		writeCalls(t, s, 2)
		if m := countEvents(t, ro); m != n {
			t.Errorf("read-only store saw %d events after reading %d: not one snapshot", m, n)
		}
		if err := ro.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		// The writer changed the WAL itself; only the files verify could
		// have made matter: none new, none gone.
		after := listing(t, dir)
		if len(before) != len(after) {
			t.Errorf("read-only open beside a live writer changed the directory:\nbefore %q\nafter  %q", before, after)
		}
	})
}

// TestOpenReadOnlyChangedWhileRead: an immutable snapshot whose file is
// changed underneath is refused at Close.
func TestOpenReadOnlyChangedWhileRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "evidence.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	writeCalls(t, s, 2)
	_ = s.Close()
	ro, err := sqlite.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	countEvents(t, ro)
	s, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	writeCalls(t, s, 2)
	_ = s.Close() // checkpoints the WAL into the main file
	if err := ro.Close(); !errors.Is(err, sqlite.ErrChangedWhileRead) {
		t.Fatalf("Close after the file changed = %v, want ErrChangedWhileRead", err)
	}
}

// TestVerifyRuleIndex: evidence_rule_ids, the index `?rule=` reads, is
// held against the chained rule_ids column: rows deleted (the decision
// vanishes from rule queries) or added (a decision attributed to a rule it
// does not name) are named by Verify, on the store opened read-only.
func TestVerifyRuleIndex(t *testing.T) {
	t.Parallel()
	for name, stmt := range map[string]string{
		"rows-deleted": "DELETE FROM evidence_rule_ids WHERE rule_id = 'exec.shape.echo'",
		"row-added":    "INSERT INTO evidence_rule_ids (rule_id, ts, event_id) SELECT 'admin.override', ts, id FROM evidence_events WHERE kind = 'decision' LIMIT 1",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "evidence.db")
			s, err := sqlite.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "ri"})
			for i := range 3 {
				d := evidence.Event{ID: uuid.Must(uuid.NewV7()), Kind: evidence.KindDecision, Decision: wire.DecisionAllow,
					PrincipalID: "p", Tool: "Exec", CallID: fmt.Sprint(i), RuleIDs: []string{"grant:role/agent/Exec", "exec.shape.echo"}}
				if err := w.Append(ctx, d); err != nil {
					t.Fatal(err)
				}
			}
			_ = w.Close(ctx)
			verifyRO := func() *evidence.Report {
				t.Helper()
				ro, err := sqlite.OpenReadOnly(ctx, path)
				if err != nil {
					t.Fatal(err)
				}
				defer ro.Close()
				r, err := evidence.Verify(ctx, ro, evidence.VerifyOptions{VerifierKey: "x+00000000+AQ"})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			if r := verifyRO(); !r.OK() {
				t.Fatalf("Verify before: %+v", r.Problems)
			}
			for _, q := range []string{"DROP TRIGGER evidence_rule_ids_no_delete", stmt} {
				if err := s.RawExec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			_ = s.Close()
			r := verifyRO()
			found := false
			for _, p := range r.Problems {
				found = found || p.Kind == "rule_index"
			}
			if !found {
				t.Fatalf("Verify after %s: %+v, want rule_index", name, r.Problems)
			}
		})
	}
}
