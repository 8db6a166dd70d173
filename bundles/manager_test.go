package bundles

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portcullis/portcullis/policies"
)

type memRecorder struct {
	mu  sync.Mutex
	got []Activation
}

func (r *memRecorder) PolicyActivated(_ context.Context, a Activation) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, a)
	return nil
}

// TestHTTPSourceLifecycle serves bundles over real loopback HTTP: ETag and
// 304, bearer token, a bundle failing its own tests refused (old stays),
// activations recorded.
func TestHTTPSourceLifecycle(t *testing.T) {
	t.Parallel()
	good, err := Build(tinyBundle("true"), BuildOptions{Revision: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	broken := tinyBundle("true")
	broken["portcullis/decision.rego"].Data = []byte("package portcullis\n\ndecision := {\"allow\": true, \"reasons\": [\"other\"]}\n")
	bad, err := Build(broken, BuildOptions{Revision: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	var body atomic.Pointer[[]byte]
	body.Store(&good)
	var requests, notModified atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		b := *body.Load()
		etag := `"` + string(rune('a'+len(b)%26)) + strings.Repeat("x", len(b)%7) + `"`
		if r.Header.Get("If-None-Match") == etag {
			notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		w.Write(b)
	}))
	defer srv.Close()
	tok := t.TempDir() + "/token"
	if err := writeFile(tok, "s3cret\n"); err != nil {
		t.Fatal(err)
	}
	src, err := NewHTTPSource(srv.URL+"/bundle.tar.gz", HTTPOptions{BearerTokenFile: tok})
	if err != nil {
		t.Fatal(err)
	}
	rec := &memRecorder{}
	metrics := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := metrics.Register(reg); err != nil {
		t.Fatal(err)
	}
	m := New(Options{Engine: policies.NewEngine(policies.Options{}), Source: src, Recorder: rec, Metrics: metrics,
		Load: policies.LoadOptions{RunTests: true}})
	ctx := context.Background()
	steps := []struct {
		serve      []byte
		wantStatus string
		wantRev    string
	}{
		{good, ResultActivated, "v1"},
		{good, ResultUnchanged, "v1"}, // 304
		{bad, ResultRefused, "v1"},    // fails its own test
		{bad, ResultRefused, "v1"},    // refused bundles are fetched again, not 304'd
		{good, ResultUnchanged, "v1"}, // the live ETag again: 304
	}
	for i, s := range steps {
		body.Store(&s.serve)
		res, err := m.Reload(ctx, TriggerPoll)
		if res.Status != s.wantStatus || res.Policy.Revision != s.wantRev || (err != nil) != (s.wantStatus == ResultRefused) {
			t.Fatalf("step %d: result %+v err %v, want %s at %s", i, res, err, s.wantStatus, s.wantRev)
		}
		if s.wantStatus == ResultRefused && (res.Reason != "tests" || !strings.Contains(res.Error, "test_reasons")) {
			t.Errorf("step %d: refusal %+v", i, res)
		}
	}
	if notModified.Load() != 2 {
		t.Errorf("304s = %d, want 2", notModified.Load())
	}
	if got := counterValue(t, reg, "portcullis_policy_bundle_refused_total", "tests"); got != 2 {
		t.Errorf("refused{tests} = %v, want 2", got)
	}
	if len(rec.got) != 1 || rec.got[0].Revision != "v1" || rec.got[0].Trigger != TriggerPoll || !rec.got[0].TestsRun {
		t.Errorf("activations recorded = %+v", rec.got)
	}
	if st := m.Status(); st.Activations != 1 || st.Live.Revision != "v1" {
		t.Errorf("status = %+v", st)
	}
}

func TestHTTPSourceRefusesTokenInClear(t *testing.T) {
	t.Parallel()
	if _, err := NewHTTPSource("http://bundles.example.com/b.tar.gz", HTTPOptions{BearerTokenFile: "/t"}); err == nil {
		t.Error("a bearer token over plain http to a remote host was accepted")
	}
	if _, err := NewHTTPSource("https://user:pw@bundles.example.com/b.tar.gz", HTTPOptions{}); err == nil {
		t.Error("credentials in the URL were accepted")
	}
}

// TestBackoff: the retry schedule doubles per failure from its first
// delay up to its ceiling, each delay within ±20%, and a steady schedule
// stays within ±20% of its interval.
func TestBackoff(t *testing.T) {
	t.Parallel()
	within := func(got time.Duration, want int64) bool {
		return got >= time.Duration(want)*8e8 && got <= time.Duration(want)*12e8
	}
	failing := expBackOff(60e9, 300e9)
	for i, want := range []int64{60, 120, 240, 300, 300} {
		if got := failing.NextBackOff(); !within(got, want) {
			t.Errorf("failure %d: delay %v, want %ds ±20%%", i+1, got, want)
		}
	}
	failing.Reset()
	if got := failing.NextBackOff(); !within(got, 60) {
		t.Errorf("after Reset: delay %v, want 60s ±20%%", got)
	}
	if got := expBackOff(600e9, 300e9).NextBackOff(); !within(got, 300) {
		t.Errorf("first delay above the ceiling: %v, want 300s ±20%%", got)
	}
	steady := expBackOff(10e9, 10e9)
	for range 100 {
		if j := steady.NextBackOff(); !within(j, 10) {
			t.Fatalf("steady 10s = %v, outside ±20%%", j)
		}
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }

// counterValue reads one labelled counter from a registry.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestRunRetriesUntilLive: a bundle service that is down when the gateway
// starts leaves no policy live; Run retries (with polling off, too) and
// activates the bundle once the service answers, then stops retrying.
func TestRunRetriesUntilLive(t *testing.T) {
	t.Parallel()
	good, err := Build(tinyBundle("true"), BuildOptions{Revision: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	var up atomic.Bool
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(good)
	}))
	defer srv.Close()
	src, err := NewHTTPSource(srv.URL+"/b.tar.gz", HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eng := policies.NewEngine(policies.Options{})
	rec := &memRecorder{}
	m := New(Options{Engine: eng, Source: src, Recorder: rec, StartRetry: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if _, err := m.Reload(context.Background(), TriggerStart); err == nil {
		t.Fatal("start reload succeeded against a service that is down")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	time.Sleep(200 * time.Millisecond)
	if eng.Ready() {
		t.Fatal("a policy is live while the service is down")
	}
	if n := requests.Load(); n < 3 {
		t.Errorf("%d fetches in 200ms, want retries", n)
	}
	up.Store(true)
	select {
	case <-done: // polling is off: Run returns once the policy is live
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the service came up")
	}
	if !eng.Ready() {
		t.Fatal("no policy live after the service came up")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.got) != 1 || rec.got[0].Trigger != TriggerStart || rec.got[0].Revision != "v1" {
		t.Errorf("activations = %+v, want one start activation of v1", rec.got)
	}
}

// TestRunStopsRetryingWithContext: the start retries end with ctx.
func TestRunStopsRetryingWithContext(t *testing.T) {
	t.Parallel()
	src, err := NewHTTPSource("http://127.0.0.1:1/b.tar.gz", HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := New(Options{Engine: policies.NewEngine(policies.Options{}), Source: src, StartRetry: 10 * time.Millisecond, PollInterval: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run kept retrying after ctx ended")
	}
}
