package tests

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"
)

// useDatabase points an embedded-store deployment at a PostgreSQL URL.
func (d *deployment) useDatabase(t *testing.T, dbURL string) {
	t.Helper()
	cfg, err := os.ReadFile(d.configPath)
	if err != nil {
		t.Fatal(err)
	}
	old := []byte("database_url: \"\"\n")
	if !bytes.Contains(cfg, old) {
		t.Fatalf("config has no %q", old)
	}
	writeFile(t, d.configPath, bytes.Replace(cfg, old, []byte("database_url: "+strconv.Quote(dbURL)+"\n"), 1))
	d.dbURL, d.store = dbURL, storePostgres
}

// readyz returns the /readyz status, 0 when the gateway does not answer.
func (g *gateway) readyz() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := g.tryDo(ctx, http.MethodGet, "/readyz", "", nil)
	if err != nil {
		return 0
	}
	return r.status
}

// pollUntil calls cond every 20 ms until it holds or within passes; it
// returns how long that took and whether cond held.
func pollUntil(within time.Duration, cond func() bool) (time.Duration, bool) {
	t0 := time.Now()
	for {
		if cond() {
			return time.Since(t0), true
		}
		if time.Since(t0) > within {
			return time.Since(t0), false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countAnswers counts answered calls sent at or after since that match f.
func (l *loadGen) countAnswers(since time.Time, f func(*sent) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.results {
		if s.err == nil && !s.at.Before(since) && f(s) {
			n++
		}
	}
	return n
}

func isUnavailable(s *sent) bool {
	return s.status == http.StatusServiceUnavailable && s.code == "evidence_unavailable"
}

func isAllowedOK(s *sent) bool {
	return s.kind == kindAllow && s.status == http.StatusOK && s.receiptID != "" && !s.unrecord
}

// storeFault is a way the evidence store fails. prepare sets the
// deployment up for it and returns how to bring the fault about (down)
// and end it (up).
type storeFault struct {
	name    string
	prepare func(t *testing.T, d *deployment) (down, up func(context.Context) error)
	// commitTimeout is evidence.commit_timeout for the gateway ("" keeps
	// the default): how long a commit may hang before the call is refused.
	commitTimeout string
}

// onCluster points d at a throwaway PostgreSQL cluster and makes the
// fault of down and up on it.
func onCluster(down, up func(context.Context, *pgCluster) error) func(*testing.T, *deployment) (func(context.Context) error, func(context.Context) error) {
	return func(t *testing.T, d *deployment) (func(context.Context) error, func(context.Context) error) {
		cluster := newPGCluster(t)
		d.useDatabase(t, cluster.createDB(t, "portcullis_fault"))
		return func(ctx context.Context) error { return down(ctx, cluster) },
			func(ctx context.Context) error { return up(ctx, cluster) }
	}
}

var storeFaults = []storeFault{{
	// A crash: pg_ctl stop -m immediate kills every backend at once, so
	// connections fail fast; the next start runs crash recovery.
	name: "postgres-crash",
	prepare: onCluster(
		func(ctx context.Context, c *pgCluster) error { return c.stopImmediate(ctx) },
		func(ctx context.Context, c *pgCluster) error { return c.start(ctx) }),
}, {
	// A stall: every PostgreSQL process is stopped with SIGSTOP, so
	// connections stay open and nothing answers (a hung server, a frozen
	// disk, a partition that drops packets). Only evidence.commit_timeout
	// ends a commit; a transaction whose COMMIT was sent before the stall
	// may still commit when the server continues, after its caller was
	// refused.
	name: "postgres-stall",
	prepare: onCluster(
		func(_ context.Context, c *pgCluster) error { return c.pause() },
		func(_ context.Context, c *pgCluster) error { return c.resume() }),
	commitTimeout: "2s",
}, {
	// The embedded store's file system fills up (ENOSPC, SQLITE_FULL):
	// the data directory is a small tmpfs and a ballast file takes its
	// last free byte; deleting it ends the fault.
	name:    "sqlite-disk-full",
	prepare: onFullDisk,
}}

// TestReliabilityStoreFaults runs the gateway with 32 clients calling and
// makes its evidence store fail in each way of storeFaults: calls fail
// closed with 503 evidence_unavailable and nothing they asked for runs
// (each allowed call would create a marker file), /readyz goes not ready.
// When the fault ends the gateway recovers by itself (ready, calls
// succeed), every answered call has its receipt, and `gateway evidence
// verify` passes.
func TestReliabilityStoreFaults(t *testing.T) {
	t.Parallel()
	for _, f := range storeFaults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			testStoreFault(t, f)
		})
	}
}

func testStoreFault(t *testing.T, f storeFault) {
	d := newDeployment(t, storeSQLite)
	down, up := f.prepare(t, d)
	vkey := withCheckpoints(t, d)
	var commitTimeout time.Duration
	if f.commitTimeout != "" {
		d.env = append(d.env, "PORTCULLIS_EVIDENCE_COMMIT_TIMEOUT="+f.commitTimeout)
		var err error
		if commitTimeout, err = time.ParseDuration(f.commitTimeout); err != nil {
			t.Fatal(err)
		}
	}
	g := d.start(t)
	l := newLoadGen(t, g, d.scratch)

	const clients = 32
	stopLoad := l.background(clients)
	defer stopLoad()

	warm := pick(200, 2000)
	if _, ok := pollUntil(90*time.Second, func() bool { return l.countAnswers(time.Time{}, isAllowedOK) >= warm }); !ok {
		t.Fatalf("load did not reach %d allowed calls in 90s: %s", warm, summarize(l.snapshot()))
	}

	// The store fails.
	tStop := time.Now()
	if err := down(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopTook := time.Since(tStop)
	tDown := time.Now()
	toRefuse, ok := pollUntil(30*time.Second, func() bool { return l.countAnswers(tDown, isUnavailable) > 0 })
	if !ok {
		t.Fatalf("no call answered 503 evidence_unavailable within 30s of the store failing: %s", summarize(l.snapshot()))
	}
	toUnready, ok := pollUntil(30*time.Second, func() bool { return g.readyz() == http.StatusServiceUnavailable })
	if !ok {
		t.Fatal("/readyz still ready 30s after the store failed")
	}
	toUnready += toRefuse
	outage := pick(2*time.Second, 15*time.Second)
	time.Sleep(outage) // the outage itself: load keeps running against it
	if r := g.do(t, http.MethodGet, "/readyz", "", nil); r.status != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the outage: %s", r)
	} else if !bytes.Contains(r.body, []byte(`"evidence":"unreachable"`)) && !bytes.Contains(r.body, []byte(`"evidence":"last commit failed"`)) {
		t.Errorf("/readyz during the outage does not name the evidence store: %s", r)
	}
	refusedDuring := l.countAnswers(tDown, isUnavailable)

	// The store comes back.
	tStart := time.Now()
	if err := up(context.Background()); err != nil {
		t.Fatal(err)
	}
	startTook := time.Since(tStart)
	tUp := time.Now()
	toSuccess, ok := pollUntil(60*time.Second, func() bool { return l.countAnswers(tUp, isAllowedOK) > 0 })
	if !ok {
		t.Fatalf("no call succeeded within 60s of the store coming back: %s", summarize(l.snapshot()))
	}
	toReady, ok := pollUntil(60*time.Second, func() bool { return g.readyz() == http.StatusOK })
	if !ok {
		t.Fatal("/readyz not ready 60s after the store came back")
	}
	after := pick(200, 2000)
	if _, ok := pollUntil(90*time.Second, func() bool { return l.countAnswers(tUp, isAllowedOK) >= after }); !ok {
		t.Fatalf("only %d allowed calls succeeded in 90s after recovery", l.countAnswers(tUp, isAllowedOK))
	}
	stopLoad()
	res := l.snapshot()
	t.Logf("%d calls by %d clients: %s", len(res), clients, summarize(res))
	t.Logf("%s: bringing it about took %s; first evidence_unavailable %s after, /readyz not ready %s after; %d refusals in a %s outage",
		f.name, stopTook.Round(time.Millisecond), toRefuse.Round(time.Millisecond), toUnready.Round(time.Millisecond), refusedDuring, outage)
	t.Logf("ending it took %s; first successful call %s after it returned, /readyz ready %s after it returned",
		startTook.Round(time.Millisecond), toSuccess.Round(time.Millisecond), toReady.Round(time.Millisecond))
	if toSuccess > 30*time.Second {
		t.Errorf("recovery took %s: want the gateway to recover within seconds", toSuccess)
	}

	p := &problems{t: t}
	byCall := map[string]*sent{}
	ran, notRun, unrecorded := 0, 0, 0
	var maxRefusal time.Duration
	for _, s := range res {
		byCall[s.callID] = s
		if s.err != nil {
			p.add("call %d: no answer: %v", s.i, s.err)
			continue
		}
		status, code, _, _ := s.kind.want()
		switch {
		case isUnavailable(s):
			if s.receiptID != "" {
				p.add("call %d answered evidence_unavailable with receipt_id %s", s.i, s.receiptID)
			}
			maxRefusal = max(maxRefusal, s.latency)
			// A caller waits for at most its own commit and the stalled
			// one queued before it; the slack is for a loaded machine.
			if commitTimeout > 0 && s.latency > 2*commitTimeout+5*time.Second {
				p.add("call %d waited %s for evidence_unavailable, commit_timeout is %s", s.i, s.latency, commitTimeout)
			}
		case s.status != status || s.code != code:
			p.add("call %d (%s): HTTP %d %q, want %d %q or 503 evidence_unavailable", s.i, s.kind, s.status, s.code, status, code)
		}
		if s.kind != kindAllow {
			continue
		}
		_, err := os.Stat(s.marker)
		switch {
		case isUnavailable(s):
			notRun++
			if err == nil {
				p.add("call %d was answered evidence_unavailable but ran (marker %s exists)", s.i, s.marker)
			}
		case s.status == http.StatusOK:
			ran++
			if s.unrecord {
				unrecorded++
			}
			if err != nil {
				p.add("call %d answered 200 but its marker is missing: %v", s.i, err)
			}
		}
	}
	if notRun == 0 {
		p.add("no allowed call was refused during the outage")
	}
	if n := g.sumMetric(t, "portcullis_evidence_write_failures_total"); n == 0 {
		p.add("portcullis_evidence_write_failures_total = 0 after an outage")
	}
	// Outcomes the store did not take are recorded late, once it commits
	// again (gateway/late.go): soon no receipt of the load is pending.
	var receipts map[string]receipt
	pendingLeft := -1
	toSettled, _ := pollUntil(30*time.Second, func() bool {
		receipts = g.sessionReceipts(t, l.session)
		pendingLeft = 0
		for _, rc := range receipts {
			if rc.status() == "pending" {
				pendingLeft++
			}
		}
		return pendingLeft == 0
	})
	if pendingLeft != 0 {
		p.add("%d receipts still pending 30 s after the load stopped: late outcomes were not recorded", pendingLeft)
	}
	lateRecorded := g.sumMetric(t, `portcullis_evidence_late_outcomes_total{result="recorded"}`)
	extra := checkAnswered(p, res, receipts)
	for _, s := range res {
		// The call ran and its outcome was recorded late: the receipt
		// says how it really ended.
		if rc, ok := receipts[s.receiptID]; ok && s.unrecord {
			if _, _, _, outcome := s.kind.want(); rc.status() != outcome {
				p.add("call %d ran with its outcome unrecorded; receipt outcome %q, want %q recorded late", s.i, rc.status(), outcome)
			}
		}
	}
	for id, rc := range extra {
		// A commit whose result was lost with the connection may hold a
		// decision the caller was told failed: it must belong to a call
		// answered evidence_unavailable (which did not run), and its
		// outcome, recorded late, says so.
		s := byCall[rc.CallID]
		if s == nil || !isUnavailable(s) {
			p.add("receipt %s (call_id %q, %s/%s) belongs to no refused call", id, rc.CallID, rc.Decision, rc.status())
		} else {
			// An allowed call refused for its decision write did not run;
			// a denied or invalid one keeps the refusal it was written with.
			_, wantCode, wantDecision, _ := s.kind.want()
			if wantDecision == "allow" {
				wantCode = "evidence_unavailable"
			}
			if rc.Decision != wantDecision || rc.status() != "error" || rc.Outcome.ErrorCode == nil || *rc.Outcome.ErrorCode != wantCode {
				p.add("receipt %s of call %d (%s), refused evidence_unavailable: %s/%s, want %s with outcome error/%s: %s",
					id, s.i, s.kind, rc.Decision, rc.status(), wantDecision, wantCode, rc.raw)
			}
		}
	}
	p.report(f.name)
	t.Logf("%d allowed calls ran (%d with the outcome unrecorded), %d refused evidence_unavailable and did not run (the longest refusal took %s); %d receipts, %d of them for calls told evidence_unavailable; %v outcomes recorded late, none pending %s after the load stopped",
		ran, unrecorded, notRun, maxRefusal.Round(time.Millisecond), len(receipts), len(extra), lateRecorded, toSettled.Round(time.Millisecond))
	if err := g.stop(20 * time.Second); err != nil {
		t.Fatalf("gateway stop: %v", err)
	}
	t.Log(verifyEvidence(t, d, vkey))
}
