package evidence_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// lateFixture is a real SQLite store behind a faultyStore, a Writer, and
// late outcomes spooled to a file.
type lateFixture struct {
	t     *testing.T
	store *faultyStore
	w     *evidence.Writer
	spool string
}

func newLateFixture(t *testing.T) *lateFixture {
	f := &lateFixture{t: t, store: &faultyStore{Store: openSQLite(t)}, spool: filepath.Join(t.TempDir(), "data", "late.spool")}
	f.w = evidence.NewWriter(f.store, evidence.WriterOptions{InstanceID: "late-test", CommitTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = f.w.Close(context.Background()) })
	return f
}

func (f *lateFixture) open(opts evidence.LateOptions) *evidence.LateOutcomes {
	f.t.Helper()
	opts.Writer, opts.Receipts, opts.Spool, opts.WriteTimeout = f.w, f.store, f.spool, 2*time.Second
	if opts.Healthy == nil {
		opts.Healthy = f.w.Healthy
	}
	l, err := evidence.OpenLateOutcomes(opts)
	if err != nil {
		f.t.Fatalf("OpenLateOutcomes: %v", err)
	}
	return l
}

// decide commits an allow decision and returns its id.
func (f *lateFixture) decide() uuid.UUID {
	f.t.Helper()
	d := dec("Exec")
	if err := f.w.Append(context.Background(), d); err != nil {
		f.t.Fatal(err)
	}
	return d.ID
}

func (f *lateFixture) down(down bool) {
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	f.store.fail = 0
	if down {
		f.store.fail = 1 << 30
	}
}

func outcomeOf(receipt uuid.UUID, status string) evidence.Event {
	return evidence.Event{ID: uuid.Must(uuid.NewV7()), ReceiptID: receipt, Kind: evidence.KindOutcome, Time: time.Now(),
		InstanceID: "late-test", Outcome: &wire.Outcome{Status: status, Backend: "process"}}
}

func notRun(receipt uuid.UUID) evidence.Event {
	code := string(wire.CodeEvidenceUnavailable)
	return evidence.Event{ID: uuid.Must(uuid.NewV7()), ReceiptID: receipt, Kind: evidence.KindOutcome, Time: time.Now(),
		InstanceID: "late-test", Outcome: &wire.Outcome{Status: wire.StatusError, ErrorCode: &code, Backend: "none"}}
}

func statusOf(t *testing.T, s evidence.Store, id uuid.UUID) string {
	t.Helper()
	rc, err := s.Receipt(context.Background(), id)
	if err != nil {
		t.Fatalf("receipt %s: %v", id, err)
	}
	if rc.Outcome == nil {
		return wire.StatusPending
	}
	return rc.Outcome.Status
}

// TestLateSpoolSurvivesCrash: outcomes queued while the store is down are
// on disk when Queue returns; a gateway that dies before the store is back
// loses none of them: the next start records the known outcomes and the
// "did not run" outcome of a decision that committed after all, drops the
// one whose decision never committed, and marks interrupted only the call
// whose outcome nobody knew. Every outcome is written once; the chain
// verifies; the spool is empty afterwards.
func TestLateSpoolSurvivesCrash(t *testing.T) {
	t.Parallel()
	f := newLateFixture(t)
	ran1, ran2, ghost, running := f.decide(), f.decide(), f.decide(), f.decide()
	never := uuid.Must(uuid.NewV7())
	f.down(true)
	l := f.open(evidence.LateOptions{})
	l.Queue(outcomeOf(ran1, wire.StatusSucceeded), false)
	l.Queue(outcomeOf(ran2, wire.StatusFailed), false)
	l.Queue(notRun(ghost), true)
	l.Queue(notRun(never), true)
	if n := l.Flush(context.Background()); n != 4 {
		t.Fatalf("Flush with the store down left %d queued, want 4", n)
	}
	// The process dies: nothing more is written (Close only releases the
	// lock; Queue already made every record durable).
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f.down(false)
	w2 := evidence.NewWriter(f.store, evidence.WriterOptions{InstanceID: "late-test"})
	defer w2.Close(context.Background())
	f.w = w2
	l2 := f.open(evidence.LateOptions{})
	defer l2.Close()
	if got := l2.Counts()[evidence.LateReplayed]; got != 4 {
		t.Fatalf("replayed %d outcomes from the spool, want 4", got)
	}
	recorded, interrupted, err := evidence.RecoverStart(context.Background(), f.store, w2, l2, "late-test")
	if err != nil {
		t.Fatalf("RecoverStart: %v", err)
	}
	if recorded != 3 || interrupted != 1 {
		t.Errorf("RecoverStart recorded %d, interrupted %d; want 3, 1", recorded, interrupted)
	}
	for id, want := range map[uuid.UUID]string{ran1: wire.StatusSucceeded, ran2: wire.StatusFailed, ghost: wire.StatusError, running: wire.StatusInterrupted} {
		if got := statusOf(t, f.store, id); got != want {
			t.Errorf("receipt %s: %s, want %s", id, got, want)
		}
	}
	if _, err := f.store.Receipt(context.Background(), never); !errors.Is(err, evidence.ErrNotFound) {
		t.Errorf("a receipt appeared for a decision that never committed: %v", err)
	}
	if c := l2.Counts(); c[evidence.LateNoDecision] != 1 {
		t.Errorf("counts %v, want no_decision 1", c)
	}
	_ = w2.Close(context.Background())
	verify(t, f.store, "late-test")
	if fi, err := os.Stat(f.spool); err != nil || fi.Size() != 8 || fi.Mode().Perm() != 0o600 {
		t.Errorf("spool after recovery: %v %v, want 8 bytes (magic only), mode 0600", fi, err)
	}
}

// TestLateSpoolReplayIdempotent: an outcome spooled, then recorded by the
// same process, is not written again at the next start, even when its
// "done" mark was lost (the receipt has an outcome: it is skipped).
func TestLateSpoolReplayIdempotent(t *testing.T) {
	t.Parallel()
	f := newLateFixture(t)
	id := f.decide()
	ev := outcomeOf(id, wire.StatusSucceeded)
	// Committed, but the writer reports failure (result lost).
	f.store.mu.Lock()
	f.store.fail, f.store.ghost = 1, true
	f.store.mu.Unlock()
	if err := f.w.Append(context.Background(), ev); err == nil {
		t.Fatal("ghost commit reported success")
	}
	l := f.open(evidence.LateOptions{})
	l.Queue(ev, false)
	_ = l.Close() // dies before its next pass
	w2 := evidence.NewWriter(f.store, evidence.WriterOptions{InstanceID: "late-test"})
	defer w2.Close(context.Background())
	_ = f.w.Close(context.Background())
	f.w = w2
	l2 := f.open(evidence.LateOptions{})
	defer l2.Close()
	if _, _, err := evidence.RecoverStart(context.Background(), f.store, f.w, l2, "late-test"); err != nil {
		t.Fatal(err)
	}
	if c := l2.Counts(); c[evidence.LateAlreadyRecorded] != 1 || c[evidence.LateRecorded] != 0 {
		t.Errorf("counts %v: the committed outcome was written again", c)
	}
	evs, err := f.store.Store.(evidence.Ledger).EventsOfReceipt(context.Background(), id)
	if err != nil || len(evs) != 2 {
		t.Fatalf("receipt has %d events (%v), want decision + one outcome", len(evs), err)
	}
	_ = f.w.Close(context.Background())
	verify(t, f.store, "late-test")
}

// spoolWith writes n known outcomes to a fresh spool and returns its path.
func spoolWith(t *testing.T, f *lateFixture, n int) []uuid.UUID {
	t.Helper()
	f.down(true)
	l := f.open(evidence.LateOptions{})
	var ids []uuid.UUID
	for range n {
		ev := outcomeOf(uuid.Must(uuid.NewV7()), wire.StatusSucceeded)
		ids = append(ids, ev.ReceiptID)
		l.Queue(ev, false)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestLateSpoolTornRecord: a crash mid-append leaves a torn last record;
// loading keeps every whole record before it, cuts the file there, and
// later appends are read back.
func TestLateSpoolTornRecord(t *testing.T) {
	t.Parallel()
	cases := map[string]func(t *testing.T, path string, size int64){
		"cut-mid-record": func(t *testing.T, path string, size int64) {
			if err := os.Truncate(path, size-7); err != nil {
				t.Fatal(err)
			}
		},
		"half-header": func(t *testing.T, path string, _ int64) {
			fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = fh.Write([]byte{0, 0})
			fh.Close()
		},
		"bad-checksum": func(t *testing.T, path string, size int64) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[size-3] ^= 0xff // inside the last record's payload
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newLateFixture(t)
			spoolWith(t, f, 3)
			fi, err := os.Stat(f.spool)
			if err != nil {
				t.Fatal(err)
			}
			damage(t, f.spool, fi.Size())
			want := 2
			if name == "half-header" {
				want = 3
			}
			l := f.open(evidence.LateOptions{})
			if known, _ := l.Pending(); known != want {
				t.Fatalf("loaded %d outcomes from a spool with a %s, want %d", known, name, want)
			}
			l.Queue(outcomeOf(uuid.Must(uuid.NewV7()), wire.StatusSucceeded), false)
			_ = l.Close()
			l = f.open(evidence.LateOptions{})
			defer l.Close()
			if known, _ := l.Pending(); known != want+1 {
				t.Fatalf("after the cut and one more append, %d outcomes load, want %d", known, want+1)
			}
		})
	}
}

// TestLateSpoolFile: the spool is 0600, refuses a symlink planted at its
// path and a second process (lock), and refuses a file that is not a
// spool.
func TestLateSpoolFile(t *testing.T) {
	t.Parallel()
	t.Run("mode", func(t *testing.T) {
		t.Parallel()
		f := newLateFixture(t)
		if err := os.MkdirAll(filepath.Dir(f.spool), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.spool, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		l := f.open(evidence.LateOptions{})
		defer l.Close()
		if fi, err := os.Stat(f.spool); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("spool mode %v (%v), want 0600", fi.Mode(), err)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		t.Parallel()
		f := newLateFixture(t)
		target := filepath.Join(t.TempDir(), "elsewhere")
		if err := os.WriteFile(target, []byte("do not touch"), 0o600); err != nil {
			t.Fatal(err)
		}
		_ = os.MkdirAll(filepath.Dir(f.spool), 0o700)
		if err := os.Symlink(target, f.spool); err != nil {
			t.Fatal(err)
		}
		if l, err := evidence.OpenLateOutcomes(evidence.LateOptions{Writer: f.w, Receipts: f.store, Spool: f.spool}); err == nil {
			l.Close()
			t.Fatal("OpenLateOutcomes followed a symlink planted at the spool's path")
		}
		if b, _ := os.ReadFile(target); string(b) != "do not touch" {
			t.Errorf("the symlink's target was changed: %q", b)
		}
	})
	t.Run("locked", func(t *testing.T) {
		t.Parallel()
		f := newLateFixture(t)
		l := f.open(evidence.LateOptions{})
		defer l.Close()
		if l2, err := evidence.OpenLateOutcomes(evidence.LateOptions{Writer: f.w, Receipts: f.store, Spool: f.spool}); !errors.Is(err, evidence.ErrSpoolLocked) {
			if l2 != nil {
				l2.Close()
			}
			t.Fatalf("second open = %v, want ErrSpoolLocked", err)
		}
	})
	t.Run("not-a-spool", func(t *testing.T) {
		t.Parallel()
		f := newLateFixture(t)
		_ = os.MkdirAll(filepath.Dir(f.spool), 0o700)
		if err := os.WriteFile(f.spool, []byte("something else entirely"), 0o600); err != nil {
			t.Fatal(err)
		}
		if l, err := evidence.OpenLateOutcomes(evidence.LateOptions{Writer: f.w, Receipts: f.store, Spool: f.spool}); err == nil {
			l.Close()
			t.Fatal("a file that is not a spool was taken as one")
		}
	})
}

// TestLateSpoolBounded: past SpoolMaxBytes an outcome is kept in memory
// only, counted as spool_overflow; once recorded, the spool is cut back.
func TestLateSpoolBounded(t *testing.T) {
	t.Parallel()
	f := newLateFixture(t)
	ids := []uuid.UUID{f.decide(), f.decide(), f.decide()}
	f.down(true)
	l := f.open(evidence.LateOptions{SpoolMaxBytes: 600})
	defer l.Close()
	for _, id := range ids {
		l.Queue(outcomeOf(id, wire.StatusSucceeded), false)
	}
	if c := l.Counts(); c[evidence.LateSpoolOverflow] == 0 {
		t.Fatalf("counts %v: no spool_overflow past a 600-byte spool", c)
	}
	if known, _ := l.Pending(); known != 3 {
		t.Fatalf("%d outcomes queued, want all 3 (in memory)", known)
	}
	if fi, _ := os.Stat(f.spool); fi.Size() > 600 {
		t.Errorf("spool grew to %d bytes, bound 600", fi.Size())
	}
	f.down(false)
	// The store is back; it must answer for LateSettle before a pass.
	deadline := time.Now().Add(30 * time.Second)
	for l.Flush(context.Background()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("late outcomes not recorded 30s after the store came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range ids {
		if got := statusOf(t, f.store, id); got != wire.StatusSucceeded {
			t.Errorf("receipt %s: %s", id, got)
		}
	}
	if fi, _ := os.Stat(f.spool); fi.Size() != 8 {
		t.Errorf("spool is %d bytes with nothing queued, want 8", fi.Size())
	}
}

// TestLateSpoolConcurrent: outcomes queued at once (group fsync) are all
// on disk when Queue returns.
func TestLateSpoolConcurrent(t *testing.T) {
	t.Parallel()
	f := newLateFixture(t)
	f.down(true)
	l := f.open(evidence.LateOptions{})
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() { l.Queue(outcomeOf(uuid.Must(uuid.NewV7()), wire.StatusSucceeded), false) })
	}
	wg.Wait()
	_ = l.Close()
	l = f.open(evidence.LateOptions{})
	defer l.Close()
	if known, _ := l.Pending(); known != 64 {
		t.Fatalf("%d of 64 concurrently queued outcomes on disk", known)
	}
}
