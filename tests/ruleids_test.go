package tests

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestReceiptRuleIDs: through the real binary on both stores, a denied
// call's receipt carries the rule id the policy named, the receipt is found
// by ?rule=, an allowed call's receipt names the grant, and the CSV export
// carries the rule_ids column.
func TestReceiptRuleIDs(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, d *deployment) {
		g := d.start(t)
		session := "rules-" + randHex(t, 4)
		denied := g.call(t, d.keys[agentNoExec], map[string]any{"tool": "Exec", "session_id": session,
			"input": map[string]any{"argv": []string{"/usr/bin/true"}}})
		if denied.status != http.StatusForbidden || denied.ReceiptID == "" {
			t.Fatalf("denied call: %s", denied.response)
		}
		allowed := g.call(t, d.keys[agentFull], map[string]any{"tool": "Exec", "session_id": session,
			"input": map[string]any{"argv": []string{"/usr/bin/true"}}})
		if allowed.status != http.StatusOK || allowed.ReceiptID == "" {
			t.Fatalf("allowed call: %s", allowed.response)
		}

		ruleIDs := func(raw string) []string {
			var r struct {
				RuleIDs []string `json:"rule_ids"`
			}
			if err := json.Unmarshal([]byte(raw), &r); err != nil {
				t.Fatal(err)
			}
			return r.RuleIDs
		}
		rc, ok := g.getReceipt(t, denied.ReceiptID)
		if !ok || rc.Decision != "deny" || !slices.Equal(ruleIDs(rc.raw), []string{"e2e.no_grant"}) {
			t.Errorf("denied receipt: %s", rc.raw)
		}
		rc, ok = g.getReceipt(t, allowed.ReceiptID)
		if !ok || !slices.Equal(ruleIDs(rc.raw), []string{"e2e.grant"}) {
			t.Errorf("allowed receipt: %s", rc.raw)
		}

		got := g.listReceipts(t, url.Values{"rule": {"e2e.no_grant"}, "session_id": {session}})
		if len(got) != 1 || got[0].ID != denied.ReceiptID {
			t.Errorf("?rule=e2e.no_grant = %d receipts, want only %s", len(got), denied.ReceiptID)
		}
		if got := g.listReceipts(t, url.Values{"rule": {"e2e.nothing"}}); len(got) != 0 {
			t.Errorf("?rule=e2e.nothing = %d receipts, want none", len(got))
		}

		r := g.do(t, http.MethodGet, "/v1/receipts/export?format=csv&rule=e2e.grant&session_id="+session, d.keys[auditor], nil)
		lines := strings.Split(strings.TrimSpace(string(r.body)), "\n")
		if r.status != http.StatusOK || len(lines) != 2 || !strings.HasSuffix(lines[0], ",rule_ids") ||
			!strings.HasSuffix(lines[1], ",e2e.grant") || !strings.HasPrefix(lines[1], allowed.ReceiptID) {
			t.Errorf("csv export ?rule=e2e.grant: %s", r)
		}
	})
}
