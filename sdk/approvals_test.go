package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/portcullis/portcullis/sdk"
	"github.com/portcullis/portcullis/wire"
)

// TestWaitForApproval: a parked call returns 202 approval_required with
// its approval; WaitForApproval gives up with ErrApprovalPending while
// nobody decides, and returns the run's answer once an approver approves.
func TestWaitForApproval(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	c := sdk.New(g.url, g.keys["agent-parked"])
	ctx := context.Background()
	resp, err := c.Call(ctx, "Exec", map[string]any{"argv": []string{"/usr/bin/echo", "approved"}})
	var se *sdk.Error
	if !errors.As(err, &se) || se.Code != wire.CodeApprovalRequired || resp == nil || resp.Approval == nil {
		t.Fatalf("Call = %+v, %v; want approval_required with an approval", resp, err)
	}
	if _, err := c.WaitForApproval(ctx, resp, 300*time.Millisecond); !errors.Is(err, sdk.ErrApprovalPending) {
		t.Fatalf("WaitForApproval with nobody deciding = %v, want ErrApprovalPending", err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		body, _ := json.Marshal(wire.ApprovalDecision{Decision: "approve", Reason: "sdk"})
		req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/approvals/"+resp.Approval.ID, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+g.keys["approver"])
		req.Header.Set("Content-Type", "application/json")
		if r, err := http.DefaultClient.Do(req); err == nil {
			r.Body.Close()
		}
	}()
	final, err := c.WaitForApproval(ctx, resp, 30*time.Second)
	if err != nil || final == nil || !final.Output.Success || final.ReceiptID != resp.ReceiptID {
		t.Fatalf("WaitForApproval = %+v, %v; want the run's successful answer under the parked receipt", final, err)
	}
	var data wire.ExecData
	b, _ := json.Marshal(final.Output.Data)
	if json.Unmarshal(b, &data) != nil || data.Stdout != "approved\n" {
		t.Errorf("the approved call printed %q", data.Stdout)
	}
}
