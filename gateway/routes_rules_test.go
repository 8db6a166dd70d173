package gateway

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// TestReceiptRuleFilter: GET /v1/receipts?rule= and the export select the
// receipts whose decision names the rule id, the receipt and the CSV carry
// the rule ids, and a malformed rule id is invalid_input on field rule.
func TestReceiptRuleFilter(t *testing.T) {
	t.Parallel()
	s := newEvidenceServer(t, false)
	decide := func(decision string, ids ...string) uuid.UUID {
		t.Helper()
		id := uuid.Must(uuid.NewV7())
		d := evidence.Event{ID: id, Kind: evidence.KindDecision, PrincipalID: "agent-1", Tool: "Exec",
			Decision: decision, RuleIDs: ids}
		if err := s.w.Append(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		return id
	}
	denied := decide(wire.DecisionDeny, "exec.shape_mismatch", "exec.env_deny")
	allowed := decide(wire.DecisionAllow, "grant:role/agent/Exec", "exec.shape.git.log")
	decide(wire.DecisionAllow) // no rule ids: matches no rule filter

	for _, tc := range []struct {
		q    string
		want []uuid.UUID
	}{
		{"rule=exec.env_deny", []uuid.UUID{denied}},
		{"rule=exec.shape.git.log", []uuid.UUID{allowed}},
		{"rule=exec.shape.git.log&decision=deny", nil},
		{"rule=exec.shape", nil},
	} {
		var list wire.ReceiptList
		if st, eb := get(t, s.url+"/v1/receipts?"+tc.q, auditorKey, &list); st != 200 {
			t.Fatalf("receipts?%s = %d %+v", tc.q, st, eb.Error)
		}
		var got []uuid.UUID
		for _, r := range list.Receipts {
			got = append(got, uuid.MustParse(r.ID))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("receipts?%s = %v, want %v", tc.q, got, tc.want)
		}
	}

	var r wire.Receipt
	if st, eb := get(t, s.url+"/v1/receipts/"+denied.String(), auditorKey, &r); st != 200 {
		t.Fatalf("receipt = %d %+v", st, eb.Error)
	}
	if !slices.Equal(r.RuleIDs, []string{"exec.shape_mismatch", "exec.env_deny"}) {
		t.Errorf("receipt rule_ids = %q", r.RuleIDs)
	}

	for _, bad := range []string{"rule=has%20space", "rule=%3Cscript%3E"} {
		if st, eb := get(t, s.url+"/v1/receipts?"+bad, auditorKey, nil); st != 400 || eb.Error == nil || eb.Error.Details["field"] != "rule" {
			t.Errorf("receipts?%s = %d %+v, want 400 on field rule", bad, st, eb.Error)
		}
	}

	req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/receipts/export?format=csv&rule=exec.env_deny", nil)
	req.Header.Set("Authorization", "Bearer "+auditorKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rows, err := csv.NewReader(resp.Body).ReadAll()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("export = %d, %v", resp.StatusCode, err)
	}
	if len(rows) != 2 {
		t.Fatalf("export rows = %q, want header and one receipt", rows)
	}
	col := slices.Index(rows[0], "rule_ids")
	if col < 0 || rows[1][col] != "exec.shape_mismatch exec.env_deny" || rows[1][0] != denied.String() {
		t.Errorf("export = %q, want rule_ids column %q", rows, "exec.shape_mismatch exec.env_deny")
	}
}

// TestGatewayRefusalNamesItsRule: a call the gateway refuses before the
// policy (here an unknown tool) is recorded with the rule id
// gateway.<code>, and found by it.
func TestGatewayRefusalNamesItsRule(t *testing.T) {
	t.Parallel()
	s := newEvidenceServer(t, false)
	body, _ := json.Marshal(wire.ToolCallRequest{Tool: "no.such.tool", Input: json.RawMessage(`{}`)})
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/tool-calls", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+agentKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out wire.ToolCallResponse
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || out.ReceiptID == "" {
		t.Fatalf("unknown tool = %d %+v", resp.StatusCode, out)
	}
	var list wire.ReceiptList
	if st, eb := get(t, s.url+"/v1/receipts?rule=gateway.unknown_tool", auditorKey, &list); st != 200 {
		t.Fatalf("receipts = %d %+v", st, eb.Error)
	}
	if len(list.Receipts) != 1 || list.Receipts[0].ID != out.ReceiptID || !slices.Equal(list.Receipts[0].RuleIDs, []string{"gateway.unknown_tool"}) {
		t.Errorf("receipts?rule=gateway.unknown_tool = %+v, want receipt %s", list.Receipts, out.ReceiptID)
	}
}
