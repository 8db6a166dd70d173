package gateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	fstool "github.com/portcullis/portcullis/tools/fs"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/policies"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// benchPolicy grants the trivial tool to agents: the benchmark measures the
// gateway's own path (auth, decode, decide, durable decision, run, durable
// outcome, answer), not a policy's complexity.
const benchPolicy = `package portcullis

decision := {"allow": true, "reasons": [], "limits": {"timeout_s": 5}} if {
	"agent" in input.principal.roles
	input.tool == "Count"
}
`

func benchServer(b *testing.B, store evidence.Store, extra ...tools.Tool) *Server {
	b.Helper()
	return benchServerPolicy(b, store, benchPolicy, append([]tools.Tool{&countingTool{}}, extra...)...)
}

func benchServerPolicy(b *testing.B, store evidence.Store, policy string, extra ...tools.Tool) *Server {
	b.Helper()
	engine := policies.NewEngine(policies.Options{})
	if _, err := engine.Load(context.Background(), fstest.MapFS{"portcullis/bench.rego": {Data: []byte(policy)}}, "bench"); err != nil {
		b.Fatal(err)
	}
	w := evidence.NewWriter(store, evidence.WriterOptions{InstanceID: "bench"})
	b.Cleanup(func() { _ = w.Close(context.Background()) })
	return New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: engine, Evidence: w, Receipts: store, Tools: extra,
		InstanceID: "bench", OpenAPI: OpenAPIDocument,
	})
}

// runPipeline drives 64 concurrent callers through the handler and reports
// governed calls per second.
func runPipeline(b *testing.B, s *Server) {
	runPipelineBody(b, s, `{"tool":"Count","input":{"n":1},"session_id":"bench"}`)
}

func runPipelineBody(b *testing.B, s *Server, body string) {
	h := s.Handler()
	b.SetParallelism(32) // × GOMAXPROCS (2 here) = 64 callers
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest(http.MethodPost, "/v1/tool-calls", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+agentKey)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Errorf("status %d: %s", rec.Code, rec.Body.String())
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

func BenchmarkPipelineSQLite(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "evidence.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	runPipeline(b, benchServer(b, st))
}

func BenchmarkPipelinePostgres(b *testing.B) {
	runPipeline(b, benchServer(b, benchPostgres(b)))
}

// fsReadPolicy grants fs.read on one directory, read-only.
const fsReadPolicy = `package portcullis

decision := {"allow": true, "fs_grants": [{"path": data.bench.dir, "mode": "r", "alias": "@b"}]} if {
	input.tool == "fs.read"
}
`

// BenchmarkPipelineFSRead is fs.read of a 4 KB file through the whole
// pipeline with durable evidence, at 64 concurrent callers, per store.
func BenchmarkPipelineFSRead(b *testing.B) {
	dir := b.TempDir()
	content := strings.Repeat("0123456789abcdef0123456789abcde\n", 128) // 4096 bytes
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte(content), 0o644); err != nil {
		b.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		b.Fatal(err)
	}
	policy := strings.Replace(fsReadPolicy, "data.bench.dir", strconv.Quote(real), 1)
	body := `{"tool":"fs.read","input":{"path":"@b/f.txt"}}`
	tools := fstool.Tools(fstool.Options{})
	b.Run("sqlite", func(b *testing.B) {
		st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "evidence.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		runPipelineBody(b, benchServerPolicy(b, st, policy, tools...), body)
	})
	b.Run("postgres", func(b *testing.B) {
		runPipelineBody(b, benchServerPolicy(b, benchPostgres(b), policy, tools...), body)
	})
}

// benchPostgres opens a store on a fresh database dropped after the run.
func benchPostgres(b *testing.B) evidence.Store {
	ctx := context.Background()
	admin := os.Getenv("PORTCULLIS_TEST_DATABASE_URL")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		if os.Getenv("PORTCULLIS_REQUIRE_POSTGRES") == "1" {
			b.Fatalf("PostgreSQL required: %v", err)
		}
		b.Skipf("PostgreSQL unreachable: %v", err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("portcullis_bench_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c, err := pgx.Connect(ctx, admin)
		if err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	cfg, err := pgx.ParseConfig(admin)
	if err != nil {
		b.Fatal(err)
	}
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	st, err := postgres.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}
