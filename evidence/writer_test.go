package evidence_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/wire"
)

var update = flag.Bool("update", false, "rewrite golden files")

// faultyStore wraps a real store and injects failures into Append.
type faultyStore struct {
	evidence.Store
	mu      sync.Mutex
	fail    int  // fail this many next Appends with ErrUnavailable
	ghost   bool // commit, then report failure (unknown commit result)
	poison  string
	batches [][]uuid.UUID
	gate    chan struct{} // when set, the first Append waits on it
}

func (f *faultyStore) Append(ctx context.Context, evs []evidence.Event) error {
	f.mu.Lock()
	gate := f.gate
	f.gate = nil
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range evs {
		if f.poison != "" && e.Tool == f.poison {
			return errors.New("poisoned event")
		}
	}
	if f.fail > 0 {
		f.fail--
		if f.ghost {
			if err := f.Store.Append(ctx, evs); err != nil {
				return err
			}
		}
		return evidence.ErrUnavailable
	}
	ids := make([]uuid.UUID, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	f.batches = append(f.batches, ids)
	return f.Store.Append(ctx, evs)
}

func openSQLite(t *testing.T) evidence.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "e.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func dec(tool string) evidence.Event {
	id, _ := uuid.NewV7()
	return evidence.Event{ID: id, Kind: evidence.KindDecision, Decision: wire.DecisionAllow, Tool: tool}
}

func verify(t *testing.T, s evidence.Store, instance string) []evidence.Event {
	t.Helper()
	chain, _, _, err := s.ChainHead(context.Background(), instance)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.ChainEvents(context.Background(), chain)
	if err != nil {
		t.Fatal(err)
	}
	if err := evidence.VerifyChain(evs); err != nil {
		t.Fatalf("VerifyChain: %v", err)
	}
	return evs
}

func TestWriterFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		ghost bool
	}{
		{"not committed", false},
		{"committed but reported failed", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			fs := &faultyStore{Store: openSQLite(t), ghost: tc.ghost}
			w := evidence.NewWriter(fs, evidence.WriterOptions{InstanceID: "i"})
			defer w.Close(ctx)
			if err := w.Append(ctx, dec("a")); err != nil {
				t.Fatal(err)
			}
			fs.mu.Lock()
			fs.fail = 2
			fs.mu.Unlock()
			for range 2 {
				if err := w.Append(ctx, dec("lost")); !errors.Is(err, evidence.ErrUnavailable) {
					t.Fatalf("Append during failure = %v, want ErrUnavailable", err)
				}
			}
			if w.Healthy() {
				t.Error("Healthy after failed commit")
			}
			if err := w.Append(ctx, dec("b"), dec("c")); err != nil {
				t.Fatalf("Append after recovery: %v", err)
			}
			if !w.Healthy() {
				t.Error("not Healthy after a good commit")
			}
			evs := verify(t, fs.Store, "i")
			want := 4 // start, a, b, c
			if tc.ghost {
				want = 6 // the two ghost commits are real and chained
			}
			if len(evs) != want {
				t.Errorf("chain has %d events, want %d", len(evs), want)
			}
		})
	}
}

func TestWriterCallsStayTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := &faultyStore{Store: openSQLite(t)}
	w := evidence.NewWriter(fs, evidence.WriterOptions{InstanceID: "i", MaxBatch: 5})
	defer w.Close(ctx)
	var wg sync.WaitGroup
	calls := make([][]evidence.Event, 40)
	for i := range calls {
		calls[i] = []evidence.Event{dec("x"), dec("y"), dec("z")}
		if i%5 == 0 { // some calls bigger than MaxBatch
			calls[i] = append(calls[i], dec("p"), dec("q"), dec("r"))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Append(ctx, calls[i]...); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	batchOf := map[uuid.UUID]int{}
	fs.mu.Lock()
	for b, ids := range fs.batches {
		for _, id := range ids {
			batchOf[id] = b
		}
		if len(ids) > 7 { // chain_start + one 6-event call is the most allowed
			t.Errorf("batch %d has %d events, MaxBatch 5", b, len(ids))
		}
	}
	fs.mu.Unlock()
	for i, c := range calls {
		for _, e := range c {
			if batchOf[e.ID] != batchOf[c[0].ID] {
				t.Fatalf("call %d split across transactions", i)
			}
		}
	}
	verify(t, fs.Store, "i")
}

func TestWriterPoisonIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gate := make(chan struct{})
	fs := &faultyStore{Store: openSQLite(t), poison: "poison", gate: gate}
	w := evidence.NewWriter(fs, evidence.WriterOptions{InstanceID: "i"})
	defer w.Close(ctx)
	var wg sync.WaitGroup
	results := make([]error, 5)
	wg.Add(1)
	go func() { defer wg.Done(); results[0] = w.Append(ctx, dec("first")) }()
	time.Sleep(50 * time.Millisecond) // first batch is now held at the gate
	for i := 1; i < 5; i++ {
		tool := "good"
		if i == 2 {
			tool = "poison"
		}
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = w.Append(ctx, dec(tool)) }()
	}
	time.Sleep(100 * time.Millisecond) // the rest queue into one batch
	close(gate)
	wg.Wait()
	for i, err := range results {
		if (i == 2) != (err != nil) {
			t.Errorf("call %d: err = %v", i, err)
		}
	}
	if evs := verify(t, fs.Store, "i"); len(evs) != 5 {
		t.Errorf("chain has %d events, want 5 (start + 4 good)", len(evs))
	}
}

func TestWriterRejectsInvalid(t *testing.T) {
	t.Parallel()
	w := evidence.NewWriter(openSQLite(t), evidence.WriterOptions{InstanceID: "i"})
	defer w.Close(context.Background())
	other, _ := uuid.NewV7()
	tests := []struct {
		name string
		e    evidence.Event
	}{
		{"chain_start from caller", evidence.Event{Kind: evidence.KindChainStart}},
		{"unknown kind", evidence.Event{Kind: "note"}},
		{"bad decision", evidence.Event{Kind: evidence.KindDecision, Decision: "maybe"}},
		{"decision for another receipt", evidence.Event{Kind: evidence.KindDecision, Decision: "allow", ID: uuid.New(), ReceiptID: other}},
		{"outcome without receipt", evidence.Event{Kind: evidence.KindOutcome, Outcome: &wire.Outcome{Status: "failed"}}},
		{"outcome without status", evidence.Event{Kind: evidence.KindOutcome, ReceiptID: other, Outcome: &wire.Outcome{}}},
		{"args not json", evidence.Event{Kind: evidence.KindDecision, Decision: "deny", Args: json.RawMessage(`{nope`)}},
		{"args not utf8", evidence.Event{Kind: evidence.KindDecision, Decision: "deny", Args: json.RawMessage("\"\xff\"")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := w.Append(context.Background(), tc.e); !errors.Is(err, evidence.ErrInvalidEvent) {
				t.Errorf("Append = %v, want ErrInvalidEvent", err)
			}
		})
	}
}

func TestWriterCloseAndCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gate := make(chan struct{})
	fs := &faultyStore{Store: openSQLite(t), gate: gate}
	w := evidence.NewWriter(fs, evidence.WriterOptions{InstanceID: "i"})
	var acked atomic.Int32
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Append(ctx, dec("q")); err == nil {
				acked.Add(1)
			}
		}()
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Append(cctx, dec("abandoned")) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-errc; err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Append with cancelled ctx = %v, want context.Canceled (never a false ack)", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- w.Close(ctx) }()
	time.Sleep(20 * time.Millisecond)
	close(gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if acked.Load() != 3 {
		t.Errorf("%d of 3 queued appends acknowledged by Close's flush", acked.Load())
	}
	if err := w.Append(ctx, dec("late")); !errors.Is(err, evidence.ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
}

func TestVerifyChainDetectsTampering(t *testing.T) {
	t.Parallel()
	s := openSQLite(t)
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "i"})
	for range 4 {
		if err := w.Append(context.Background(), dec("t")); err != nil {
			t.Fatal(err)
		}
	}
	_ = w.Close(context.Background())
	good := verify(t, s, "i")
	clone := func() []evidence.Event { return append([]evidence.Event(nil), good...) }
	tests := []struct {
		name   string
		mutate func([]evidence.Event) []evidence.Event
	}{
		{"field changed", func(e []evidence.Event) []evidence.Event { e[2].Tool = "u"; return e }},
		{"time changed", func(e []evidence.Event) []evidence.Event { e[3].Time = e[3].Time.Add(time.Microsecond); return e }},
		{"event removed", func(e []evidence.Event) []evidence.Event { return append(e[:2], e[3:]...) }},
		{"events swapped", func(e []evidence.Event) []evidence.Event { e[1], e[2] = e[2], e[1]; return e }},
		{"start removed", func(e []evidence.Event) []evidence.Event { return e[1:] }},
		{"hash rewritten", func(e []evidence.Event) []evidence.Event { e[4].Hash = append([]byte{}, e[3].Hash...); return e }},
		{"link rewritten", func(e []evidence.Event) []evidence.Event {
			e[0].Args = json.RawMessage(`{"prev_chain_id":"","prev_chain_seq":0,"prev_hash":"` + string(make([]byte, 0)) + `"}`)
			return e
		}},
		{"empty", func([]evidence.Event) []evidence.Event { return nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := evidence.VerifyChain(tc.mutate(clone())); !errors.Is(err, evidence.ErrChainBroken) {
				t.Errorf("VerifyChain = %v, want ErrChainBroken", err)
			}
		})
	}
}

// TestCanonicalEncodingGolden pins the hash of a fixed event: changing the
// canonical encoding breaks every stored chain, so it must be deliberate
// (go test -update).
func TestCanonicalEncodingGolden(t *testing.T) {
	t.Parallel()
	e := goldenEvent()
	h, err := evidence.ChainHash(make([]byte, 32), e)
	if err != nil {
		t.Fatal(err)
	}
	got := []byte(hexString(h) + "\n")
	path := filepath.Join("testdata", "canonical_hash.golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update once)", err)
	}
	if string(got) != string(want) {
		t.Errorf("canonical hash = %s, golden %s", got, want)
	}
	// Every content field is covered: changing any one changes the hash.
	mutations := map[string]func(*evidence.Event){
		"principal": func(e *evidence.Event) { e.PrincipalID = "x" },
		"reasons":   func(e *evidence.Event) { e.Reasons = []string{"o", "k"} },
		"args":      func(e *evidence.Event) { e.Args = json.RawMessage(`{"argv": ["/bin/true"]}`) },
		"body":      func(e *evidence.Event) { e.Body = json.RawMessage(`{}`) },
		"scope":     func(e *evidence.Event) { e.Scope = nil },
		"parent":    func(e *evidence.Event) { e.ParentReceiptID = nil },
		"outcome":   func(e *evidence.Event) { e.Outcome.Status = "failed" },
		"seq":       func(e *evidence.Event) { e.ChainSeq = 3 },
		"chain":     func(e *evidence.Event) { e.ChainID = uuid.New() },
		"time":      func(e *evidence.Event) { e.Time = e.Time.Add(time.Microsecond) },
		"error":     func(e *evidence.Event) { e.ErrorCode = "internal" },
		"rule_ids":  func(e *evidence.Event) { e.RuleIDs = []string{"grants.no_grant"} },
	}
	for name, m := range mutations {
		c := e
		o := *e.Outcome
		c.Outcome = &o
		m(&c)
		h2, err := evidence.ChainHash(make([]byte, 32), c)
		if err != nil {
			t.Fatal(err)
		}
		if hexString(h2) == hexString(h) {
			t.Errorf("changing %s does not change the hash", name)
		}
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}

// failingDraws fails the next fail quota-drawing commits after their
// counters were locked and settled, inside the transaction.
type failingDraws struct {
	evidence.Store
	fail int // touched by the writer's goroutine only
}

func (f *failingDraws) AppendDrawing(ctx context.Context, batch []*evidence.QuotaRequest, events func() ([]evidence.Event, error)) error {
	return f.Store.(evidence.QuotaAppender).AppendDrawing(ctx, batch, func() ([]evidence.Event, error) {
		if f.fail > 0 {
			f.fail--
			return nil, fmt.Errorf("%w: injected failure", evidence.ErrUnavailable)
		}
		return events()
	})
}

// TestWriterDrawFailureDrawsNothing: a quota-drawing commit that fails
// fails its caller and draws nothing, so the next call still fits a
// limit of one; the call after that is refused and its refusal is what
// the chain records.
func TestWriterDrawFailureDrawsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := &failingDraws{Store: openSQLite(t), fail: 1}
	w := evidence.NewWriter(fs, evidence.WriterOptions{InstanceID: "q"})
	defer w.Close(ctx)
	q := []wire.Quota{{Key: "agent/Exec", Limit: 1, WindowS: 3600, Cost: 1}}
	now := time.Now()
	refusal := func(d evidence.Event) func(*evidence.QuotaExceeded) []evidence.Event {
		return func(*evidence.QuotaExceeded) []evidence.Event {
			d.Decision, d.RuleIDs = wire.DecisionDeny, []string{"gateway.rate_limited"}
			return []evidence.Event{d}
		}
	}
	lost := dec("lost")
	if ex, err := w.AppendDrawing(ctx, q, now, refusal(lost), lost); !errors.Is(err, evidence.ErrUnavailable) || ex != nil {
		t.Fatalf("AppendDrawing in a failing commit = %+v, %v; want ErrUnavailable", ex, err)
	}
	usage, err := fs.Store.(evidence.ControlStore).QuotaUsage(ctx, q[0].Key, 10)
	if err != nil || len(usage) != 0 {
		t.Fatalf("after a failed commit QuotaUsage = %+v, %v; want no window drawn", usage, err)
	}
	admitted := dec("admitted")
	if ex, err := w.AppendDrawing(ctx, q, now, refusal(admitted), admitted); err != nil || ex != nil {
		t.Fatalf("first call after the failure = %+v, %v; want admitted", ex, err)
	}
	refused := dec("refused")
	if ex, err := w.AppendDrawing(ctx, q, now, refusal(refused), refused); err != nil || ex == nil {
		t.Fatalf("second call = %+v, %v; want refused", ex, err)
	}
	byID := map[uuid.UUID]string{}
	for _, e := range verify(t, fs.Store, "q") {
		byID[e.ID] = e.Decision
	}
	if _, ok := byID[lost.ID]; ok || byID[admitted.ID] != wire.DecisionAllow || byID[refused.ID] != wire.DecisionDeny {
		t.Errorf("chain decisions = %v; want no %s, allow %s, deny %s", byID, lost.ID, admitted.ID, refused.ID)
	}
}

// TestWriterConcurrentDrawsExact: concurrent quota-drawing calls on one
// SQLite store admit exactly the limit, whatever batches they fall in;
// a call refused on its second quota draws nothing from its first.
func TestWriterConcurrentDrawsExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLite(t)
	w := evidence.NewWriter(st, evidence.WriterOptions{InstanceID: "q"})
	defer w.Close(ctx)
	const limit, calls = 7, 64
	now := time.Now()
	exec := wire.Quota{Key: "agent/Exec", Limit: limit, WindowS: 3600, Cost: 1}
	// Every call also draws "agent/all"; the odd ones first ask for a
	// key whose limit nothing fits, so they are refused and must not draw
	// agent/all.
	all := wire.Quota{Key: "agent/all", Limit: 1000, WindowS: 3600, Cost: 1}
	never := wire.Quota{Key: "agent/never", Limit: 0, WindowS: 3600, Cost: 1}
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			qs := []wire.Quota{exec, all}
			if i%2 == 1 {
				qs = []wire.Quota{all, never}
			}
			d := dec("c")
			ex, err := w.AppendDrawing(ctx, qs, now, func(*evidence.QuotaExceeded) []evidence.Event {
				r := d
				r.Decision = wire.DecisionDeny
				return []evidence.Event{r}
			}, d)
			switch {
			case err != nil:
				t.Error(err)
			case ex == nil:
				admitted.Add(1)
			default:
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != limit || refused.Load() != calls-limit {
		t.Fatalf("admitted %d, refused %d; want exactly %d admitted of %d", admitted.Load(), refused.Load(), limit, calls)
	}
	for key, want := range map[string]int64{exec.Key: limit, all.Key: limit, never.Key: 0} {
		usage, err := st.(evidence.ControlStore).QuotaUsage(ctx, key, 10)
		if err != nil {
			t.Fatal(err)
		}
		var used int64
		for _, u := range usage {
			used += u.Used
		}
		if used != want {
			t.Errorf("%s used %d, want %d", key, used, want)
		}
	}
}
