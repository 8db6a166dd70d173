package results_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence/results"
	"github.com/portcullis/portcullis/wire"
)

type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func (c *clock) opts(dir string) results.Options {
	return results.Options{Dir: dir, Retention: time.Hour, MaxBytes: 4096, Now: c.now}
}

func record(principal, session string, data any) results.Record {
	return results.Record{ReceiptID: uuid.Must(uuid.NewV7()), PrincipalID: principal, SessionID: session, Tool: "Exec",
		Time: time.Now(), Output: wire.ToolOutput{Success: true, Data: data, Metadata: map[string]any{"backend": "process"}}}
}

func outputOf(t *testing.T, st results.Stored) map[string]any {
	t.Helper()
	if st.Output == nil {
		t.Fatalf("stored result has no output: %+v", st)
	}
	var o map[string]any
	if err := json.Unmarshal(*st.Output, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestOwnerOnly: a result is read back only by the principal and session
// that made the call; for anyone else, and for a receipt never kept, the
// answer is the same ErrNotFound.
func TestOwnerOnly(t *testing.T) {
	t.Parallel()
	c := newClock()
	s := results.New(c.opts(filepath.Join(t.TempDir(), "results")))
	r := record("agent-a", "run-1", map[string]any{"stdout": "hello"})
	if err := s.Save(r); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(r.ReceiptID, "agent-a", "run-1")
	if err != nil {
		t.Fatalf("owner's Load: %v", err)
	}
	if o := outputOf(t, st); o["data"].(map[string]any)["stdout"] != "hello" || st.Tool != "Exec" || st.ReceiptID != r.ReceiptID.String() {
		t.Errorf("stored %+v / %v", st, o)
	}
	for _, who := range []struct{ principal, session string }{
		{"agent-b", "run-1"}, // another principal, same session name
		{"agent-a", "run-2"}, // same principal, another session
		{"agent-a", ""},      // no session
		{"", "run-1"},
		{"agent-A", "run-1"},
	} {
		if _, err := s.Load(r.ReceiptID, who.principal, who.session); !errors.Is(err, results.ErrNotFound) {
			t.Errorf("Load as %q/%q = %v, want ErrNotFound", who.principal, who.session, err)
		}
	}
	if _, err := s.Load(uuid.Must(uuid.NewV7()), "agent-a", "run-1"); !errors.Is(err, results.ErrNotFound) {
		t.Errorf("Load of an unknown receipt = %v", err)
	}
	// Calls without a session keep nothing.
	nr := record("agent-a", "", "x")
	if err := s.Save(nr); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	if _, err := os.Stat(filepath.Join(s.Dir(), nr.ReceiptID.String()+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a call without a session was kept: %v", err)
	}
}

// TestExpiry: past the retention a result is gone, on read and by sweep.
func TestExpiry(t *testing.T) {
	t.Parallel()
	c := newClock()
	dir := filepath.Join(t.TempDir(), "results")
	s := results.New(c.opts(dir))
	a, b := record("p", "s", "a"), record("p", "s", "b")
	for _, r := range []results.Record{a, b} {
		if err := s.Save(r); err != nil {
			t.Fatal(err)
		}
	}
	s.Flush()
	c.add(59 * time.Minute)
	if _, err := s.Load(a.ReceiptID, "p", "s"); err != nil {
		t.Fatalf("Load before expiry: %v", err)
	}
	c.add(2 * time.Minute)
	if _, err := s.Load(a.ReceiptID, "p", "s"); !errors.Is(err, results.ErrNotFound) {
		t.Fatalf("Load after expiry = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(filepath.Join(dir, a.ReceiptID.String()+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an expired result read was not removed: %v", err)
	}
	// b is swept by mtime: set it back, as if written an hour ago.
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(dir, b.ReceiptID.String()+".json"), old, old); err != nil {
		t.Fatal(err)
	}
	s2 := results.New(results.Options{Dir: dir, Retention: time.Hour, MaxBytes: 4096})
	if n, err := s2.Sweep(); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%d files left after the sweep", len(ents))
	}
}

// TestRedactedOnDisk: secrets a tool printed never reach the result file,
// and the read-back output has them redacted; long output is not cut
// (unlike receipt args).
func TestRedactedOnDisk(t *testing.T) {
	t.Parallel()
	c := newClock()
	dir := filepath.Join(t.TempDir(), "results")
	o := c.opts(dir)
	o.MaxBytes = 1 << 20
	s := results.New(o)
	secrets := []string{"sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA", "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ012345", "hunter2hunter2"}
	long := strings.Repeat("x", 10000)
	r := record("p", "s", map[string]any{
		"stdout":   "key " + secrets[0] + "\nAWS_SECRET_ACCESS_KEY=" + secrets[2] + "\n" + long,
		"password": "plain-" + secrets[2],
		"env":      map[string]any{"GITHUB_TOKEN": secrets[1]},
	})
	if err := s.Save(r); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	b, err := os.ReadFile(filepath.Join(dir, r.ReceiptID.String()+".json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range secrets {
		if bytes.Contains(b, []byte(sec)) {
			t.Errorf("secret %q reached the result file", sec)
		}
	}
	st, err := s.Load(r.ReceiptID, "p", "s")
	if err != nil {
		t.Fatal(err)
	}
	data := outputOf(t, st)["data"].(map[string]any)
	if out := data["stdout"].(string); !strings.Contains(out, "[REDACTED]") || !strings.Contains(out, long) {
		t.Errorf("stdout read back: redaction or length wrong (%d bytes)", len(out))
	}
	if data["password"] != "[REDACTED]" || data["env"].(map[string]any)["GITHUB_TOKEN"] != "[REDACTED]" {
		t.Errorf("secret fields read back: %v", data)
	}
}

// TestSizeBound: an output over MaxBytes is kept only as a note that it
// was too large (none of its content), and the directory as a whole stays
// within MaxTotalBytes, the oldest results giving way.
func TestSizeBound(t *testing.T) {
	t.Parallel()
	c := newClock()
	dir := filepath.Join(t.TempDir(), "results")
	s := results.New(results.Options{Dir: dir, Retention: time.Hour, MaxBytes: 2048, MaxTotalBytes: 8192, Now: c.now})
	big := record("p", "s", strings.Repeat("BIGOUTPUT", 1000))
	if err := s.Save(big); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(big.ReceiptID, "p", "s")
	if err != nil {
		t.Fatal(err)
	}
	if st.Omitted != results.OmittedTooLarge || st.Output != nil || st.Bytes < 9000 {
		t.Errorf("oversized result stored as %+v", st)
	}
	s.Flush()
	if b, _ := os.ReadFile(filepath.Join(dir, big.ReceiptID.String()+".json")); bytes.Contains(b, []byte("BIGOUTPUT")) {
		t.Error("the oversized output's content reached the disk")
	}
	var ids []uuid.UUID
	for i := range 20 {
		r := record("p", "s", strings.Repeat("y", 1000+i))
		ids = append(ids, r.ReceiptID)
		if err := s.Save(r); err != nil {
			t.Fatal(err)
		}
		s.Flush()
		c.add(time.Second)
	}
	var total int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fi, _ := e.Info()
		total += fi.Size()
	}
	if total > 8192 {
		t.Errorf("results take %d bytes, bound 8192", total)
	}
	if _, err := s.Load(ids[0], "p", "s"); !errors.Is(err, results.ErrNotFound) {
		t.Errorf("the oldest result survived past the total bound: %v", err)
	}
	if _, err := s.Load(ids[len(ids)-1], "p", "s"); err != nil {
		t.Errorf("the newest result was evicted: %v", err)
	}
}

// TestFiles: the directory is 0700, each result 0600, and a symlink
// planted in place of a result file is not followed.
func TestFiles(t *testing.T) {
	t.Parallel()
	c := newClock()
	dir := filepath.Join(t.TempDir(), "results")
	s := results.New(c.opts(dir))
	r := record("p", "s", "x")
	if err := s.Save(r); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("results dir mode %v (%v), want 0700", fi.Mode(), err)
	}
	p := filepath.Join(dir, r.ReceiptID.String()+".json")
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("result file mode %v (%v), want 0600", fi.Mode(), err)
	}
	// Someone plants a symlink to another principal's result under a
	// receipt id they know.
	other := record("victim", "s", "victim's output")
	if err := s.Save(other); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	planted := uuid.Must(uuid.NewV7())
	if err := os.Symlink(filepath.Join(dir, other.ReceiptID.String()+".json"), filepath.Join(dir, planted.String()+".json")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(planted, "victim", "s"); !errors.Is(err, results.ErrNotFound) {
		t.Errorf("Load through a planted symlink = %v, want ErrNotFound", err)
	}
}

// BenchmarkSave is what keeping a result adds to an allowed call with a
// session: redaction, one small file written and renamed (no fsync).
func BenchmarkSave(b *testing.B) {
	s := results.New(results.Options{Dir: filepath.Join(b.TempDir(), "results"), Retention: time.Hour})
	out := wire.ToolOutput{Success: true, Data: map[string]any{"exit_code": 0, "stdout": "hello from portcullis\n", "stderr": "",
		"stdout_truncated": false, "stderr_truncated": false, "timed_out": false, "signal": nil, "duration_ms": 3},
		Metadata: map[string]any{"backend": "bwrap", "duration_ms": 3, "receipt_id": uuid.NewString()}}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Save(results.Record{ReceiptID: uuid.Must(uuid.NewV7()), PrincipalID: "agent", SessionID: "run", Tool: "Exec", Time: time.Now(), Output: out}); err != nil {
			b.Fatal(err)
		}
		s.Flush() // the writer's cost, not only the queueing
	}
}
