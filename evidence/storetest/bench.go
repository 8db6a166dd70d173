package storetest

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// Quota modes of BenchWriter.
const (
	// BenchNoQuota: no decision draws a quota.
	BenchNoQuota = "none"
	// BenchQuotaSeparate: every decision first draws on one hot counter in
	// a transaction of its own (ControlStore.ConsumeQuotas, group-committed
	// apart from the events), as the gateway did before issue 15's fix
	// and still does on the approval path.
	BenchQuotaSeparate = "separate"
	// BenchQuotaInCommit: every decision draws on the hot counter in its
	// own commit (Writer.AppendDrawing).
	BenchQuotaInCommit = "in-commit"
)

// BenchWriter measures the Writer on s as the gateway drives it: 64
// concurrent callers (b.SetParallelism), each call a decision then its
// outcome, reported as calls/s. mode says how each decision draws on a
// quota that is never reached (BenchNoQuota and the others): what a quota
// on every call costs the evidence path.
func BenchWriter(b *testing.B, s evidence.Store, mode string) {
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "bench"})
	defer func() { _ = w.Close(context.Background()) }()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	var calls atomic.Int64
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := benchCall(ctx, s, w, mode); err != nil {
				b.Error(err)
				return
			}
			calls.Add(1)
		}
	})
	b.ReportMetric(float64(calls.Load())/time.Since(start).Seconds(), "calls/s")
}

var benchQuota = []wire.Quota{{Key: "agent-alpha/Exec", Limit: 1 << 50, WindowS: 3600, Cost: 1}}

func benchCall(ctx context.Context, s evidence.Store, w *evidence.Writer, mode string) error {
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	d := evidence.Event{ID: id, Kind: evidence.KindDecision, PrincipalID: "agent-alpha", Tool: "Exec",
		Decision: wire.DecisionAllow, Reasons: []string{}, PolicyRevision: "rev",
		ArgsSHA256: evidence.ArgsDigest([]byte("x")), Args: []byte(`{"argv":["/usr/bin/git","status"],"cwd":"/srv/work/repo"}`),
		Scope: &wire.Scope{FSGrants: []wire.FSGrant{{Path: "/srv/work", Mode: "rw"}}, Network: wire.Network{Posture: "off"}}}
	switch mode {
	case BenchQuotaSeparate:
		_, ex, err := s.(evidence.ControlStore).ConsumeQuotas(ctx, benchQuota, time.Now())
		if err == nil && ex != nil {
			err = fmt.Errorf("refused: %+v", ex)
		}
		if err != nil {
			return fmt.Errorf("quota: %w", err)
		}
	case BenchQuotaInCommit:
		refusal := func(*evidence.QuotaExceeded) []evidence.Event { return nil }
		ex, err := w.AppendDrawing(ctx, benchQuota, time.Now(), refusal, d)
		if err == nil && ex != nil {
			err = fmt.Errorf("refused: %+v", ex)
		}
		if err != nil {
			return fmt.Errorf("decision drawing a quota: %w", err)
		}
		d = evidence.Event{}
	}
	if d.ID != uuid.Nil {
		if err := w.Append(ctx, d); err != nil {
			return fmt.Errorf("decision: %w", err)
		}
	}
	code := 0
	return w.Append(ctx, evidence.Event{Kind: evidence.KindOutcome, ReceiptID: id,
		Outcome: &wire.Outcome{Status: wire.StatusSucceeded, ExitCode: &code, DurationMS: 3, Backend: "bwrap"}})
}
