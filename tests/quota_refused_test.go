package tests

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestQuotaRefusedCallsDrawNothing: a call the gateway refuses before it
// runs (an invalid input, a dry run)
// draws nothing from its quota; only calls that run are counted.
func TestQuotaRefusedCallsDrawNothing(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	editPrincipals(t, d, func(ps map[string]map[string]any) {
		ps[agentFull]["quotas"] = []any{map[string]any{"key": "agent-full/Exec", "limit": 1, "window_s": 3600, "cost": 1}}
	})
	g := d.start(t)
	for _, in := range []map[string]any{
		{"argv": []string{}},                               // invalid input
		{"argv": "not a list"},                             // invalid input
		{"argv": []string{"/usr/bin/true"}, "bogus": true}, // unknown field
	} {
		body := map[string]any{"tool": "Exec", "input": in}
		if res := g.call(t, d.keys[agentFull], body); res.status == http.StatusOK || res.status == http.StatusTooManyRequests {
			t.Fatalf("refused call %v = %d %s", in, res.status, res.response)
		}
		if r := g.do(t, http.MethodPost, "/v1/decisions", d.keys[agentFull], body); r.status == http.StatusTooManyRequests {
			t.Fatalf("dry run %v = %s", in, r)
		}
	}
	ok := map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true"}}}
	if r := g.do(t, http.MethodPost, "/v1/decisions", d.keys[agentFull], ok); r.status != http.StatusOK {
		t.Fatalf("dry run = %s", r)
	}
	if res := g.call(t, d.keys[agentFull], ok); res.status != http.StatusOK {
		t.Fatalf("the one call the quota allows, after refused calls and dry runs = %d %s", res.status, res.response)
	}
	if r := g.do(t, http.MethodPost, "/v1/tool-calls", d.keys[agentFull], ok); r.status != http.StatusTooManyRequests {
		t.Fatalf("second call = %s; want 429", r)
	}
	r := g.do(t, http.MethodGet, "/v1/quotas?key=agent-full/Exec", d.keys[auditor], nil)
	if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"used":1`)) {
		t.Errorf("GET /v1/quotas = %s; want used 1", r)
	}
}

// TestQuotaRefusalReceiptsVerify: calls refused by their quota in the
// writer's group commit (the draw would pass the limit: the refusal's
// receipt is built there) leave deny receipts that carry the refusing
// rule, never an allow, and the chain holding them passes `gateway
// evidence verify` (the real CLI), on both stores.
func TestQuotaRefusalReceiptsVerify(t *testing.T) {
	t.Parallel()
	for _, st := range allStores {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			d := newDeployment(t, st)
			vkey := withCheckpoints(t, d)
			editPrincipals(t, d, func(ps map[string]map[string]any) {
				ps[agentFull]["quotas"] = []any{
					map[string]any{"key": "agent-full/Exec", "limit": 1, "window_s": 3600, "cost": 1},
				}
			})
			g := d.start(t)
			ok := map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true"}}}
			if res := g.call(t, d.keys[agentFull], ok); res.status != http.StatusOK {
				t.Fatalf("the one call the quota allows = %d %s", res.status, res.response)
			}
			var refused []string
			for range 3 {
				res := g.call(t, d.keys[agentFull], ok)
				if res.status != http.StatusTooManyRequests {
					t.Fatalf("call past the quota = %d %s; want 429", res.status, res.response)
				}
				if res.Decision != nil && res.Decision.Allow {
					t.Errorf("refused call answered with an allow decision: %s", res.response)
				}
				refused = append(refused, res.ReceiptID)
			}
			for _, id := range refused {
				rc := g.waitReceipt(t, id, 5*time.Second, func(receipt) bool { return true })
				if rc.Decision != "deny" {
					t.Errorf("receipt %s of a refused call: decision %q, want deny\n%s", id, rc.Decision, rc.raw)
				}
				if !strings.Contains(rc.raw, "gateway.rate_limited") {
					t.Errorf("receipt %s of a refused call does not name gateway.rate_limited\n%s", id, rc.raw)
				}
			}
			if err := g.stop(20 * time.Second); err != nil {
				t.Fatalf("gateway stop: %v", err)
			}
			t.Log(verifyEvidence(t, d, vkey))
		})
	}
}
