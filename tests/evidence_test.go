package tests

import (
	"context"
	"crypto/rand"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/note"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// withCheckpoints gives a deployment a signing key file written by the
// test (as an operator would) and a 1 s checkpoint interval, and returns
// the verifier key the auditor pins.
func withCheckpoints(t *testing.T, d *deployment) string {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "e2e.portcullis/"+d.instanceID)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(d.dir, "evidence-signing.key")
	if err := os.WriteFile(keyPath, []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(d.configPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "evidence:\n  signing_key: %q\n  checkpoint_interval: 1s\n", keyPath)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return vkey
}

// runCLI runs the gateway binary with args and returns its output and
// whether it exited 0.
func runCLI(t *testing.T, d *deployment, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gatewayBin, args...)
	cmd.Dir, cmd.Env = d.dir, d.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("gateway %v: %v", args, err)
		}
	}
	return string(out), err == nil
}

// TestEvidenceIntegrity runs the auditor's story against the real binary
// on each store: calls are checkpointed, a receipt's proof verifies offline
// with the pinned key, stats and filtered exports answer, `evidence verify`
// passes, and (PostgreSQL) a row altered by the database owner is named.
func TestEvidenceIntegrity(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, d *deployment) {
		vkey := withCheckpoints(t, d)
		g := d.start(t)
		aud := d.keys[auditor]

		ok := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": []string{"/usr/bin/echo", "proof"}}, "call-ok", "s-evidence"))
		if ok.status != 200 || ok.ReceiptID == "" {
			t.Fatalf("allowed call: %s", ok.response)
		}
		denied := g.call(t, d.keys[agentNoExec], execCall(map[string]any{"argv": []string{"/usr/bin/echo", "no"}}, "call-no", "s-evidence"))
		if denied.ReceiptID == "" || denied.errCode() == "" {
			t.Fatalf("denied call: %s", denied.response)
		}
		deniedRc, found := g.getReceipt(t, denied.ReceiptID)
		if !found {
			t.Fatalf("no receipt %s", denied.ReceiptID)
		}
		g.waitReceipt(t, ok.ReceiptID, 10*time.Second, func(r receipt) bool { return r.status() == "succeeded" })
		if deniedRc.Outcome == nil || deniedRc.Outcome.ErrorCode == nil {
			t.Fatalf("denied receipt has no error code: %+v", deniedRc)
		}

		// The proof arrives once the checkpointer (1 s) has covered both events.
		var p wire.ReceiptProof
		deadline := time.Now().Add(20 * time.Second)
		for {
			r := g.do(t, "GET", "/v1/receipts/"+ok.ReceiptID+"/proof", aud, nil)
			if r.status == 200 {
				if err := json.Unmarshal(r.body, &p); err != nil {
					t.Fatal(err)
				}
				break
			}
			if code, _ := apiError(t, r); r.status != 412 || code != "precondition_failed" {
				t.Fatalf("proof: %s", r)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no checkpoint covered receipt %s within 20 s", ok.ReceiptID)
			}
			time.Sleep(250 * time.Millisecond)
		}
		if p.Outcome == nil || p.VerifierKey != vkey {
			t.Fatalf("proof = %+v", p)
		}
		for _, ip := range []evidence.InclusionProof{p.Decision, *p.Outcome} {
			if err := evidence.VerifyInclusion(ip, vkey); err != nil {
				t.Errorf("offline VerifyInclusion(%s) with the pinned key: %v", ip.EventID, err)
			}
		}
		var full struct {
			Chain *wire.ReceiptChain `json:"chain"`
		}
		if err := json.Unmarshal(g.do(t, "GET", "/v1/receipts/"+ok.ReceiptID, aud, nil).body, &full); err != nil || full.Chain == nil || full.Chain.Hash != p.Decision.EventHash {
			t.Errorf("receipt chain %+v does not name the proven event hash %s (%v)", full.Chain, p.Decision.EventHash, err)
		}
		if r := g.do(t, "GET", "/v1/receipts/"+ok.ReceiptID+"/proof", d.keys[agentFull], nil); r.status != 403 {
			t.Errorf("proof as agent: %s", r)
		}

		// Stats from the rollup: both decisions, once checkpointed.
		var stats wire.EvidenceStats
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(250 * time.Millisecond) {
			r := g.do(t, "GET", "/v1/evidence/stats?interval=day", aud, nil)
			if r.status != 200 {
				t.Fatalf("stats: %s", r)
			}
			if err := json.Unmarshal(r.body, &stats); err != nil {
				t.Fatal(err)
			}
			var allow, deny int64
			for _, b := range stats.Buckets {
				allow += b.ByDecision["allow"]
				deny += b.ByDecision["deny"]
			}
			if allow >= 1 && deny >= 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("stats never counted both decisions: %+v", stats)
			}
		}

		// Exports with the outcome filters, over the API and the CLI.
		q := url.Values{"format": {"csv"}, "outcome": {"error"}, "error_code": {*deniedRc.Outcome.ErrorCode}}
		r := g.do(t, "GET", "/v1/receipts/export?"+q.Encode(), aud, nil)
		rows, err := csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
		if r.status != 200 || err != nil || len(rows) != 2 || rows[1][0] != denied.ReceiptID {
			t.Errorf("export csv outcome=error: %s rows %q %v", r, rows, err)
		}
		r = g.do(t, "GET", "/v1/receipts/export?format=jsonl&outcome=succeeded", aud, nil)
		if lines := strings.Split(strings.TrimSpace(string(r.body)), "\n"); r.status != 200 || len(lines) != 1 || !strings.Contains(lines[0], ok.ReceiptID) {
			t.Errorf("export jsonl outcome=succeeded: %s", r)
		}
		out, passed := runCLI(t, d, "evidence", "export", "--config", d.configPath, "--format", "csv", "--outcome", "error")
		if !passed || !strings.Contains(out, denied.ReceiptID) || strings.Contains(out, ok.ReceiptID) {
			t.Errorf("evidence export --outcome error:\n%s", out)
		}
		out, passed = runCLI(t, d, "evidence", "export", "--config", d.configPath, "--outcome", "succeeded", "--since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		if !passed || strings.Count(out, "\n") != 1 || !strings.Contains(out, ok.ReceiptID) {
			t.Errorf("evidence export --outcome succeeded:\n%s", out)
		}

		if err := g.stop(10 * time.Second); err != nil {
			t.Logf("stop: %v", err)
		}
		if out, passed := runCLI(t, d, "evidence", "verify", "--config", d.configPath, "--key", vkey); !passed || !strings.Contains(out, "OK") {
			t.Fatalf("evidence verify on an untouched store failed:\n%s", out)
		}
		if d.store != storePostgres {
			return
		}
		// The table owner bypasses the append-only triggers and rewrites
		// a checkpointed row; verify must name it.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, d.dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			t.Fatal(err)
		}
		if tag, err := tx.Exec(ctx, "UPDATE evidence_events SET tool = 'Forged' WHERE id = $1", ok.ReceiptID); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("tamper: %v %v", tag, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		out, passed = runCLI(t, d, "evidence", "verify", "--config", d.configPath, "--key", vkey)
		if passed || !strings.Contains(out, "altered_event") {
			t.Errorf("evidence verify after tampering: exit ok=%v, want non-zero naming altered_event:\n%s", passed, out)
		}
	})
}
