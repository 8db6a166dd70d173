package tests

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/note"
	_ "modernc.org/sqlite"

	"github.com/portcullis/portcullis/evidence"
)

// withAnchors gives a deployment a signing key, a checkpoint interval and
// an evidence.checkpoint_dir outside its data directory, and returns the
// verifier key and that directory.
func withAnchors(t *testing.T, d *deployment, interval string) (vkey, dir string) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "e2e.portcullis/"+d.instanceID)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(d.dir, "evidence-signing.key")
	if err := os.WriteFile(keyPath, []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(d.dir, "anchors")
	f, err := os.OpenFile(d.configPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "evidence:\n  signing_key: %q\n  checkpoint_interval: %s\n  checkpoint_dir: %q\n", keyPath, interval, dir)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return vkey, dir
}

// verifyRun is one run of `gateway evidence verify`.
type verifyRun struct {
	out  string
	code int
	rep  struct {
		Verdict  string `json:"verdict"`
		OK       bool   `json:"ok"`
		Anchored bool   `json:"anchored"`
		// NotCheckpointed counts events no stored checkpoint covers.
		NotCheckpointed int64 `json:"not_checkpointed"`
		Problems        []struct {
			Kind   string `json:"kind"`
			Detail string `json:"detail"`
		} `json:"problems"`
	}
}

func (v verifyRun) has(kind string) bool {
	for _, p := range v.rep.Problems {
		if p.Kind == kind {
			return true
		}
	}
	return false
}

// runVerifyCLI runs `gateway evidence verify --config cfg --key vkey args...`
// twice, as text and as JSON, and returns both with the exit code (the
// same for both, or the test fails).
func runVerifyCLI(t *testing.T, cfg, vkey string, args ...string) verifyRun {
	t.Helper()
	run := func(extra ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		a := append([]string{"evidence", "verify", "--config", cfg, "--key", vkey}, args...)
		cmd := exec.CommandContext(ctx, gatewayBin, append(a, extra...)...)
		cmd.Env = gatewayEnv()
		cmd.Dir = filepath.Dir(cfg)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &ee):
			return string(out), ee.ExitCode()
		}
		t.Fatalf("gateway evidence verify: %v", err)
		return "", -1
	}
	var v verifyRun
	v.out, v.code = run()
	js, code := run("--json")
	if code != v.code {
		t.Fatalf("verify exits %d as text and %d as JSON:\n%s\n%s", v.code, code, v.out, js)
	}
	line, _, _ := strings.Cut(js, "\n")
	if err := json.Unmarshal([]byte(line), &v.rep); err != nil {
		t.Fatalf("verify --json printed no JSON report: %v\n%s", err, js)
	}
	return v
}

// verifyConfig writes a config for `evidence verify` alone: the store and
// the anchor directory, nothing else.
func verifyConfig(t *testing.T, dir, dbURL, anchors string) string {
	t.Helper()
	path := filepath.Join(dir, "verify.yaml")
	text := fmt.Sprintf("database_url: %q\ndata_dir: %q\nevidence:\n  checkpoint_dir: %q\n", dbURL, filepath.Join(dir, "data"), anchors)
	writeFile(t, path, []byte(text))
	return path
}

// listDir names every entry under dir with its size and content digest
// (SQLite's shared-memory index only by name: readers may update it).
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.IsDir() || strings.HasSuffix(p, "-shm") {
			out = append(out, rel)
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d %x", rel, fi.Size(), sha256.Sum256(b)))
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		outF, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(outF, in); err != nil {
			outF.Close()
			return err
		}
		return outF.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sqlExec runs statements on an SQLite file as whoever can write it: the
// append-only triggers named are dropped first.
func sqliteExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, trg := range []string{"evidence_events_no_update", "evidence_events_no_delete", "evidence_checkpoints_no_change",
		"evidence_checkpoints_no_delete", "evidence_tree_no_change", "evidence_tree_no_delete", "evidence_tree_hashes_no_change",
		"evidence_tree_hashes_no_delete", "evidence_rule_ids_no_delete"} {
		if _, err := db.Exec("DROP TRIGGER IF EXISTS " + trg); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// pgExec runs statements as the database owner with every trigger off
// (session_replication_role = replica).
func pgExec(t *testing.T, dbURL string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// pgAdmin runs one statement on the maintenance database.
func pgAdmin(t *testing.T, stmt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func pgQueryInt(t *testing.T, dbURL, q string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func dbName(t *testing.T, dbURL string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Database
}

func withDB(t *testing.T, dbURL, name string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// cloneDB copies a database (the gateway must be stopped) and drops the
// copy when t ends.
func cloneDB(t *testing.T, dbURL string) string {
	t.Helper()
	name := "portcullis_e2e_copy_" + randHex(t, 6)
	pgAdmin(t, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", pgx.Identifier{name}.Sanitize(), pgx.Identifier{dbName(t, dbURL)}.Sanitize()))
	t.Cleanup(func() {
		pgAdmin(t, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return withDB(t, dbURL, name)
}

// someCalls makes n allowed calls and one denied call and returns the
// allowed calls' receipt ids.
func someCalls(t *testing.T, g *gateway, d *deployment, n int, session string) []string {
	t.Helper()
	var ids []string
	for i := range n {
		res := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": []string{"/usr/bin/echo", "anchor", fmt.Sprint(i)}}, fmt.Sprintf("%s-%d", session, i), session))
		if res.status != http.StatusOK || res.ReceiptID == "" {
			t.Fatalf("allowed call: %s", res.response)
		}
		ids = append(ids, res.ReceiptID)
	}
	if res := g.call(t, d.keys[agentNoExec], execCall(map[string]any{"argv": []string{"/usr/bin/echo", "no"}}, session+"-denied", session)); res.ReceiptID == "" {
		t.Fatalf("denied call: %s", res.response)
	}
	return ids
}

// waitHeadSeq waits until dir/heads holds a chain head note (of any
// instance) with a sequence of at least seq, and returns its chain.
func waitHeadSeq(t *testing.T, dir, vkey string, seq int64) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		a, err := evidence.ReadAnchorDir(dir)
		if err == nil {
			for _, b := range a.Heads {
				if h, err := evidence.OpenChainHead(b, vkey); err == nil && h.Seq >= seq {
					return h.ChainID.String()
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no chain head of seq >= %d in %s within 20s", seq, dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEvidenceVerifyFailureModes takes `gateway evidence verify` through
// every way evidence can vanish that a verifier must not call OK, on each
// store, against the real binary: a deleted store, a 0-byte file, every
// row deleted, a rollback to a saved copy (a consistent earlier state), a
// deleted tail no checkpoint signed, deleted rule index rows, an older
// schema. Verify opens the store read-only: it never creates a file, a
// table or a schema row (the directory listing and the catalog are the
// same before and after), and it says plainly when nothing outside the
// database anchored its result.
func TestEvidenceVerifyFailureModes(t *testing.T) {
	t.Parallel()
	eachStoreKind(t, testVerifyFailureModes)
}

func testVerifyFailureModes(t *testing.T, st store) {
	d := newDeployment(t, st)
	// A long interval: checkpoints are signed only when a gateway stops
	// (its last pass), so which events are signed is exact.
	vkey, anchors := withAnchors(t, d, "1h")
	dbFile := filepath.Join(d.dataDir, "evidence.db")

	// Phase 1: calls, a clean stop (last checkpoint pass, head copied).
	g := d.start(t)
	someCalls(t, g, d, 3, "phase1")
	if err := g.stop(20 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// A saved copy of the store at the end of phase 1.
	saved := filepath.Join(d.dir, "saved")
	var savedDB string
	if st == storeSQLite {
		copyTree(t, d.dataDir, saved)
	} else {
		savedDB = cloneDB(t, d.dbURL)
	}

	// Phase 2: more calls, a clean stop.
	g = d.start(t)
	someCalls(t, g, d, 3, "phase2")
	if err := g.stop(20 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	v := runVerifyCLI(t, d.configPath, vkey)
	if v.code != 0 || v.rep.Verdict != "ok" || !v.rep.Anchored || !strings.Contains(v.out, "OK: anchored") {
		t.Fatalf("verify of an untouched store: exit %d, verdict %q:\n%s", v.code, v.rep.Verdict, v.out)
	}

	// scenario gives each case a copy of the good store (SQLite: the data
	// directory; PostgreSQL: a cloned database) and the anchors, and a
	// config for verify alone.
	scenario := func(t *testing.T) (dir, cfg, db, dbURL string) {
		t.Helper()
		dir = t.TempDir()
		copyTree(t, anchors, filepath.Join(dir, "anchors"))
		if st == storeSQLite {
			copyTree(t, d.dataDir, filepath.Join(dir, "data"))
		} else {
			if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
				t.Fatal(err)
			}
			dbURL = cloneDB(t, d.dbURL)
		}
		return dir, verifyConfig(t, dir, dbURL, filepath.Join(dir, "anchors")), filepath.Join(dir, "data", "evidence.db"), dbURL
	}
	wantFail := func(t *testing.T, v verifyRun, kinds ...string) {
		t.Helper()
		if v.code != 1 || v.rep.Verdict != "fail" || v.rep.OK || !strings.Contains(v.out, "FAIL") || strings.Contains(v.out, "\nOK") {
			t.Fatalf("verify: exit %d, verdict %q, want exit 1 and fail:\n%s", v.code, v.rep.Verdict, v.out)
		}
		for _, k := range kinds {
			if !v.has(k) {
				t.Errorf("verify names no %s problem:\n%s", k, v.out)
			}
		}
	}

	t.Run("store-deleted", func(t *testing.T) {
		dir, cfg, db, dbURL := scenario(t)
		if st == storeSQLite {
			for _, p := range []string{db, db + "-wal", db + "-shm"} {
				_ = os.Remove(p)
			}
		} else {
			pgAdmin(t, "DROP DATABASE "+pgx.Identifier{dbName(t, dbURL)}.Sanitize()+" WITH (FORCE)")
		}
		before := listDir(t, dir)
		wantFail(t, runVerifyCLI(t, cfg, vkey), "missing_store")
		if after := listDir(t, dir); !slices.Equal(before, after) {
			t.Errorf("verify of a deleted store changed the directory:\nbefore %q\nafter  %q", before, after)
		}
		if st == storePostgres {
			if n := pgQueryInt(t, adminDatabaseURL(), fmt.Sprintf("SELECT count(*) FROM pg_database WHERE datname = '%s'", dbName(t, dbURL))); n != 0 {
				t.Errorf("verify created the deleted database again")
			}
		}
	})
	if st == storeSQLite {
		t.Run("zero-byte-file", func(t *testing.T) {
			dir, cfg, db, _ := scenario(t)
			if err := os.Truncate(db, 0); err != nil {
				t.Fatal(err)
			}
			before := listDir(t, dir)
			wantFail(t, runVerifyCLI(t, cfg, vkey), "missing_store")
			if after := listDir(t, dir); !slices.Equal(before, after) {
				t.Errorf("verify of a 0-byte store changed the directory:\nbefore %q\nafter  %q", before, after)
			}
		})
		t.Run("rule-index-rows-deleted", func(t *testing.T) {
			dir, cfg, db, _ := scenario(t)
			sqliteExec(t, db, "DELETE FROM evidence_rule_ids WHERE rule_id = 'e2e.grant'")
			before := listDir(t, dir)
			v := runVerifyCLI(t, cfg, vkey)
			wantFail(t, v, "rule_index")
			if after := listDir(t, dir); !slices.Equal(before, after) {
				t.Errorf("verify changed the directory:\nbefore %q\nafter  %q", before, after)
			}
		})
	} else {
		t.Run("no-schema", func(t *testing.T) {
			dir := t.TempDir()
			empty := newPostgresDB(t)
			cfg := verifyConfig(t, dir, empty, filepath.Join(dir, "anchors"))
			wantFail(t, runVerifyCLI(t, cfg, vkey), "missing_store")
			if n := pgQueryInt(t, empty, "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"); n != 0 {
				t.Errorf("verify of an empty database created %d tables", n)
			}
		})
	}
	t.Run("all-rows-deleted", func(t *testing.T) {
		dir, cfg, db, dbURL := scenario(t)
		stmts := []string{"DELETE FROM evidence_events", "DELETE FROM evidence_tree", "DELETE FROM evidence_tree_hashes",
			"DELETE FROM evidence_checkpoints", "DELETE FROM evidence_rollup_hourly", "DELETE FROM evidence_rollup_rules_hourly"}
		if st == storeSQLite {
			sqliteExec(t, db, stmts...)
		} else {
			pgExec(t, dbURL, stmts...)
		}
		before := listDir(t, dir)
		wantFail(t, runVerifyCLI(t, cfg, vkey), "empty_store", "external_checkpoint")
		if after := listDir(t, dir); !slices.Equal(before, after) {
			t.Errorf("verify changed the directory:\nbefore %q\nafter  %q", before, after)
		}
	})
	t.Run("rolled-back-to-saved-copy", func(t *testing.T) {
		dir, cfg, db, dbURL := scenario(t)
		if st == storeSQLite {
			if err := os.RemoveAll(filepath.Join(dir, "data")); err != nil {
				t.Fatal(err)
			}
			copyTree(t, saved, filepath.Join(dir, "data"))
			_ = db
		} else {
			name := dbName(t, dbURL)
			pgAdmin(t, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			pgAdmin(t, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", pgx.Identifier{name}.Sanitize(), pgx.Identifier{dbName(t, savedDB)}.Sanitize()))
		}
		// On its own the copy is a consistent store: without the anchors,
		// verify can only say so, and says what it could not check.
		empty := filepath.Join(dir, "no-anchors")
		if err := os.Mkdir(empty, 0o700); err != nil {
			t.Fatal(err)
		}
		v := runVerifyCLI(t, cfg, vkey, "--checkpoints", empty)
		if v.code != 0 || v.rep.Verdict != "ok_unanchored" || v.rep.Anchored || !strings.Contains(v.out, "internal consistency only") {
			t.Fatalf("verify of the copy without anchors: exit %d, verdict %q, want 0 and ok_unanchored:\n%s", v.code, v.rep.Verdict, v.out)
		}
		if v := runVerifyCLI(t, cfg, vkey, "--checkpoints", empty, "--require-anchor"); v.code != 3 {
			t.Errorf("verify --require-anchor without anchors exits %d, want 3:\n%s", v.code, v.out)
		}
		// With the copies kept outside the database, the rollback shows.
		wantFail(t, runVerifyCLI(t, cfg, vkey), "external_checkpoint", "deleted_tail")
	})
	t.Run("older-schema", func(t *testing.T) {
		dir, cfg, db, dbURL := scenario(t)
		const q = "DELETE FROM portcullis_schema_version WHERE version_id = (SELECT max(version_id) FROM portcullis_schema_version)"
		latest := 0
		if st == storePostgres {
			latest = pgQueryInt(t, dbURL, "SELECT max(version_id) FROM portcullis_schema_version")
		}
		if st == storeSQLite {
			sqliteExec(t, db, q)
		} else {
			pgExec(t, dbURL, q)
		}
		before := listDir(t, dir)
		v := runVerifyCLI(t, cfg, vkey)
		if v.code != 2 || v.rep.Verdict != "error" || !strings.Contains(v.out, "gateway migrate") {
			t.Fatalf("verify of an older schema: exit %d, verdict %q, want 2 naming gateway migrate:\n%s", v.code, v.rep.Verdict, v.out)
		}
		if after := listDir(t, dir); !slices.Equal(before, after) {
			t.Errorf("verify changed the directory (migrated?):\nbefore %q\nafter  %q", before, after)
		}
		if st == storePostgres {
			if n := pgQueryInt(t, dbURL, fmt.Sprintf("SELECT count(*) FROM portcullis_schema_version WHERE version_id = %d", latest)); n != 0 {
				t.Errorf("verify migrated the database")
			}
		}
	})

	// Phase 3: a gateway dies (SIGKILL) with events no checkpoint signed;
	// its chain head was copied out a moment before.
	g = d.start(t)
	// The checkpointer passes once when it starts leading: let that pass
	// (over nothing new) end before the calls, so none of them is signed.
	if _, ok := pollUntil(20*time.Second, func() bool { return strings.Contains(g.stderr.String(), "evidence checkpointer: leading") }); !ok {
		t.Fatal("the checkpointer never led")
	}
	time.Sleep(time.Second)
	someCalls(t, g, d, 3, "phase3")
	// chain_start and policy_activated (signed by the pass at start), then
	// 3 allowed calls × 2 events and the denied call's 2: none signed.
	chain := waitHeadSeq(t, anchors, vkey, 10)
	g.kill()
	before := listDir(t, d.dataDir)
	v = runVerifyCLI(t, d.configPath, vkey)
	if v.code != 0 || v.rep.Verdict != "ok" || v.rep.NotCheckpointed != 8 {
		t.Fatalf("verify after a crash, before any deletion: exit %d, %d events not checkpointed (want the calls' 8):\n%s", v.code, v.rep.NotCheckpointed, v.out)
	}
	if after := listDir(t, d.dataDir); !slices.Equal(before, after) {
		t.Errorf("verify beside a crashed gateway's WAL changed the data directory:\nbefore %q\nafter  %q", before, after)
	}
	// The tail no checkpoint signed: every event after the chain's last leaf.
	del := fmt.Sprintf("DELETE FROM evidence_events WHERE chain_id = '%s' AND chain_seq > (SELECT max(chain_seq) FROM evidence_tree WHERE chain_id = '%s')", chain, chain)
	if st == storeSQLite {
		sqliteExec(t, dbFile, del)
	} else {
		pgExec(t, d.dbURL, del)
	}
	empty := filepath.Join(d.dir, "no-anchors")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	if v := runVerifyCLI(t, d.configPath, vkey, "--checkpoints", empty); v.code != 0 || v.rep.Verdict != "ok_unanchored" {
		t.Fatalf("the deleted unsigned tail without anchors: exit %d, verdict %q; the store alone was expected to look consistent:\n%s", v.code, v.rep.Verdict, v.out)
	}
	v = runVerifyCLI(t, d.configPath, vkey)
	wantFail(t, v, "deleted_tail")
	t.Logf("%s: deleted unsigned tail:\n%s", st, v.out)
}
