package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
)

// slowTouchCall is an Exec that appends "started" to file, sleeps, then
// appends "ran": a call still running when its gateway dies.
func slowTouchCall(file string) map[string]any {
	return map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/sh", "-c",
		"echo started >> " + file + "; sleep 20; echo ran >> " + file}}}
}

func startedCount(t *testing.T, file string) int {
	t.Helper()
	return lineCount(t, file, "started")
}

// awaitStarted waits until the slow call of file has started.
func awaitStarted(t *testing.T, file string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); startedCount(t, file) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the approved call never started")
		}
	}
}

// approveAndKill parks a slow call on g, approves it there (the approving
// gateway runs it), waits until it runs, calls before (with the receipt id)
// and SIGKILLs g mid-run. It returns the approval id and the receipt id.
func approveAndKill(t *testing.T, d *deployment, g *gateway, file string, before func(receipt string)) (string, string) {
	t.Helper()
	res, a := park(t, g, d.keys[agentFull], slowTouchCall(file))
	go func() {
		// Answered only if the call ends; the gateway dies first.
		_, _ = g.tryDo(context.Background(), http.MethodPost, "/v1/approvals/"+a.Approval.ID, "Bearer "+d.keys[approver1],
			map[string]string{"decision": "approve", "reason": "runs, then its gateway dies"})
	}()
	awaitStarted(t, file)
	if before != nil {
		before(res.ReceiptID)
	}
	g.kill()
	return a.Approval.ID, res.ReceiptID
}

// awaitInterrupted waits (through g's long poll) for the approved call of
// receipt to get its final answer: the recovery's, 500 internal, its
// receipt's outcome interrupted and an "interrupted" approval event
// chained on it, the call not run again.
func awaitInterrupted(t *testing.T, d *deployment, g *gateway, receipt, file string) {
	t.Helper()
	var r response
	for deadline := time.Now().Add(90 * time.Second); ; {
		r = g.do(t, http.MethodGet, "/v1/tool-calls/"+receipt+"?wait=20s", d.keys[agentFull], nil)
		if r.status != http.StatusAccepted || time.Now().After(deadline) {
			break
		}
	}
	var out struct {
		Output struct {
			Success bool `json:"success"`
			Error   *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"output"`
		Approval struct {
			Status string `json:"status"`
		} `json:"approval"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil || r.status != http.StatusInternalServerError || out.Output.Success ||
		out.Output.Error == nil || out.Output.Error.Code != "internal" || !strings.Contains(out.Output.Error.Message, "not run again") ||
		out.Approval.Status != "approved" {
		t.Fatalf("the answer of an approved call whose runner died: %v %s", err, r)
	}
	rc, ok := g.getReceipt(t, receipt)
	if !ok || rc.Outcome == nil || rc.Outcome.Status != "interrupted" {
		t.Fatalf("receipt of the interrupted run: %s", rc.raw)
	}
	var actions []string
	st, ok := mpOpenStore(t, d).(interface {
		EventsOfReceipt(context.Context, uuid.UUID) ([]evidence.Event, error)
	})
	if !ok {
		t.Fatal("the store does not list a receipt's events")
	}
	evs, err := st.EventsOfReceipt(context.Background(), uuid.MustParse(receipt))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == evidence.KindApproval {
			var b evidence.ApprovalBody
			if err := json.Unmarshal(e.Body, &b); err != nil {
				t.Fatal(err)
			}
			actions = append(actions, b.Action)
		}
	}
	if !slices.Contains(actions, evidence.ApprovalActionApproved) || !slices.Contains(actions, evidence.ApprovalActionInterrupted) {
		t.Fatalf("approval events %v: want approved, then interrupted", actions)
	}
	if n := startedCount(t, file); n != 1 {
		t.Fatalf("the approved call started %d times; the recovery must never run it again", n)
	}
}

// TestApprovalRunnerDiesReplica: on PostgreSQL, the replica running an
// approved call dies mid-run. While it ran, the other replica left the call
// alone (its run claim was held); once the runner is gone, the other
// replica ends the call interrupted, with evidence, and never runs it.
func TestApprovalRunnerDiesReplica(t *testing.T) {
	t.Parallel()
	d1, g1, g2 := approvalReplicas(t)
	file := filepath.Join(d1.scratch, "slow-run")
	_, receipt := approveAndKill(t, d1, g1, file, func(receipt string) {
		// Longer than two recovery looks of g2: a live runner's claim is
		// held, so the running call is left alone.
		time.Sleep(11 * time.Second)
		r := g2.do(t, http.MethodGet, "/v1/tool-calls/"+receipt+"?wait=0s", d1.keys[agentFull], nil)
		if r.status != http.StatusAccepted || !strings.Contains(string(r.body), `"status":"approved"`) {
			t.Fatalf("while its runner lives, the approved call must stay running: %s", r)
		}
	})
	awaitInterrupted(t, d1, g2, receipt, file)
}

// TestApprovalRunnerDiesRestart: on the embedded store, the gateway dies
// while running an approved call; after its restart the call is ended
// interrupted, with evidence, and never run again.
func TestApprovalRunnerDiesRestart(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	requireApproval(t, d, 300, agentFull)
	g := d.start(t)
	file := filepath.Join(d.scratch, "slow-run")
	_, receipt := approveAndKill(t, d, g, file, nil)
	g = d.start(t)
	awaitInterrupted(t, d, g, receipt, file)
}

// TestApprovalRunnerLosesClaimConnection: on PostgreSQL, the connection
// that holds a running approved call's run claim dies while its gateway
// lives (a terminated backend, a proxy's idle timeout). The runner takes
// its claim back, the other replica does not end the call interrupted,
// and the call ends with its own outcome, recorded once.
func TestApprovalRunnerLosesClaimConnection(t *testing.T) {
	t.Parallel()
	d1, g1, _ := approvalReplicas(t) // the second one's recovery looks run every 5 s while the call runs
	file := filepath.Join(d1.scratch, "slow-run")
	res, a := park(t, g1, d1.keys[agentFull], slowTouchCall(file))
	answered := make(chan response, 1)
	go func() {
		r, err := g1.tryDo(context.Background(), http.MethodPost, "/v1/approvals/"+a.Approval.ID, "Bearer "+d1.keys[approver1],
			map[string]string{"decision": "approve", "reason": "runs while its claim's connection dies"})
		if err != nil {
			r = response{status: -1, body: []byte(err.Error())}
		}
		answered <- r
	}()
	awaitStarted(t, file)
	const claimLocks = `FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
	if n := pgQueryInt(t, d1.dbURL, "SELECT count(pg_terminate_backend(pid)) "+claimLocks); n != 1 {
		t.Fatalf("terminated %d run claim sessions, want the runner's one", n)
	}
	var r response
	select {
	case r = <-answered:
	case <-time.After(90 * time.Second): // a bound, not an assertion
		t.Fatal("the approved call never answered")
	}
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"success":true`) {
		t.Fatalf("the approved call's own answer: %s", r)
	}
	rc, ok := g1.getReceipt(t, res.ReceiptID)
	if !ok || rc.Outcome == nil || rc.Outcome.Status != "succeeded" {
		t.Fatalf("receipt of the run whose claim connection died: %s", rc.raw)
	}
	st, ok := mpOpenStore(t, d1).(interface {
		EventsOfReceipt(context.Context, uuid.UUID) ([]evidence.Event, error)
	})
	if !ok {
		t.Fatal("the store does not list a receipt's events")
	}
	evs, err := st.EventsOfReceipt(context.Background(), uuid.MustParse(res.ReceiptID))
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, e := range evs {
		if e.Kind == evidence.KindOutcome && e.Outcome != nil {
			outcomes = append(outcomes, e.Outcome.Status)
		}
		if e.Kind == evidence.KindApproval && strings.Contains(string(e.Body), `"`+evidence.ApprovalActionInterrupted+`"`) {
			t.Errorf("the other replica ended the live run interrupted: %s", e.Body)
		}
	}
	if slices.Contains(outcomes, "interrupted") || !slices.Contains(outcomes, "succeeded") {
		t.Errorf("outcome events on the receipt %v: want the run's succeeded, no interrupted", outcomes)
	}
	if n := lineCount(t, file, "ran"); n != 1 {
		t.Errorf("the call ran to its end %d times, want 1", n)
	}
}
