package gateway

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/backends/bwrap"
	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/internal/testutil"
	"github.com/portcullis/portcullis/policies"
	"github.com/portcullis/portcullis/tools"
	exectool "github.com/portcullis/portcullis/tools/exec"
	"github.com/portcullis/portcullis/wire"
)

const execBenchPolicy = `package portcullis

decision := {"allow": true, "fs_grants": [{"path": "/usr", "mode": "r"}], "network": {"posture": "off"}} if {
	input.tool == "Exec"
}
`

// benchExecServer is the whole gateway around a real Exec tool on runner,
// with durable evidence in an embedded store.
func benchExecServer(b *testing.B, runner backends.Runner) http.Handler {
	b.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "evidence.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	w := evidence.NewWriter(st, evidence.WriterOptions{InstanceID: "bench"})
	b.Cleanup(func() { _ = w.Close(ctx) })
	engine := policies.NewEngine(policies.Options{})
	if _, err := engine.Load(ctx, fstest.MapFS{"portcullis/p.rego": {Data: []byte(execBenchPolicy)}}, "bench"); err != nil {
		b.Fatal(err)
	}
	return New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: engine, Evidence: w, Receipts: st,
		Tools:   []tools.Tool{exectool.New(exectool.Options{Runner: runner})},
		OpenAPI: OpenAPIDocument,
	}).Handler()
}

func execTrue(h http.Handler) error {
	req := httptest.NewRequest(http.MethodPost, "/v1/tool-calls", strings.NewReader(`{"tool":"Exec","input":{"argv":["/bin/true"]}}`))
	req.Header.Set("Authorization", "Bearer "+agentKey)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"success":true`) {
		return &wire.Error{Code: wire.CodeInternal, Message: rec.Body.String()}
	}
	return nil
}

// BenchmarkExecTrue is /bin/true end to end (auth, decode, validate,
// decide, enforce, durable decision, run, durable outcome) on each backend,
// beside the plain fork/exec floor; compare with backends/bwrap's
// BenchmarkBareBwrapTrue in the same run for the sandbox's own cost.
func BenchmarkExecTrue(b *testing.B) {
	b.Run("fork-exec", func(b *testing.B) {
		testutil.MedianMS(b, func() error { return exec.Command("/bin/true").Run() })
	})
	b.Run("gateway-process", func(b *testing.B) {
		h := benchExecServer(b, process.New(process.Options{}))
		testutil.MedianMS(b, func() error { return execTrue(h) })
	})
	b.Run("gateway-bwrap", func(b *testing.B) {
		r := bwrap.New(bwrap.Options{})
		if err := r.Probe(context.Background()); err != nil {
			b.Skipf("bwrap unusable: %v", err)
		}
		h := benchExecServer(b, r)
		testutil.MedianMS(b, func() error { return execTrue(h) })
	})
}

// BenchmarkCallLatency is one trivial governed call at a time: the
// pipeline's own latency, dominated by the two durable commits.
func BenchmarkCallLatency(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "evidence.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	h := benchServer(b, st).Handler()
	testutil.MedianMS(b, func() error {
		req := httptest.NewRequest(http.MethodPost, "/v1/tool-calls", strings.NewReader(`{"tool":"Count","input":{}}`))
		req.Header.Set("Authorization", "Bearer "+agentKey)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return &wire.Error{Code: wire.CodeInternal, Message: rec.Body.String()}
		}
		return nil
	})
}
