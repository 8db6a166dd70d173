package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// hopRego decides http.get by path: /denied* never, anything else on the
// loopback server's port; other tools never.
const hopRego = `package portcullis

default decision := {"allow": false, "reasons": ["hops e2e: no grant"]}

decision := {"allow": true, "reasons": ["hops e2e: allowed"], "network": {"posture": "allowlist", "allow": [sprintf("127.0.0.0/8:%d", [data.hops.port])]}} if {
	input.tool == "http.get"
	not startswith(input.resolved.path, "/denied")
}

decision := {"allow": false, "reasons": ["hops e2e: /denied is off limits"]} if {
	input.tool == "http.get"
	startswith(input.resolved.path, "/denied")
}
`

// TestRedirectHopsDecidedAndRecorded: every redirect hop of http.get is
// decided by the policy (not only the network posture) and recorded as a
// receipt of its own, child of the first call's. A chain whose second hop
// the policy denies is refused, that hop is never fetched, and both hops
// have receipts.
func TestRedirectHopsDecidedAndRecorded(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/to":
			http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
		default:
			fmt.Fprint(w, "reached "+r.URL.Path)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	d := newDeployment(t, storeSQLite)
	writeFile(t, filepath.Join(d.bundleDir, "e2e.rego"), []byte(hopRego))
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), map[string]any{"hops": map[string]any{"port": port}})
	g := d.start(t)
	get := func(u string) *toolCallResult {
		return g.call(t, g.dep.keys[agentFull], map[string]any{"tool": "http.get", "input": map[string]any{"url": u}})
	}
	parentOf := func(rc receipt) string {
		var p struct {
			Parent *string `json:"parent_receipt_id"`
		}
		_ = json.Unmarshal([]byte(rc.raw), &p)
		if p.Parent == nil {
			return ""
		}
		return *p.Parent
	}

	t.Run("second hop denied by the policy", func(t *testing.T) {
		r := get(base + "/to?u=" + url.QueryEscape(base+"/denied-secret"))
		if r.Output.Success || r.errCode() != "permission_denied" {
			t.Fatalf("%s", r.response)
		}
		mu.Lock()
		fetched := slices.Contains(seen, "/denied-secret")
		mu.Unlock()
		if fetched {
			t.Fatalf("the denied hop was fetched")
		}
		first := g.waitReceipt(t, r.ReceiptID, 5*time.Second, func(rc receipt) bool { return rc.status() == "failed" })
		if first.Decision != "allow" || first.Outcome.ErrorCode == nil || *first.Outcome.ErrorCode != "permission_denied" {
			t.Errorf("first hop's receipt: %s", first.raw)
		}
		hopID, _ := r.Output.Error.Details["hop_receipt_id"].(string)
		if hopID == "" {
			t.Fatalf("no hop receipt named: %s", r.response)
		}
		hop, ok := g.getReceipt(t, hopID)
		if !ok || hop.Decision != "deny" || hop.Tool != "http.get" || parentOf(hop) != r.ReceiptID {
			t.Fatalf("denied hop's receipt (parent %q, want %s): %s", parentOf(hop), r.ReceiptID, hop.raw)
		}
		var args struct {
			URL    string `json:"url"`
			Follow *bool  `json:"follow_redirects"`
		}
		_ = json.Unmarshal(hop.Args, &args)
		if args.URL != base+"/denied-secret" || args.Follow == nil || *args.Follow {
			t.Errorf("hop args %s", hop.Args)
		}
	})
	t.Run("allowed chain: each hop a child receipt", func(t *testing.T) {
		r := get(base + "/to?u=" + url.QueryEscape(base+"/to?u="+url.QueryEscape(base+"/ok")))
		if !r.Output.Success {
			t.Fatalf("%s", r.response)
		}
		var data struct {
			Body string `json:"body"`
			Hops []struct {
				URL       string `json:"url"`
				ReceiptID string `json:"receipt_id"`
				Status    int    `json:"status"`
			} `json:"hops"`
		}
		if err := json.Unmarshal(r.Output.Data, &data); err != nil || data.Body != "reached /ok" || len(data.Hops) != 2 {
			t.Fatalf("%v %s", err, r.Output.Data)
		}
		for _, h := range data.Hops {
			rc := g.waitReceipt(t, h.ReceiptID, 5*time.Second, func(rc receipt) bool { return rc.status() == "succeeded" })
			if rc.Decision != "allow" || parentOf(rc) != r.ReceiptID {
				t.Errorf("hop %s: %s", h.URL, rc.raw)
			}
		}
	})
}
