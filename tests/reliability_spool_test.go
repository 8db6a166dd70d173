package tests

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestReliabilityStoreCrashGatewayKilled crashes PostgreSQL under load from
// 32 clients, then SIGKILLs the gateway while the store is still down, and
// starts it again once the store is back. The outcomes the gateway knew but
// could not record (calls answered with metadata.evidence_outcome
// "unrecorded": they ran, their outcome write failed) were spooled to disk
// before the answer, so the restart records them: every call answered 200
// has its real outcome, none is left pending or marked interrupted; only
// calls cut off by the kill may be interrupted. `evidence verify` passes.
// Before the spool, these outcomes lived in memory and the restart marked
// their calls interrupted (11–28 per crash in the store fault suite).
func TestReliabilityStoreCrashGatewayKilled(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	down, up := onCluster(
		func(ctx context.Context, c *pgCluster) error { return c.stopImmediate(ctx) },
		func(ctx context.Context, c *pgCluster) error { return c.start(ctx) })(t, d)
	vkey := withCheckpoints(t, d)
	g := d.start(t)
	l := newLoadGen(t, g, d.scratch)
	const clients = 32
	stopLoad := l.background(clients)
	defer stopLoad()

	isUnrecorded := func(s *sent) bool { return s.status == http.StatusOK && s.unrecord }
	warm := pick(200, 2000)
	if _, ok := pollUntil(90*time.Second, func() bool { return l.countAnswers(time.Time{}, isAllowedOK) >= warm }); !ok {
		t.Fatalf("load did not reach %d allowed calls in 90s: %s", warm, summarize(l.snapshot()))
	}
	// Crash the store until at least one call ran with its outcome
	// unrecorded (calls between their two writes when it dies); each
	// crash gives some, but a loaded machine may give none once.
	var tDown time.Time
	for attempt := 1; ; attempt++ {
		tDown = time.Now()
		if err := down(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, ok := pollUntil(30*time.Second, func() bool { return l.countAnswers(tDown, isUnavailable) > 0 }); !ok {
			t.Fatalf("no call refused evidence_unavailable within 30s of the crash: %s", summarize(l.snapshot()))
		}
		time.Sleep(time.Second) // the outage goes on under load
		if l.countAnswers(time.Time{}, isUnrecorded) > 0 || attempt == 3 {
			break
		}
		if err := up(context.Background()); err != nil {
			t.Fatal(err)
		}
		tUp := time.Now()
		if _, ok := pollUntil(60*time.Second, func() bool { return l.countAnswers(tUp, isAllowedOK) > 0 }); !ok {
			t.Fatalf("no call succeeded within 60s of the store coming back")
		}
	}
	unrecorded := l.countAnswers(time.Time{}, isUnrecorded)
	if unrecorded == 0 {
		t.Fatalf("three crashes left no call with its outcome unrecorded: nothing to prove: %s", summarize(l.snapshot()))
	}
	// The gateway dies while the store is down: its late outcomes are
	// only in the spool now.
	killedAt := time.Now()
	g.kill()
	stopLoad()
	if err := up(context.Background()); err != nil {
		t.Fatal(err)
	}
	g2 := d.start(t)
	if !strings.Contains(g2.stderr.String(), "recorded from the spool") {
		t.Errorf("the restart did not log outcomes recorded from the spool")
	}
	res := l.snapshot()
	receipts := g2.sessionReceipts(t, l.session)
	p := &problems{t: t}
	extra := checkAnswered(p, res, receipts)
	ran := 0
	for _, s := range res {
		if s.err != nil || s.kind != kindAllow || s.status != http.StatusOK {
			continue
		}
		ran++
		if _, err := os.Stat(s.marker); err != nil {
			p.add("call %d answered 200 but did not run: %v", s.i, err)
		}
		rc, ok := receipts[s.receiptID]
		if !ok {
			continue // checkAnswered said so
		}
		if st := rc.status(); st != "succeeded" {
			p.add("call %d ran (answered 200, outcome %s) but its receipt %s says %q after the restart",
				s.i, map[bool]string{true: "unrecorded", false: "recorded"}[s.unrecord], s.receiptID, st)
		}
	}
	cutOff := 0
	for _, s := range res {
		if s.err != nil && s.at.Before(killedAt) {
			cutOff++
		}
	}
	for id, rc := range extra {
		// Receipts no answer claims: calls cut off by the kill
		// (interrupted, or finished), or refused evidence_unavailable
		// with their decision committed after all (did not run).
		switch st := rc.status(); {
		case st == "pending":
			p.add("receipt %s still pending after the restart: %s", id, rc.raw)
		case rc.Decision == "allow" && st != "interrupted" && st != "succeeded" && st != "error":
			p.add("unanswered allowed call's receipt %s is %q", id, st)
		}
	}
	for _, rc := range g2.listReceipts(t, map[string][]string{"outcome": {"pending"}, "limit": {"1000"}}) {
		p.add("receipt %s pending after the restart", rc.ID)
	}
	p.report("restart after a store crash")
	t.Logf("%d calls: %s; %d ran (%d answered with the outcome unrecorded, all recorded from the spool at restart); %d cut off by the kill; %d receipts without an answer",
		len(res), summarize(res), ran, unrecorded, cutOff, len(extra))
	if n := g2.sumMetric(t, `portcullis_evidence_late_outcomes_total{result="replayed"}`); n < float64(unrecorded) {
		t.Errorf("replayed %v outcomes from the spool, fewer than the %d unrecorded", n, unrecorded)
	}
	if err := g2.stop(20 * time.Second); err != nil {
		t.Fatalf("gateway stop: %v", err)
	}
	t.Log(verifyEvidence(t, d, vkey))
}
