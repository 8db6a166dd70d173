package tests

import (
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestApprovalLiveApprovers: a call parked under a policy revision that
// let any approver decide it is approved after the live policy narrowed
// its approvers to one named principal. The re-decision at approval must
// hold the approver to the live approvers too: an approver the live policy
// no longer names cannot make the call run (it stops, forbidden), while
// the one it names can.
func TestApprovalLiveApprovers(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	requireApproval(t, d, 300, agentFull)
	g := d.start(t)

	oldFile, newFile := filepath.Join(d.scratch, "old-approver"), filepath.Join(d.scratch, "named-approver")
	res1, a1 := park(t, g, d.keys[agentFull], touchCall(oldFile))
	_, a2 := park(t, g, d.keys[agentFull], touchCall(newFile))

	// The live policy now names approver-2 alone.
	editPrincipals(t, d, func(ps map[string]map[string]any) {
		ps[agentFull]["approval"] = map[string]any{"required": true, "reason": "e2e: only approver-2 now", "approvers": []any{"principal:" + approver2}, "ttl_s": 300}
	})
	if r := g.do(t, http.MethodPost, "/v1/policy/reload", d.keys[admin], nil); r.status != http.StatusOK {
		t.Fatalf("reload = %s", r)
	}

	r, out := decideApproval(t, g, d.keys[approver1], a1.Approval.ID, "approve", "parked approvers said I may")
	if n := ranCount(t, oldFile); n != 0 {
		t.Fatalf("an approver the live policy no longer names made the call run (%d times): %s", n, r)
	}
	if r.status != http.StatusOK || out.Status != http.StatusForbidden || !strings.Contains(string(out.Result), "forbidden") {
		t.Fatalf("approval by an approver the live policy no longer names = %s; want 200 with the call stopped forbidden", r)
	}
	g.waitReceipt(t, res1.ReceiptID, 10*time.Second, func(r receipt) bool { return r.errorCode() == "forbidden" })

	r, out = decideApproval(t, g, d.keys[approver2], a2.Approval.ID, "approve", "I am named")
	if r.status != http.StatusOK || out.Status != http.StatusOK || ranCount(t, newFile) != 1 {
		t.Fatalf("approval by the approver the live policy names = %s; want the call run once", r)
	}
}

// TestApprovalPendingBounded: parking draws on no quota, so an agent could
// park calls without end, filling the store with exact inputs and burying
// one call among thousands on the approvers' page. A principal may have
// gateway.MaxPendingApprovals (100) calls waiting; the next is refused
// rate_limited with a receipt and is not parked, another principal is not
// affected, and once one is decided the agent may park again.
func TestApprovalPendingBounded(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	requireApproval(t, d, 300, agentFull, agentApprover)
	g := d.start(t)
	call := func(i int) map[string]any {
		return map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true", strconv.Itoa(i)}}}
	}
	var first approvalAnswer
	for i := range 100 {
		_, a := park(t, g, d.keys[agentFull], call(i))
		if i == 0 {
			first = a
		}
	}
	res := g.call(t, d.keys[agentFull], call(100))
	if res.status != http.StatusTooManyRequests || res.errCode() != "rate_limited" || res.ReceiptID == "" {
		t.Fatalf("the 101st call waiting for approval = %s; want 429 rate_limited with a receipt", res.response)
	}
	if n := len(pendingApprovals(t, g, d.keys[approver1])); n != 100 {
		t.Fatalf("%d calls pending; want 100", n)
	}
	rc := g.waitReceipt(t, res.ReceiptID, 10*time.Second, func(r receipt) bool { return r.errorCode() == "rate_limited" })
	if rc.Decision != "deny" {
		t.Errorf("refused call's receipt decision %q, want deny", rc.Decision)
	}
	park(t, g, d.keys[agentApprover], call(0))
	if r, _ := decideApproval(t, g, d.keys[approver1], first.Approval.ID, "reject", "flood"); r.status != http.StatusOK {
		t.Fatalf("reject = %s", r)
	}
	park(t, g, d.keys[agentFull], call(101))
}
