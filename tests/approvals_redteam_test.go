package tests

import (
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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

// TestExplorerApprovalsXSS drives /ui/approvals.html in headless Chromium
// with HTML where an agent and its policy put text the page shows: the
// parked call's argv and the policy's approval reason. Both are shown as
// text and nothing they hold runs.
func TestExplorerApprovalsXSS(t *testing.T) {
	bin := chromiumPath(t)
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	requireApproval(t, d, 300, agentFull)
	editPrincipals(t, d, func(ps map[string]map[string]any) {
		ps[agentFull]["approval"].(map[string]any)["reason"] = "reason " + explorerXSS
	})
	g := d.start(t)
	_, a := park(t, g, d.keys[agentFull], map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/echo", explorerXSS}}})

	br := newBrowser(t, bin)
	br.do("open the approvals page", chromedp.Navigate(g.baseURL+"/ui/approvals.html"), chromedp.WaitVisible(chromedp.CSS("#login-form")))
	br.do("sign in as an approver", chromedp.SendKeys(chromedp.CSS("#api-key"), d.keys[approver1]), chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)))
	br.waitFor("the parked call to be listed", `document.querySelectorAll('#rows tr').length === 1`)
	var page struct {
		Imgs   int    `json:"imgs"`
		Pwned  any    `json:"pwned"`
		Title  string `json:"title"`
		Script int    `json:"script"`
		Row    string `json:"row"`
	}
	br.eval(`({imgs: document.querySelectorAll('img[src="x"]').length, pwned: window.__pwned === undefined ? null : window.__pwned,
		title: document.title, script: document.querySelectorAll('script').length,
		row: document.querySelector('#rows tr').textContent})`, &page)
	if page.Imgs != 0 || page.Pwned != nil || page.Title != "Portcullis · Pending approvals" || page.Script != 2 {
		t.Errorf("HTML from a parked call was parsed: img[src=x]=%d __pwned=%v title=%q scripts=%d", page.Imgs, page.Pwned, page.Title, page.Script)
	}
	if strings.Count(page.Row, "<img src=x onerror=") != 2 || !strings.Contains(page.Row, "reason <img") {
		t.Errorf("argv and reason not shown as text: %s", page.Row)
	}
	for _, m := range br.messages() {
		if text := m.Text; m.IsException() || strings.Contains(text, "Content Security Policy") || strings.Contains(text, "Trusted") {
			t.Errorf("browser console: %s", m)
		}
	}
	if v := pendingApprovals(t, g, d.keys[approver1])[a.Approval.ID]; !strings.Contains(v.Reason, explorerXSS) {
		t.Errorf("the API's reason = %q; want the policy's, verbatim", v.Reason)
	}
}
