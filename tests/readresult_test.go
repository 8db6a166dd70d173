package tests

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// grantTool adds tool to the e2e policy's grants of each principal.
func grantTool(t *testing.T, d *deployment, tool string, principals ...string) {
	t.Helper()
	editPrincipals(t, d, func(ps map[string]map[string]any) {
		for _, p := range principals {
			entry := ps[p]
			tools, _ := entry["tools"].([]any)
			entry["tools"] = append(tools, tool)
		}
	})
}

// editPrincipals rewrites the deployment's policy data (data.json):
// edit changes e2e.principals in place.
func editPrincipals(t *testing.T, d *deployment, edit func(principals map[string]map[string]any)) {
	t.Helper()
	path := filepath.Join(d.bundleDir, "data.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]map[string]map[string]map[string]any
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	edit(data["e2e"]["principals"])
	writeJSON(t, path, data)
}

// TestReadToolResult drives read_tool_result through the real binary: an
// agent reads back the full output of its own earlier call in the same
// session, with the secret the tool printed redacted; another principal
// naming the same receipt id, or the same agent in another session, gets
// not_found, worded exactly as for a receipt that never existed; an
// output over evidence.results_max_bytes answers read_limit; result files
// are 0600 in a 0700 directory and hold no secret; after
// evidence.results_retention the result is gone.
func TestReadToolResult(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	grantTool(t, d, "read_tool_result", agentFull, agentNarrow)
	f, err := os.OpenFile(d.configPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	const retention = 6 * time.Second
	_, _ = f.WriteString("evidence:\n  results_retention: 6s\n  results_max_bytes: 2048\n")
	f.Close()
	g := d.start(t)

	r := g.do(t, http.MethodGet, "/v1/tools", d.keys[agentFull], nil)
	if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"read_tool_result"`)) {
		t.Fatalf("GET /v1/tools does not offer read_tool_result to a principal granted it: %s", r)
	}

	const token = "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	start := time.Now()
	call := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": []string{"/usr/bin/printf", "%s%s\\n", "deploy token=", token}}, "c1", "run-1"))
	if call.status != http.StatusOK || call.ReceiptID == "" || !strings.Contains(string(call.body), token) {
		t.Fatalf("Exec: %s", call.response)
	}
	read := func(t *testing.T, key, session, id string) *toolCallResult {
		t.Helper()
		res := g.call(t, key, map[string]any{"tool": "read_tool_result", "input": map[string]any{"receipt_id": id}, "session_id": session, "call_id": "read"})
		if res.status != http.StatusOK || res.ReceiptID == "" {
			t.Fatalf("read_tool_result: %s", res.response)
		}
		return res
	}
	own := read(t, d.keys[agentFull], "run-1", call.ReceiptID)
	var data struct {
		ReceiptID string `json:"receipt_id"`
		Tool      string `json:"tool"`
		Output    struct {
			Success bool `json:"success"`
			Data    struct {
				Stdout   string `json:"stdout"`
				ExitCode int    `json:"exit_code"`
			} `json:"data"`
		} `json:"output"`
	}
	if err := json.Unmarshal(own.Output.Data, &data); err != nil || !own.Output.Success {
		t.Fatalf("own result: %v %s", err, own.response)
	}
	if data.ReceiptID != call.ReceiptID || data.Tool != "Exec" || !data.Output.Success || !strings.Contains(data.Output.Data.Stdout, "deploy token=[REDACTED]") {
		t.Errorf("own result read back: %+v", data)
	}
	if strings.Contains(string(own.body), token) {
		t.Errorf("the secret the tool printed came back through read_tool_result")
	}

	// Not the caller's: the same answer as for a receipt that never was.
	never := read(t, d.keys[agentFull], "run-1", "01a20313-28e8-7b79-9035-d239511fbe58")
	if never.errCode() != "not_found" {
		t.Fatalf("unknown receipt: %s", never.response)
	}
	want := strings.ReplaceAll(never.Output.Error.Message, "01a20313-28e8-7b79-9035-d239511fbe58", "<id>")
	for _, c := range []struct{ name, key, session string }{
		{"another principal", d.keys[agentNarrow], "run-1"},
		{"another session", d.keys[agentFull], "run-2"},
	} {
		res := read(t, c.key, c.session, call.ReceiptID)
		if res.errCode() != "not_found" || res.Output.Success || strings.Contains(string(res.body), "deploy token") {
			t.Errorf("%s: %s", c.name, res.response)
		} else if got := strings.ReplaceAll(res.Output.Error.Message, call.ReceiptID, "<id>"); got != want {
			t.Errorf("%s: not_found worded %q, for an unknown receipt %q: it tells them apart", c.name, got, want)
		}
	}
	// A principal without the grant is refused by the policy.
	if res := g.call(t, d.keys[agentNoExec], map[string]any{"tool": "read_tool_result", "input": map[string]any{"receipt_id": call.ReceiptID}, "session_id": "run-1"}); res.status != http.StatusForbidden {
		t.Errorf("read_tool_result without a grant: %s", res.response)
	}

	big := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": []string{"/usr/bin/printf", "%04000d", "7"}}, "c2", "run-1"))
	if big.status != http.StatusOK {
		t.Fatalf("Exec big: %s", big.response)
	}
	if res := read(t, d.keys[agentFull], "run-1", big.ReceiptID); res.errCode() != "read_limit" {
		t.Errorf("an output over results_max_bytes: %s, want read_limit", res.response)
	}

	dir := filepath.Join(d.dataDir, "results")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("results dir: %v %v, want 0700", fi, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) == 0 {
		t.Fatal("no result files")
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, _ := os.Stat(p)
		b, _ := os.ReadFile(p)
		if fi.Mode().Perm() != 0o600 || bytes.Contains(b, []byte(token)) || bytes.Contains(b, []byte("0000000000000000000007")) {
			t.Errorf("result file %s: mode %v, holds the secret or the oversized output", e.Name(), fi.Mode())
		}
	}

	time.Sleep(time.Until(start.Add(retention + time.Second)))
	if res := read(t, d.keys[agentFull], "run-1", call.ReceiptID); res.errCode() != "not_found" {
		t.Errorf("after results_retention: %s, want not_found", res.response)
	}
	// The reads are governed calls with receipts like any other.
	rc, ok := g.getReceipt(t, own.ReceiptID)
	if !ok || rc.Tool != "read_tool_result" || rc.Decision != "allow" || rc.status() != "succeeded" {
		t.Errorf("receipt of the read: %+v", rc)
	}
}
