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

// TestReliabilityDatabaseFaults runs the gateway on a PostgreSQL cluster
// the test owns, with 32 clients calling, and crashes the database
// (pg_ctl stop -m immediate): calls fail closed with 503
// evidence_unavailable and nothing they asked for runs (each allowed call
// would create a marker file), /readyz goes not ready. After pg_ctl start
// the gateway recovers by itself (ready, calls succeed), every answered
// call has its receipt, and `gateway evidence verify` passes.
func TestReliabilityDatabaseFaults(t *testing.T) {
	t.Parallel()
	cluster := newPGCluster(t)
	d := newDeployment(t, storeSQLite)
	d.useDatabase(t, cluster.createDB(t, "portcullis_fault"))
	vkey := withCheckpoints(t, d)
	g := d.start(t)
	l := newLoadGen(t, g, d.scratch)

	const clients = 32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		l.run(ctx, clients, 0)
	}()
	stopLoad := func() {
		cancel()
		<-loadDone
	}
	defer stopLoad()

	warm := pick(200, 2000)
	if _, ok := pollUntil(90*time.Second, func() bool { return l.countAnswers(time.Time{}, isAllowedOK) >= warm }); !ok {
		t.Fatalf("load did not reach %d allowed calls in 90s: %s", warm, summarize(l.snapshot()))
	}

	// The database crashes.
	tStop := time.Now()
	if err := cluster.stopImmediate(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopTook := time.Since(tStop)
	tDown := time.Now()
	toRefuse, ok := pollUntil(30*time.Second, func() bool { return l.countAnswers(tDown, isUnavailable) > 0 })
	if !ok {
		t.Fatalf("no call answered 503 evidence_unavailable within 30s of the database going down: %s", summarize(l.snapshot()))
	}
	toUnready, ok := pollUntil(30*time.Second, func() bool { return g.readyz() == http.StatusServiceUnavailable })
	if !ok {
		t.Fatal("/readyz still ready 30s after the database went down")
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

	// The database comes back.
	tStart := time.Now()
	if err := cluster.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	startTook := time.Since(tStart)
	tUp := time.Now()
	toSuccess, ok := pollUntil(60*time.Second, func() bool { return l.countAnswers(tUp, isAllowedOK) > 0 })
	if !ok {
		t.Fatalf("no call succeeded within 60s of the database coming back: %s", summarize(l.snapshot()))
	}
	toReady, ok := pollUntil(60*time.Second, func() bool { return g.readyz() == http.StatusOK })
	if !ok {
		t.Fatal("/readyz not ready 60s after the database came back")
	}
	after := pick(200, 2000)
	if _, ok := pollUntil(90*time.Second, func() bool { return l.countAnswers(tUp, isAllowedOK) >= after }); !ok {
		t.Fatalf("only %d allowed calls succeeded in 90s after recovery", l.countAnswers(tUp, isAllowedOK))
	}
	stopLoad()
	res := l.snapshot()
	t.Logf("%d calls by %d clients: %s", len(res), clients, summarize(res))
	t.Logf("pg_ctl stop -m immediate took %s; first evidence_unavailable %s after, /readyz not ready %s after; %d refusals in a %s outage",
		stopTook.Round(time.Millisecond), toRefuse.Round(time.Millisecond), toUnready.Round(time.Millisecond), refusedDuring, outage)
	t.Logf("pg_ctl start took %s; first successful call %s after it returned, /readyz ready %s after it returned",
		startTook.Round(time.Millisecond), toSuccess.Round(time.Millisecond), toReady.Round(time.Millisecond))
	if toSuccess > 30*time.Second {
		t.Errorf("recovery took %s: want the gateway to recover within seconds", toSuccess)
	}

	p := &problems{t: t}
	byCall := map[string]*sent{}
	ran, notRun, unrecorded := 0, 0, 0
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
	receipts := g.sessionReceipts(t, l.session)
	extra := checkAnswered(p, res, receipts)
	for id, rc := range extra {
		// A commit whose result was lost with the connection may hold a
		// decision the caller was told failed: it must belong to a call
		// answered evidence_unavailable (which did not run).
		s := byCall[rc.CallID]
		if s == nil || !isUnavailable(s) {
			p.add("receipt %s (call_id %q, %s/%s) belongs to no refused call", id, rc.CallID, rc.Decision, rc.status())
		}
	}
	p.report("database faults")
	t.Logf("%d allowed calls ran (%d with the outcome unrecorded), %d refused evidence_unavailable and did not run; %d receipts, %d of them for calls told evidence_unavailable",
		ran, unrecorded, notRun, len(receipts), len(extra))
	if err := g.stop(20 * time.Second); err != nil {
		t.Fatalf("gateway stop: %v", err)
	}
	t.Log(verifyEvidence(t, d, vkey))
}
