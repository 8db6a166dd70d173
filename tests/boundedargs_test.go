package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestRefusedInputBoundedInReceipt: a 5 MB refused or invalid input (issue
// #13: it became a 4.5 MB receipt) leaves a receipt of a few KB holding a
// redacted prefix, the input's size and its SHA-256, whatever made it big:
// many elements, a huge key (quoted in the refusal's reason), an unknown
// tool, a policy denial. A secret at the start of the input is redacted
// in the prefix.
func TestRefusedInputBoundedInReceipt(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	g := d.start(t)
	secret := "sk-ant-api03-" + randHex(t, 16)
	manyArgs := func(n, size int) string {
		var b strings.Builder
		b.WriteString(`{"argv":["/usr/bin/echo","--token","` + secret + `"`)
		el := strings.Repeat("a", size)
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, `,"%s%07d"`, el, i)
		}
		b.WriteString("]}")
		return b.String()
	}
	for _, c := range []struct {
		name, key, tool, input, decision, code string
	}{
		{"too many argv entries", agentFull, "Exec", manyArgs(500_000, 3), "invalid", "too_large"},
		{"a 5 MB key", agentFull, "Exec", `{"` + secret + strings.Repeat("k", 5<<20) + `":1}`, "invalid", "invalid_input"},
		{"unknown tool", agentFull, "no.such.tool", manyArgs(500_000, 3), "invalid", "unknown_tool"},
		{"denied by the policy", agentNoExec, "Exec", manyArgs(4000, 240), "deny", "permission_denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := `{"tool":"` + c.tool + `","input":` + c.input + `}`
			r := decodeToolCall(t, g.do(t, http.MethodPost, "/v1/tool-calls", g.dep.keys[c.key], body))
			if r.errCode() != c.code || r.ReceiptID == "" {
				t.Fatalf("%s: %.400s", c.name, r.response)
			}
			rc, ok := g.getReceipt(t, r.ReceiptID)
			if !ok {
				t.Fatalf("no receipt %s", r.ReceiptID)
			}
			sum := sha256.Sum256([]byte(c.input))
			want := hex.EncodeToString(sum[:])
			if len(rc.raw) > 12<<10 {
				t.Fatalf("receipt is %d bytes for a %d-byte input", len(rc.raw), len(c.input))
			}
			if rc.ArgsSHA256 != want {
				t.Errorf("args_sha256 %s, want the whole input's %s", rc.ArgsSHA256, want)
			}
			var args map[string]json.RawMessage
			if err := json.Unmarshal(rc.Args, &args); err != nil {
				t.Fatalf("args: %v: %.300s", err, rc.Args)
			}
			if raw, ok := args["[TRUNCATED]"]; ok {
				var m struct {
					ArgsBytes  int    `json:"args_bytes"`
					ArgsSHA256 string `json:"args_sha256"`
					Prefix     string `json:"prefix"`
				}
				if err := json.Unmarshal(raw, &m); err != nil || m.ArgsBytes != len(c.input) || m.ArgsSHA256 != want || m.Prefix == "" {
					t.Errorf("truncated args %.300s; want size %d and sha256 %s", rc.Args, len(c.input), want)
				}
			} else if len(rc.Args) > 1024 || !strings.Contains(string(rc.Args), "[TRUNCATED sha256=") {
				// Small only because redaction replaced the one huge
				// string (the key) by its size and digest.
				t.Errorf("args neither cut nor small: %.300s", rc.Args)
			}
			if rc.Decision != c.decision {
				t.Errorf("decision %s, want %s", rc.Decision, c.decision)
			}
			if strings.Contains(rc.raw, secret[len("sk-ant-api03-"):]) {
				t.Errorf("the secret reached the receipt: %.600s", rc.raw)
			}
			t.Logf("%d-byte input: %d-byte receipt", len(c.input), len(rc.raw))
		})
	}
}
