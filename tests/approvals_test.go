package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
)

// approvalAnswer is a 202 approval_required answer's approval part.
type approvalAnswer struct {
	Approval struct {
		ID        string    `json:"id"`
		Status    string    `json:"status"`
		ExpiresAt time.Time `json:"expires_at"`
	} `json:"approval"`
}

type approvalView struct {
	ID          string         `json:"id"`
	ReceiptID   string         `json:"receipt_id"`
	Status      string         `json:"status"`
	PrincipalID string         `json:"principal_id"`
	Tool        string         `json:"tool"`
	Args        map[string]any `json:"args"`
	Reason      string         `json:"reason"`
	DecidedBy   string         `json:"decided_by"`
}

type approvalResult struct {
	Approval approvalView    `json:"approval"`
	Result   json.RawMessage `json:"result"`
	Status   int             `json:"status"`
}

// requireApproval makes principal's calls need a person (the e2e policy
// returns approval verbatim).
func requireApproval(t *testing.T, d *deployment, ttl int, principals ...string) {
	t.Helper()
	editPrincipals(t, d, func(ps map[string]map[string]any) {
		for _, p := range principals {
			if ps[p] == nil {
				ps[p] = map[string]any{"tools": []any{"Exec"}, "fs_grants": []any{
					map[string]any{"path": "/usr", "mode": "r"}, map[string]any{"path": d.scratch, "mode": "rw"}}}
			}
			ps[p]["approval"] = map[string]any{"required": true, "reason": "e2e: a person approves " + p, "approvers": []any{"role:approver"}, "ttl_s": ttl}
		}
	})
}

// touchCall is an Exec that appends a line to file: it ran once per line.
func touchCall(file string) map[string]any {
	return map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/sh", "-c", "echo ran >> " + file}}}
}

func ranCount(t *testing.T, file string) int {
	t.Helper()
	return lineCount(t, file, "ran")
}

// lineCount counts how often line, ended by a newline, stands in file (0
// when file does not exist yet).
func lineCount(t *testing.T, file, line string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), line+"\n")
}

// approvalReplicas starts two gateways on one PostgreSQL database whose
// policy parks agentFull's calls for approval (300 s); d1 holds the keys.
func approvalReplicas(t *testing.T) (*deployment, *gateway, *gateway) {
	t.Helper()
	d1 := newDeployment(t, storePostgres)
	requireApproval(t, d1, 300, agentFull)
	d2 := mpSecondInstance(t, d1)
	return d1, d1.start(t), d2.start(t)
}

// park makes a call that must be parked and returns its answer.
func park(t *testing.T, g *gateway, key string, body any) (*toolCallResult, approvalAnswer) {
	t.Helper()
	res := g.call(t, key, body)
	if res.status != http.StatusAccepted || res.errCode() != "approval_required" {
		t.Fatalf("call needing approval = %s; want 202 approval_required", res.response)
	}
	var a approvalAnswer
	if err := json.Unmarshal(res.body, &a); err != nil || a.Approval.ID == "" || a.Approval.Status != "pending" {
		t.Fatalf("202 answer has no pending approval: %v %s", err, res.response)
	}
	if res.Output.Error.Details["approval_id"] != a.Approval.ID {
		t.Errorf("details.approval_id = %v, want %s", res.Output.Error.Details["approval_id"], a.Approval.ID)
	}
	return res, a
}

func decideApproval(t *testing.T, g *gateway, key, id, decision, reason string) (response, approvalResult) {
	t.Helper()
	r := g.do(t, http.MethodPost, "/v1/approvals/"+id, key, map[string]string{"decision": decision, "reason": reason})
	var out approvalResult
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatalf("decode approval result: %v %s", err, r)
		}
	}
	return r, out
}

func pendingApprovals(t *testing.T, g *gateway, key string) map[string]approvalView {
	t.Helper()
	r := g.do(t, http.MethodGet, "/v1/approvals?status=pending", key, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/approvals = %s", r)
	}
	var list struct {
		Approvals []approvalView `json:"approvals"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]approvalView{}
	for _, a := range list.Approvals {
		out[a.ID] = a
	}
	return out
}

// approvalEvents are the chained approval events of a receipt, from every
// instance's chain, verified.
func approvalEvents(t *testing.T, d *deployment, receipt string, instances ...string) []evidence.ApprovalBody {
	t.Helper()
	s := mpOpenStore(t, d)
	var out []evidence.ApprovalBody
	for _, inst := range instances {
		head := mpChainHead(t, s, inst)
		evs, err := s.ChainEvents(context.Background(), head.chain)
		if err != nil {
			t.Fatal(err)
		}
		if err := evidence.VerifyChain(evs); err != nil {
			t.Fatalf("chain of %s does not verify: %v", inst, err)
		}
		for _, e := range evs {
			if e.Kind == evidence.KindApproval && e.ReceiptID.String() == receipt {
				var b evidence.ApprovalBody
				if err := json.Unmarshal(e.Body, &b); err != nil {
					t.Fatal(err)
				}
				out = append(out, b)
			}
		}
	}
	return out
}

// TestApprovals drives contract section 9 through the real binary, on
// every store: a parked call runs nothing and has a durable receipt; only
// approvers see and decide it; nobody approves their own call; it survives
// a restart and runs exactly once when approved, as parked, with the
// approver, reason and time chained on its receipt; the long poll returns
// the final answer to its caller only; reject and expiry end it with their
// codes; a policy that now denies stops it; the webhook hears of it.
func TestApprovals(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, d *deployment) {
		hooks := make(chan map[string]any, 16)
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body map[string]any
			b, _ := io.ReadAll(r.Body)
			if json.Unmarshal(b, &body) == nil {
				hooks <- body
			}
		}))
		t.Cleanup(hook.Close)
		appendConfig(t, d, "approvals:\n  webhook_url: "+hook.URL+"/hook\n  mcp_wait: 1s\n")
		requireApproval(t, d, 300, agentFull)
		requireApproval(t, d, 1, agentApprover) // expires while the test looks
		g := d.start(t)
		ranFile := filepath.Join(d.scratch, "ran")

		// Parked: 202, nothing ran, the receipt is durable and pending.
		res, a := park(t, g, d.keys[agentFull], touchCall(ranFile))
		if n := ranCount(t, ranFile); n != 0 {
			t.Fatalf("a parked call ran %d times", n)
		}
		rc, ok := g.getReceipt(t, res.ReceiptID)
		if !ok || rc.Decision != "allow" || rc.status() != "pending" || rc.errorCode() != "approval_required" {
			t.Fatalf("parked receipt = %+v (found %v); want decision allow, outcome pending approval_required", rc, ok)
		}
		select {
		case h := <-hooks:
			if ap, _ := h["approval"].(map[string]any); ap["id"] != a.Approval.ID || h["event"] != "approval.pending" {
				t.Errorf("webhook body = %v, want approval.pending for %s", h, a.Approval.ID)
			}
		case <-time.After(10 * time.Second):
			t.Error("the webhook heard of no pending approval")
		}

		// Who may see and decide it.
		if r := g.do(t, http.MethodGet, "/v1/approvals", d.keys[agentFull], nil); r.status != http.StatusForbidden {
			t.Errorf("agent listing approvals = %s, want 403", r)
		}
		if v, ok := pendingApprovals(t, g, d.keys[approver1])[a.Approval.ID]; !ok || v.PrincipalID != agentFull || v.ReceiptID != res.ReceiptID || v.Tool != "Exec" {
			t.Errorf("pending list entry = %+v (found %v)", v, ok)
		}
		if r, _ := decideApproval(t, g, d.keys[agentFull], a.Approval.ID, "approve", "mine"); r.status != http.StatusForbidden {
			t.Errorf("the agent approving its own call = %s, want 403", r)
		}
		// Self-approval by a principal that holds the approver role.
		_, own := park(t, g, d.keys[agentApprover], touchCall(filepath.Join(d.scratch, "own")))
		if r, _ := decideApproval(t, g, d.keys[agentApprover], own.Approval.ID, "approve", "mine"); r.status != http.StatusForbidden || !strings.Contains(string(r.body), "own call") {
			t.Errorf("approving one's own call = %s, want 403 naming the rule", r)
		}
		// The long poll ends pending while nobody decided.
		if r := g.do(t, http.MethodGet, "/v1/tool-calls/"+res.ReceiptID+"?wait=300ms", d.keys[agentFull], nil); r.status != http.StatusAccepted {
			t.Errorf("long poll of a pending call = %s, want 202", r)
		}

		// Restart while parked: the call survives and runs once, as parked.
		if err := g.stop(10 * time.Second); err != nil {
			t.Fatalf("stop: %v", err)
		}
		g = d.start(t)
		if _, ok := pendingApprovals(t, g, d.keys[approver1])[a.Approval.ID]; !ok {
			t.Fatal("the parked call did not survive the restart")
		}
		waiter := make(chan response, 1)
		go func() {
			r, _ := g.tryDo(context.Background(), http.MethodGet, "/v1/tool-calls/"+res.ReceiptID+"?wait=60s", "Bearer "+d.keys[agentFull], nil)
			waiter <- r
		}()
		r, out := decideApproval(t, g, d.keys[approver1], a.Approval.ID, "approve", "looks fine")
		if r.status != http.StatusOK || out.Status != http.StatusOK || out.Approval.Status != "approved" || out.Approval.DecidedBy != approver1 {
			t.Fatalf("approve = %s; want 200 with the run's answer", r)
		}
		if n := ranCount(t, ranFile); n != 1 {
			t.Fatalf("the approved call ran %d times, want once", n)
		}
		final := decodeToolCall(t, <-waiter)
		if final.status != http.StatusOK || !final.Output.Success || final.ReceiptID != res.ReceiptID {
			t.Errorf("long poll final answer = %s; want the run's 200 under the parked receipt", final.response)
		}
		if r := g.do(t, http.MethodGet, "/v1/tool-calls/"+res.ReceiptID, d.keys[agentNarrow], nil); r.status != http.StatusNotFound {
			t.Errorf("another agent reading the call = %s, want 404", r)
		}
		if r, _ := decideApproval(t, g, d.keys[approver2], a.Approval.ID, "approve", "again"); r.status != http.StatusPreconditionFailed {
			t.Errorf("approving twice = %s, want 412", r)
		}
		if n := ranCount(t, ranFile); n != 1 {
			t.Fatalf("the call ran %d times after a second approval, want once", n)
		}
		rc = g.waitReceipt(t, res.ReceiptID, 10*time.Second, func(r receipt) bool { return r.status() == "succeeded" })
		evs := approvalEvents(t, d, res.ReceiptID, d.instanceID)
		if len(evs) == 0 || evs[len(evs)-1].Action != "approved" || evs[len(evs)-1].By != approver1 || evs[len(evs)-1].Reason != "looks fine" {
			t.Errorf("approval events on the receipt = %+v; want approved by %s with its reason", evs, approver1)
		}

		// Reject.
		rejFile := filepath.Join(d.scratch, "rejected")
		res2, a2 := park(t, g, d.keys[agentFull], touchCall(rejFile))
		r, out = decideApproval(t, g, d.keys[approver2], a2.Approval.ID, "reject", "not today")
		if r.status != http.StatusOK || out.Status != http.StatusForbidden || !strings.Contains(string(out.Result), "approval_rejected") {
			t.Fatalf("reject = %s; want the answer approval_rejected (403)", r)
		}
		if got := decodeToolCall(t, g.do(t, http.MethodGet, "/v1/tool-calls/"+res2.ReceiptID, d.keys[agentFull], nil)); got.status != http.StatusForbidden || got.errCode() != "approval_rejected" {
			t.Errorf("rejected call's answer = %s", got.response)
		}
		if ranCount(t, rejFile) != 0 {
			t.Error("a rejected call ran")
		}
		g.waitReceipt(t, res2.ReceiptID, 10*time.Second, func(r receipt) bool { return r.errorCode() == "approval_rejected" })

		// Expiry (TTL 1 s): the sweeper ends it; approving it later fails.
		expFile := filepath.Join(d.scratch, "expired")
		res3, a3 := park(t, g, d.keys[agentApprover], touchCall(expFile))
		got := decodeToolCall(t, g.do(t, http.MethodGet, "/v1/tool-calls/"+res3.ReceiptID+"?wait=20s", d.keys[agentApprover], nil))
		if got.status != http.StatusGone || got.errCode() != "approval_expired" {
			t.Fatalf("expired call's answer = %s; want 410 approval_expired", got.response)
		}
		if r, _ := decideApproval(t, g, d.keys[approver1], a3.Approval.ID, "approve", "late"); r.status != http.StatusPreconditionFailed && r.status != http.StatusGone {
			t.Errorf("approving an expired call = %s, want 412 or 410", r)
		}
		g.waitReceipt(t, res3.ReceiptID, 10*time.Second, func(r receipt) bool { return r.errorCode() == "approval_expired" })
		if ranCount(t, expFile) != 0 {
			t.Error("an expired call ran")
		}

		// The live policy now denies: approval re-decides and stops it.
		denyFile := filepath.Join(d.scratch, "denied")
		res4, a4 := park(t, g, d.keys[agentFull], touchCall(denyFile))
		editPrincipals(t, d, func(ps map[string]map[string]any) { ps[agentFull]["tools"] = []any{} })
		if r := g.do(t, http.MethodPost, "/v1/policy/reload", d.keys[admin], nil); r.status != http.StatusOK {
			t.Fatalf("reload = %s", r)
		}
		r, out = decideApproval(t, g, d.keys[approver1], a4.Approval.ID, "approve", "ok")
		if r.status != http.StatusOK || !strings.Contains(string(out.Result), "permission_denied") {
			t.Fatalf("approving under a policy that now denies = %s; want the call stopped permission_denied", r)
		}
		if ranCount(t, denyFile) != 0 {
			t.Error("a call the live policy denies ran after approval")
		}
		g.waitReceipt(t, res4.ReceiptID, 10*time.Second, func(r receipt) bool { return r.errorCode() == "permission_denied" })
	})
}

// TestApprovalRacingReplicas: two gateways on one PostgreSQL database; a
// call parked on one is approved on both at once by two approvers: it runs
// exactly once, and the loser is told it was already settled.
func TestApprovalRacingReplicas(t *testing.T) {
	t.Parallel()
	d1, g1, g2 := approvalReplicas(t)
	for round := range 3 {
		file := filepath.Join(d1.scratch, "race-"+uuid.NewString())
		_, a := park(t, g1, d1.keys[agentFull], touchCall(file))
		var wg sync.WaitGroup
		statuses := make([]int, 2)
		for i, g := range []*gateway{g1, g2} {
			key := d1.keys[[]string{approver1, approver2}[i]]
			wg.Go(func() {
				r, _ := g.tryDo(context.Background(), http.MethodPost, "/v1/approvals/"+a.Approval.ID, "Bearer "+key,
					map[string]string{"decision": "approve", "reason": "race"})
				statuses[i] = r.status
			})
		}
		wg.Wait()
		ok := 0
		for _, s := range statuses {
			switch s {
			case http.StatusOK:
				ok++
			case http.StatusPreconditionFailed:
			default:
				t.Errorf("round %d: an approver got HTTP %d", round, s)
			}
		}
		if ok != 1 || ranCount(t, file) != 1 {
			t.Fatalf("round %d: %d approvals succeeded and the call ran %d times; want exactly once", round, ok, ranCount(t, file))
		}
	}
}

// TestQuotaExactAcrossReplicas: two gateways on one PostgreSQL database
// hammer one quota key; never more than the limit is admitted, the rest
// get 429 rate_limited with Retry-After and a receipt, and GET /v1/quotas
// shows the count. On SQLite the counter survives a restart.
func TestQuotaExactAcrossReplicas(t *testing.T) {
	t.Parallel()
	const limit = 7
	quota := func(d *deployment, n int) {
		editPrincipals(t, d, func(ps map[string]map[string]any) {
			ps[agentFull]["quotas"] = []any{map[string]any{"key": "agent-full/Exec", "limit": n, "window_s": 366 * 24 * 3600, "cost": 1}}
		})
	}
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		d1 := newDeployment(t, storePostgres)
		quota(d1, limit)
		d2 := mpSecondInstance(t, d1)
		g1, g2 := d1.start(t), d2.start(t)
		var mu sync.Mutex
		counts := map[int]int{}
		var wg sync.WaitGroup
		for _, g := range []*gateway{g1, g2} {
			for range 8 {
				wg.Go(func() {
					for range 3 {
						r, err := g.tryDo(context.Background(), http.MethodPost, "/v1/tool-calls", "Bearer "+d1.keys[agentFull],
							map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true"}}})
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						counts[r.status]++
						mu.Unlock()
						if r.status == http.StatusTooManyRequests {
							checkRateLimited(t, g, r)
						}
					}
				})
			}
		}
		wg.Wait()
		if counts[http.StatusOK] != limit || counts[http.StatusTooManyRequests] != 48-limit {
			t.Fatalf("answers by status = %v; want exactly %d admitted of 48, the rest 429", counts, limit)
		}
		r := g2.do(t, http.MethodGet, "/v1/quotas?key=agent-full/Exec", d1.keys[auditor], nil)
		if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"used":7`)) {
			t.Errorf("GET /v1/quotas = %s; want used 7", r)
		}
		if r := g2.do(t, http.MethodGet, "/v1/quotas?key=agent-full/Exec", d1.keys[agentFull], nil); r.status != http.StatusForbidden {
			t.Errorf("agent reading quotas = %s, want 403", r)
		}
	})
	t.Run("sqlite restart", func(t *testing.T) {
		t.Parallel()
		d := newDeployment(t, storeSQLite)
		quota(d, 2)
		g := d.start(t)
		body := map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true"}}}
		for range 2 {
			if res := g.call(t, d.keys[agentFull], body); res.status != http.StatusOK {
				t.Fatalf("call within the quota = %s", res.response)
			}
		}
		if err := g.stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		g = d.start(t)
		r := g.do(t, http.MethodPost, "/v1/tool-calls", d.keys[agentFull], body)
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("third call after a restart = %s; want 429 (the counter survives)", r)
		}
		checkRateLimited(t, g, r)
	})
}

// checkRateLimited holds a 429 to the contract: rate_limited, details.retry_after_s
// equal to the Retry-After header, a receipt recording the refusal.
func checkRateLimited(t *testing.T, g *gateway, r response) {
	t.Helper()
	res := decodeToolCall(t, r)
	if res.errCode() != "rate_limited" {
		t.Errorf("429 with code %q", res.errCode())
		return
	}
	ra := r.header.Get("Retry-After")
	if ra == "" || ra == "0" {
		t.Errorf("429 without Retry-After: %v", r.header)
	}
	if v, _ := res.Output.Error.Details["retry_after_s"].(float64); ra != strconv.Itoa(int(v)) {
		t.Errorf("Retry-After %s vs details.retry_after_s %v", ra, v)
	}
	rc, ok := g.getReceipt(t, res.ReceiptID)
	if !ok || rc.errorCode() != "rate_limited" || rc.Decision != "deny" {
		t.Errorf("rate-limited receipt = %+v (found %v); want deny / rate_limited", rc, ok)
	}
}

// TestApprovalsCLIAndMCP: `gateway approvals list|approve|reject` decide
// parked calls through the REST API with the key from PORTCULLIS_API_KEY;
// MCP tools/call of a parked call waits approvals.mcp_wait, then answers
// an isError result naming the approval, and the call stays parked.
func TestApprovalsCLIAndMCP(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	appendConfig(t, d, "approvals:\n  mcp_wait: 1s\n")
	requireApproval(t, d, 300, agentFull)
	g := d.start(t)
	cli := func(key string, args ...string) (string, error) {
		cmd := exec.Command(gatewayBin, append([]string{"approvals"}, args...)...)
		cmd.Env = append(gatewayEnv(), "PORTCULLIS_URL="+g.baseURL, "PORTCULLIS_API_KEY="+key)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	okFile, noFile := filepath.Join(d.scratch, "cli-ok"), filepath.Join(d.scratch, "cli-no")
	_, a1 := park(t, g, d.keys[agentFull], touchCall(okFile))
	_, a2 := park(t, g, d.keys[agentFull], touchCall(noFile))
	out, err := cli(d.keys[approver1], "list")
	if err != nil || !strings.Contains(out, a1.Approval.ID) || !strings.Contains(out, a2.Approval.ID) {
		t.Fatalf("approvals list = %v\n%s", err, out)
	}
	if out, err := cli(d.keys[agentFull], "approve", a1.Approval.ID, "--reason", "mine"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("the agent approving by CLI = %v\n%s; want forbidden", err, out)
	}
	if out, err := cli(d.keys[approver1], "approve", a1.Approval.ID, "--reason", "cli ok"); err != nil || !strings.Contains(out, "approved by "+approver1) {
		t.Fatalf("approvals approve = %v\n%s", err, out)
	}
	if out, err := cli(d.keys[approver2], "reject", a2.Approval.ID, "--reason", "cli no"); err != nil || !strings.Contains(out, "rejected by "+approver2) {
		t.Fatalf("approvals reject = %v\n%s", err, out)
	}
	if ranCount(t, okFile) != 1 || ranCount(t, noFile) != 0 {
		t.Errorf("ran %d approved and %d rejected; want 1 and 0", ranCount(t, okFile), ranCount(t, noFile))
	}

	sid := mcpSession(t, g, d.keys[agentFull])
	st, _, body := mcpPost(t, g, d.keys[agentFull], sid,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"Exec","arguments":{"argv":["/usr/bin/true"]}}}`, nil)
	var res mcpToolResult
	if err := json.Unmarshal([]byte(body), &res); st != http.StatusOK || err != nil || !res.Result.IsError {
		t.Fatalf("MCP tools/call of a parked call = %d %s; want an isError result", st, body)
	}
	text := ""
	for _, c := range res.Result.Content {
		text += c.Text
	}
	pending := pendingApprovals(t, g, d.keys[approver1])
	if len(pending) != 1 {
		t.Fatalf("%d pending approvals after the MCP call, want 1", len(pending))
	}
	for id := range pending {
		if !strings.Contains(text, "approval_required") || !strings.Contains(text, id) {
			t.Errorf("MCP result %q does not name approval_required and the approval %s", text, id)
		}
	}

	// With a progress token the wait streams notifications/progress (SSE)
	// and ends with the response as the last event.
	st, ctype, events := mcpPostSSE(t, g, d.keys[agentFull], sid,
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"Exec","arguments":{"argv":["/usr/bin/true"]},"_meta":{"progressToken":"tok-8"}}}`)
	if st != http.StatusOK || !strings.HasPrefix(ctype, "text/event-stream") || len(events) < 2 {
		t.Fatalf("tools/call with a progress token = %d %q, %d events; want an event stream", st, ctype, len(events))
	}
	last := 0.0
	for i, ev := range events[:len(events)-1] {
		var n struct {
			Method string `json:"method"`
			Params struct {
				ProgressToken string  `json:"progressToken"`
				Progress      float64 `json:"progress"`
				Total         float64 `json:"total"`
			} `json:"params"`
		}
		if err := json.Unmarshal([]byte(ev), &n); err != nil || n.Method != "notifications/progress" || n.Params.ProgressToken != "tok-8" ||
			n.Params.Total != 1 || (i > 0 && n.Params.Progress <= last) {
			t.Errorf("event %d = %s: want notifications/progress for tok-8, increasing, of total 1", i, ev)
		}
		last = n.Params.Progress
	}
	var final mcpToolResult
	if err := json.Unmarshal([]byte(events[len(events)-1]), &final); err != nil || !final.Result.IsError {
		t.Errorf("the stream's last event is not the tools/call result: %s", events[len(events)-1])
	}
}

// mcpPostSSE posts one message and reads an SSE answer: status, content
// type and the data of each event.
func mcpPostSSE(t *testing.T, g *gateway, key, session, body string) (int, string, []string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.baseURL+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var events []string
	for _, block := range strings.Split(string(b), "\n\n") {
		for _, line := range strings.Split(block, "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				events = append(events, data)
			}
		}
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), events
}
