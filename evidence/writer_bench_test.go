package evidence_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/wire"
)

// BenchmarkWriter measures receipts/s (decision + outcome, appended
// separately like an allowed call) through one Writer from 64 goroutines,
// with hash chains on and off, on both stores, and the test process's CPU
// time per receipt. -count repeats each case back to back, so on a shared
// machine run each case as its own process, alternating the modes, and
// compare with benchstat (docs/evidence.md#cost-of-the-chains):
//
//	go test -c -o /tmp/ev.test ./evidence && cd evidence
//	/tmp/ev.test -test.run '^$' -test.bench 'Writer/sqlite/chains=on$' -test.benchtime 5000x >> w.txt
//	/tmp/ev.test -test.run '^$' -test.bench 'Writer/sqlite/chains=off$' -test.benchtime 5000x >> w.txt
//	... (repeat, swapping the order every round)
//	go run golang.org/x/perf/cmd/benchstat@latest -col /chains w.txt
//
// PostgreSQL uses PORTCULLIS_TEST_DATABASE_URL (default local postgres) and
// a fresh database; it is skipped when unreachable.
func BenchmarkWriter(b *testing.B) {
	stores := map[string]func(b *testing.B) evidence.Store{
		"sqlite": func(b *testing.B) evidence.Store {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "e.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		},
		"postgres": func(b *testing.B) evidence.Store {
			s, err := postgres.Open(context.Background(), benchDatabase(b))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		for _, chains := range []bool{true, false} {
			mode := "chains=on"
			if !chains {
				mode = "chains=off"
			}
			b.Run(name+"/"+mode, func(b *testing.B) {
				s := stores[name](b)
				newW := evidence.NewWriter
				if !chains {
					newW = evidence.NewUnhashedWriter
				}
				w := newW(s, evidence.WriterOptions{InstanceID: "bench"})
				benchReceipts(b, w)
				if err := w.Close(context.Background()); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

func benchReceipts(b *testing.B, w *evidence.Writer) {
	const workers = 64
	ctx := context.Background()
	args := json.RawMessage(`{"argv":["/usr/bin/echo","hello from portcullis"],"cwd":"/work"}`)
	scope := &wire.Scope{Backend: "process", EnvNames: []string{"HOME", "LANG", "PATH"}}
	var next sync.WaitGroup
	jobs := make(chan int)
	b.ResetTimer()
	start := time.Now()
	cpu0 := processCPU()
	for range workers {
		next.Add(1)
		go func() {
			defer next.Done()
			for range jobs {
				d := evidence.Event{Kind: evidence.KindDecision, Decision: wire.DecisionAllow, PrincipalID: "dev-agent",
					SessionID: "bench", CallID: "call", Tool: "Exec", Reasons: []string{}, PolicyRevision: "sha256:83d53ba08794",
					ArgsSHA256: "f6ca1fb5180f5968667c55b8b89f1a956fb41182f7e1b807c7a51da44bc928b9", Args: args, Scope: scope,
					TraceID: "db0ab1cdb937f17a131ecad2fd8cb5aa"}
				id, _ := uuid.NewV7()
				d.ID = id
				if err := w.Append(ctx, d); err != nil {
					b.Error(err)
					return
				}
				o := evidence.Event{Kind: evidence.KindOutcome, ReceiptID: id, Outcome: &wire.Outcome{Status: wire.StatusSucceeded,
					ExitCode: new(int), Backend: "process", DurationMS: 8,
					OutputSHA256: "2cfce64efb92b310cf0628c0901580ba6b4762152a224099acff125dc678a4ff"}}
				if err := w.Append(ctx, o); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	for i := range b.N {
		jobs <- i
	}
	close(jobs)
	next.Wait()
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "receipts/s")
	// CPU time of this process per receipt (the writer, its callers and
	// the store's client side, not the PostgreSQL server): on a shared
	// machine it is far steadier than wall-clock throughput.
	if cpu := processCPU() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/receipt")
	}
}

func benchDatabase(b *testing.B) string {
	admin := os.Getenv("PORTCULLIS_TEST_DATABASE_URL")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		if os.Getenv("PORTCULLIS_REQUIRE_POSTGRES") == "1" {
			b.Fatalf("PostgreSQL required but unreachable: %v", err)
		}
		b.Skipf("PostgreSQL unreachable: %v", err)
	}
	defer c.Close(ctx)
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := "portcullis_bench_" + hex.EncodeToString(r[:])
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(admin)
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
