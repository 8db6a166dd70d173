package tests

// Reliability suites (issue #9): nothing is lost under load, a SIGKILLed
// gateway recovers its evidence, and (in the reliability_*_test.go files)
// database faults, bundle service faults and hostile clients. Each runs a
// quick variant by default; PORTCULLIS_LONG=1 runs the long one. Figures
// are logged (go test -v) and summarized in docs/reliability.md.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// longMode reports whether the long variants run (PORTCULLIS_LONG=1).
func longMode() bool { return os.Getenv("PORTCULLIS_LONG") == "1" }

// pick returns quick, or long under PORTCULLIS_LONG=1.
func pick[T any](quick, long T) T {
	if longMode() {
		return long
	}
	return quick
}

// loadClients is the concurrency of the load suites.
const loadClients = 64

// newLoadClient is an HTTP client that keeps a connection per load client
// alive (the shared harness client keeps two, which under 64 clients turns
// every call into a new connection).
func newLoadClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        2 * conns,
			MaxIdleConnsPerHost: 2 * conns,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		},
	}
}

// callKind is what a generated call is meant to be decided as.
type callKind string

const (
	kindAllow   callKind = "allow"   // agent-full runs Exec: 200, succeeded
	kindDeny    callKind = "deny"    // agent-noexec asks for Exec: 403 permission_denied
	kindInvalid callKind = "invalid" // empty argv: 400 invalid_input
	kindUnknown callKind = "unknown" // unknown tool: 404 unknown_tool (decision invalid)
)

// want is the answer and receipt a call of this kind must get.
func (k callKind) want() (status int, code, decision, outcome string) {
	switch k {
	case kindAllow:
		return http.StatusOK, "", "allow", "succeeded"
	case kindDeny:
		return http.StatusForbidden, "permission_denied", "deny", "error"
	case kindInvalid:
		return http.StatusBadRequest, "invalid_input", "invalid", "error"
	default:
		return http.StatusNotFound, "unknown_tool", "invalid", "error"
	}
}

// sent is one generated call and what came back.
type sent struct {
	i         int
	kind      callKind
	callID    string
	marker    string // file an allowed call creates ("" when it runs /usr/bin/true)
	status    int    // 0: no answer (transport error)
	code      string // output.error.code
	receiptID string
	revision  string
	reasons   []string
	unrecord  bool // output.metadata.evidence_outcome = unrecorded
	err       error
	latency   time.Duration
	at        time.Time
}

// loadGen drives governed calls at a gateway. Calls are mixed by index:
// half allowed Exec, a quarter denied, an eighth invalid input and an
// eighth unknown tool, all in one session so their receipts can be listed.
type loadGen struct {
	g       *gateway
	client  *http.Client
	session string
	// markerDir, when set, makes allowed calls /usr/bin/touch a file
	// unique to the call there, so whether a call ran can be checked.
	markerDir string
	base      string // gateway base URL (fixed at creation)

	next     atomic.Int64
	answered atomic.Int64
	mu       sync.Mutex
	results  []*sent
}

func newLoadGen(t *testing.T, g *gateway, markerDir string) *loadGen {
	return &loadGen{
		g: g, client: newLoadClient(loadClients), session: "rel-" + randHex(t, 6),
		markerDir: markerDir, base: g.baseURL,
	}
}

func (l *loadGen) build(i int) (*sent, string, map[string]any) {
	d := l.g.dep
	s := &sent{i: i, callID: fmt.Sprintf("rel-%d", i)}
	body := map[string]any{"tool": "Exec", "call_id": s.callID, "session_id": l.session}
	key := d.keys[agentFull]
	switch i % 8 {
	case 0, 1, 2, 3:
		s.kind = kindAllow
		argv := []string{"/usr/bin/true"}
		if l.markerDir != "" {
			s.marker = filepath.Join(l.markerDir, fmt.Sprintf("m-%s-%d", l.session, i))
			argv = []string{"/usr/bin/touch", s.marker}
		}
		body["input"] = map[string]any{"argv": argv}
	case 4, 5:
		s.kind = kindDeny
		key = d.keys[agentNoExec]
		body["input"] = map[string]any{"argv": []string{"/usr/bin/true"}}
	case 6:
		s.kind = kindInvalid
		body["input"] = map[string]any{"argv": []string{}}
	default:
		s.kind = kindUnknown
		body["tool"] = "NoSuchTool"
		body["input"] = map[string]any{}
	}
	return s, key, body
}

// one sends call i and records the answer. A call once sent is never
// abandoned by the client (only by its own timeout), so stopping the load
// leaves no call whose fate the test does not know.
func (l *loadGen) one(i int) *sent {
	s, key, body := l.build(i)
	b, _ := json.Marshal(body)
	s.at = time.Now()
	cctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	status, rb, err := postJSON(cctx, l.client, l.base+"/v1/tool-calls", key, b)
	s.latency = time.Since(s.at)
	if err != nil {
		s.err = err
	} else {
		s.status = status
		var r struct {
			ReceiptID string `json:"receipt_id"`
			Decision  *struct {
				Reasons        []string `json:"reasons"`
				PolicyRevision string   `json:"policy_revision"`
			} `json:"decision"`
			Output struct {
				Error *struct {
					Code string `json:"code"`
				} `json:"error"`
				Metadata map[string]any `json:"metadata"`
			} `json:"output"`
		}
		if jerr := json.Unmarshal(rb, &r); jerr != nil {
			s.err = fmt.Errorf("HTTP %d, undecodable answer: %v: %.300s", status, jerr, rb)
		} else {
			s.receiptID = r.ReceiptID
			if r.Output.Error != nil {
				s.code = r.Output.Error.Code
			}
			if r.Decision != nil {
				s.revision, s.reasons = r.Decision.PolicyRevision, r.Decision.Reasons
			}
			s.unrecord = r.Output.Metadata["evidence_outcome"] == "unrecorded"
		}
		l.answered.Add(1)
	}
	l.mu.Lock()
	l.results = append(l.results, s)
	l.mu.Unlock()
	return s
}

// run sends calls from clients goroutines until n calls were sent (n > 0)
// or ctx ends, and waits for the calls in flight to be answered.
// background runs clients until the returned stop is called (more than
// once is fine); stop returns when they have all finished.
func (l *loadGen) background(clients int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(ctx, clients, 0)
	}()
	return func() {
		cancel()
		<-done
	}
}

func (l *loadGen) run(ctx context.Context, clients, n int) {
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(l.next.Add(1)) - 1
				if n > 0 && i >= n {
					return
				}
				l.one(i)
			}
		}()
	}
	wg.Wait()
}

// snapshot returns the calls sent so far, by index.
func (l *loadGen) snapshot() []*sent {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]*sent(nil), l.results...)
	sort.Slice(out, func(a, b int) bool { return out[a].i < out[b].i })
	return out
}

// postJSON posts body with a bearer key and returns status and body.
func postJSON(ctx context.Context, client *http.Client, u, key string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, buf.Bytes(), nil
}

// sessionReceipts lists every receipt of session as the auditor, walking
// the cursor, keyed by receipt id.
func (g *gateway) sessionReceipts(t *testing.T, session string) map[string]receipt {
	t.Helper()
	out := map[string]receipt{}
	cursor := ""
	for page := 0; ; page++ {
		q := url.Values{"session_id": {session}, "limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := g.do(t, http.MethodGet, "/v1/receipts?"+q.Encode(), g.dep.keys[auditor], nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET /v1/receipts?%s: %s", q.Encode(), r)
		}
		var list struct {
			Receipts   []json.RawMessage `json:"receipts"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatalf("decode receipt list: %v", err)
		}
		for _, raw := range list.Receipts {
			var rc receipt
			if err := json.Unmarshal(raw, &rc); err != nil {
				t.Fatalf("decode receipt: %v\n%s", err, raw)
			}
			rc.raw = string(raw)
			if _, dup := out[rc.ID]; dup {
				t.Fatalf("receipt %s listed twice (page %d)", rc.ID, page)
			}
			out[rc.ID] = rc
		}
		if list.NextCursor == "" || len(list.Receipts) == 0 {
			return out
		}
		cursor = list.NextCursor
	}
}

// problems collects test failures and reports the first few.
type problems struct {
	t    *testing.T
	list []string
}

func (p *problems) add(format string, args ...any) {
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

func (p *problems) report(what string) {
	p.t.Helper()
	for i, s := range p.list {
		if i == 15 {
			p.t.Errorf("... and %d more", len(p.list)-15)
			break
		}
		p.t.Error(s)
	}
	if len(p.list) > 0 {
		p.t.Fatalf("%s: %d problems", what, len(p.list))
	}
}

// checkAnswered holds every answered call against its receipt: the receipt
// exists with the call's id, decision and (unless final is false, for a
// call whose outcome could not be recorded) its final outcome. It returns
// the receipts no answered call claims.
func checkAnswered(p *problems, calls []*sent, receipts map[string]receipt) map[string]receipt {
	rest := make(map[string]receipt, len(receipts))
	for id, rc := range receipts {
		rest[id] = rc
	}
	for _, s := range calls {
		if s.err != nil || s.status == 0 || s.code == "evidence_unavailable" {
			continue
		}
		status, code, decision, outcome := s.kind.want()
		if s.status != status || s.code != code {
			p.add("call %d (%s): answer HTTP %d %q, want %d %q", s.i, s.kind, s.status, s.code, status, code)
			continue
		}
		if s.receiptID == "" {
			p.add("call %d (%s): answered %d without a receipt_id", s.i, s.kind, s.status)
			continue
		}
		rc, ok := receipts[s.receiptID]
		if !ok {
			p.add("call %d (%s): receipt %s of an answered call is missing", s.i, s.kind, s.receiptID)
			continue
		}
		delete(rest, s.receiptID)
		if rc.Decision != decision || rc.CallID != s.callID {
			p.add("call %d (%s): receipt says decision %q call_id %q, want %q %q", s.i, s.kind, rc.Decision, rc.CallID, decision, s.callID)
		}
		switch {
		case s.unrecord:
			// The call ran but its outcome was not durable: the receipt
			// keeps its decision and stays pending until a restart.
			if st := rc.status(); st != "pending" && st != "interrupted" && st != outcome {
				p.add("call %d: outcome unrecorded, receipt status %q", s.i, st)
			}
		case rc.status() != outcome:
			p.add("call %d (%s): receipt outcome %q, want %q: %s", s.i, s.kind, rc.status(), outcome, rc.raw)
		case code != "" && (rc.Outcome.ErrorCode == nil || *rc.Outcome.ErrorCode != code):
			p.add("call %d (%s): receipt error_code %v, want %q", s.i, s.kind, rc.Outcome.ErrorCode, code)
		}
	}
	return rest
}

// verifyEvidence runs `gateway evidence verify` (the real CLI) on the
// deployment's store with the pinned verifier key (see withCheckpoints) and
// fails unless it passes.
func verifyEvidence(t *testing.T, d *deployment, vkey string) string {
	t.Helper()
	out, ok := runCLI(t, d, "evidence", "verify", "--config", d.configPath, "--key", vkey)
	if !ok || !strings.Contains(out, "OK") {
		t.Fatalf("gateway evidence verify failed:\n%s", out)
	}
	return strings.TrimSpace(out)
}

// summarize counts answers by status and code.
func summarize(calls []*sent) string {
	m := map[string]int{}
	for _, s := range calls {
		k := "transport error"
		if s.err == nil {
			k = strconv.Itoa(s.status)
			if s.code != "" {
				k += " " + s.code
			}
		}
		m[k]++
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, m[k])
	}
	return b.String()
}

// latencies returns the median and the 99th percentile of answered calls.
func latencies(calls []*sent) (p50, p99 time.Duration) {
	var ls []time.Duration
	for _, s := range calls {
		if s.err == nil {
			ls = append(ls, s.latency)
		}
	}
	if len(ls) == 0 {
		return 0, 0
	}
	sort.Slice(ls, func(a, b int) bool { return ls[a] < ls[b] })
	return ls[len(ls)/2], ls[len(ls)*99/100]
}

// sumMetric sums every series of a metric family (all label sets).
func (g *gateway) sumMetric(t *testing.T, name string) float64 {
	t.Helper()
	r := g.do(t, http.MethodGet, "/metrics", "", nil)
	total := 0.0
	for _, l := range strings.Split(string(r.body), "\n") {
		if !strings.HasPrefix(l, name) {
			continue
		}
		rest := l[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", l, err)
		}
		total += v
	}
	return total
}

// TestReliabilityNothingLost: 2000 governed calls (50000 long) from 64
// concurrent clients, mixed allowed, denied, invalid and unknown-tool, on
// each store. Every answer is the expected one, every answer's receipt
// exists with the right decision and outcome, the session holds exactly as
// many receipts as there were answers, the call metric agrees, and
// `gateway evidence verify` passes.
func TestReliabilityNothingLost(t *testing.T) {
	t.Parallel()
	calls := pick(2000, 50000)
	type variant struct {
		name    string
		st      store
		backend string
	}
	variants := []variant{{"sqlite", storeSQLite, "process"}, {"postgres", storePostgres, "process"},
		// The allowed half of the calls each start a real bwrap sandbox.
		{"sqlite-bwrap", storeSQLite, "bwrap"}}
	for _, v := range variants {
		st := v.st
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			if v.backend == "bwrap" {
				requireBwrap(t)
			}
			d := newDeploymentWith(t, st, v.backend)
			vkey := withCheckpoints(t, d)
			g := d.start(t)
			l := newLoadGen(t, g, "")
			t0 := time.Now()
			l.run(context.Background(), loadClients, calls)
			elapsed := time.Since(t0)
			res := l.snapshot()
			p50, p99 := latencies(res)
			t.Logf("%s: %d calls by %d clients in %s (%.0f calls/s), p50 %s p99 %s; answers: %s",
				v.name, len(res), loadClients, elapsed.Round(time.Millisecond), float64(len(res))/elapsed.Seconds(),
				p50.Round(time.Microsecond), p99.Round(time.Microsecond), summarize(res))

			p := &problems{t: t}
			for _, s := range res {
				if s.err != nil {
					p.add("call %d (%s): %v", s.i, s.kind, s.err)
				}
			}
			if len(res) != calls {
				p.add("%d calls recorded, want %d", len(res), calls)
			}
			t1 := time.Now()
			receipts := g.sessionReceipts(t, l.session)
			extra := checkAnswered(p, res, receipts)
			for id, rc := range extra {
				p.add("receipt %s (call_id %q) belongs to no answer", id, rc.CallID)
			}
			if len(receipts) != calls {
				p.add("%d receipts in the session, %d answers", len(receipts), calls)
			}
			if n := g.sumMetric(t, "portcullis_tool_calls_total"); int(n) != calls {
				p.add("portcullis_tool_calls_total = %v, want %d", n, calls)
			}
			if n := g.sumMetric(t, "portcullis_evidence_write_failures_total"); n != 0 {
				p.add("portcullis_evidence_write_failures_total = %v", n)
			}
			p.report("nothing lost")
			t.Logf("%s: %d receipts listed and checked in %s", v.name, len(receipts), time.Since(t1).Round(time.Millisecond))
			if err := g.stop(20 * time.Second); err != nil {
				t.Fatalf("gateway stop: %v", err)
			}
			t.Logf("%s: %s", v.name, verifyEvidence(t, d, vkey))
		})
	}
}

// TestReliabilityGatewayCrash SIGKILLs the gateway under load from 64
// clients, with a few long calls in flight, and restarts it on the same
// store: every answered call has its receipt with its final outcome, the
// calls that were running are `interrupted`, no receipt stays pending,
// receipts nobody was answered for are bounded by the calls in flight, and
// `gateway evidence verify` passes.
func TestReliabilityGatewayCrash(t *testing.T) {
	t.Parallel()
	before := pick(300, 5000)
	eachStore(t, func(t *testing.T, d *deployment) {
		vkey := withCheckpoints(t, d)
		g := d.start(t)
		l := newLoadGen(t, g, "")

		// Long calls, so the kill finds calls running for sure.
		const sleepers = 4
		marker := sleepMarker(t, 60)
		sleepSession := l.session + "-sleep"
		lctx, cancelLong := context.WithCancel(context.Background())
		defer cancelLong()
		for i := range sleepers {
			go func() {
				_, _ = g.tryDo(lctx, http.MethodPost, "/v1/tool-calls", "Bearer "+d.keys[agentFull],
					execCall(map[string]any{"argv": []string{"/bin/sleep", marker}, "timeout_s": 120}, fmt.Sprintf("sleep-%d", i), sleepSession))
			}()
		}

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.run(ctx, loadClients, 0)
		}()
		deadline := time.Now().Add(90 * time.Second)
		for l.answered.Load() < int64(before) || len(procsWithMarker(marker)) < sleepers {
			if time.Now().After(deadline) {
				t.Fatalf("load did not reach %d answers with %d long calls running in 90s (answers %d, sleepers %d)",
					before, sleepers, l.answered.Load(), len(procsWithMarker(marker)))
			}
			time.Sleep(20 * time.Millisecond)
		}
		killedAt := time.Now()
		g.kill()
		cancel()
		<-done
		cancelLong()
		if left := waitNoProcs(marker, 5*time.Second); len(left) > 0 {
			t.Errorf("long calls' children %v survived the gateway's SIGKILL", left)
		}
		res := l.snapshot()
		inflight := 0
		for _, s := range res {
			if s.err != nil && s.at.Before(killedAt) {
				inflight++
			}
		}
		t.Logf("%s: killed after %d answers; %d calls cut off in flight; answers: %s", d.store, l.answered.Load(), inflight, summarize(res))

		t2 := time.Now()
		g2 := d.start(t)
		t.Logf("%s: restarted and listening in %s", d.store, time.Since(t2).Round(time.Millisecond))
		receipts := g2.sessionReceipts(t, l.session)
		p := &problems{t: t}
		for _, s := range res {
			if s.err == nil && s.status == http.StatusServiceUnavailable {
				p.add("call %d answered 503 %q without a fault", s.i, s.code)
			}
		}
		extra := checkAnswered(p, res, receipts)
		statuses := map[string]int{}
		for id, rc := range extra {
			statuses[rc.Decision+"/"+rc.status()]++
			switch {
			case rc.Decision == "allow" && rc.status() != "interrupted" && rc.status() != "succeeded":
				p.add("unanswered allowed call's receipt %s is %q, want interrupted (or succeeded)", id, rc.status())
			case rc.Decision != "allow" && rc.status() != "error":
				p.add("unanswered refused call's receipt %s is %q, want error", id, rc.status())
			}
		}
		if len(extra) > inflight {
			p.add("%d receipts without an answer, but only %d calls were in flight", len(extra), inflight)
		}
		sleeping := g2.sessionReceipts(t, sleepSession)
		if len(sleeping) != sleepers {
			p.add("%d receipts for the %d long calls running at the kill", len(sleeping), sleepers)
		}
		for id, rc := range sleeping {
			if rc.Decision != "allow" || rc.status() != "interrupted" {
				p.add("long call's receipt %s: decision %q outcome %q, want allow/interrupted", id, rc.Decision, rc.status())
			}
		}
		pending := g2.listReceipts(t, url.Values{"outcome": {"pending"}, "limit": {"1000"}})
		for _, rc := range pending {
			p.add("receipt %s still pending after the restart", rc.ID)
		}
		p.report("crash recovery")
		t.Logf("%s: %d receipts for %d answers; unanswered receipts by decision/outcome: %v; long calls interrupted: %d",
			d.store, len(receipts), l.answered.Load(), statuses, len(sleeping))
		if !strings.Contains(g2.stderr.String(), "calls left pending by a previous run marked interrupted") {
			t.Error("the restart did not log the interrupted calls")
		}
		if err := g2.stop(20 * time.Second); err != nil {
			t.Fatalf("gateway stop: %v", err)
		}
		t.Logf("%s: %s", d.store, verifyEvidence(t, d, vkey))
	})
}
