package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/wire"
)

// TestToolCallWaitsBounded: GET /v1/tool-calls/{id}?wait= holds a request
// open for up to five minutes, polling the store every poll interval. One
// agent opening such waits without bound would turn each of its requests
// into hundreds of store queries (and a goroutine and a connection) for
// everyone's store: past maxWaitsPerPrincipal concurrent waits, the next
// is refused 429 rate_limited at once; another principal's waits are not
// affected, and a wait=0 read always answers.
func TestToolCallWaitsBounded(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "evidence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key := func(k, id string) Key {
		return Key{SHA256: sha256.Sum256([]byte(k)), Principal: wire.Principal{ID: id, Roles: []string{wire.RoleAgent}}}
	}
	srv := New(Options{
		Keys:   []Key{key("waiter-1-key", "waiter-1"), key("waiter-2-key", "waiter-2")},
		Policy: fakePolicy{allow: true}, Controls: st, OpenAPI: OpenAPIDocument,
	})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)

	park := func(principal string) uuid.UUID {
		now := time.Now()
		pc := evidence.ParkedCall{ID: uuid.New(), ReceiptID: uuid.New(), Status: wire.ApprovalPending,
			Principal: wire.Principal{ID: principal, Roles: []string{wire.RoleAgent}}, Tool: "Exec",
			Input: json.RawMessage(`{}`), Args: json.RawMessage(`{}`), Reason: "test", Approvers: []string{"role:approver"},
			CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := st.ParkCall(context.Background(), pc); err != nil {
			t.Fatal(err)
		}
		return pc.ReceiptID
	}
	get := func(ctx context.Context, k string, id uuid.UUID, wait string) (int, *wire.Error, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/v1/tool-calls/"+id.String()+"?wait="+wait, nil)
		req.Header.Set("Authorization", "Bearer "+k)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var eb wire.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		return resp.StatusCode, eb.Error, nil
	}
	mine, theirs := park("waiter-1"), park("waiter-2")

	// Fill waiter-1's allowance with waits that only end when cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range maxWaitsPerPrincipal {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = get(ctx, "waiter-1-key", mine, "5m")
		}()
	}
	// Once the server holds them all open, the next wait is refused.
	open := func() int {
		srv.waits.mu.Lock()
		defer srv.waits.mu.Unlock()
		return srv.waits.byID["waiter-1"]
	}
	for deadline := time.Now().Add(20 * time.Second); open() < maxWaitsPerPrincipal && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	status, we, err := get(context.Background(), "waiter-1-key", mine, "2s")
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusTooManyRequests || we == nil || we.Code != wire.CodeRateLimited {
		t.Fatalf("wait %d of one principal: got %d %+v, want 429 rate_limited", maxWaitsPerPrincipal+1, status, we)
	}
	// A read without waiting, and another principal's wait, still answer.
	if status, we, err := get(context.Background(), "waiter-1-key", mine, "0s"); err != nil || status != http.StatusAccepted {
		t.Errorf("wait=0s read: %d %+v %v, want 202 pending", status, we, err)
	}
	if status, we, err := get(context.Background(), "waiter-2-key", theirs, "300ms"); err != nil || status != http.StatusAccepted {
		t.Errorf("another principal's wait: %d %+v %v, want 202 pending", status, we, err)
	}
	// The allowance comes back when the waits end.
	cancel()
	wg.Wait()
	for deadline := time.Now().Add(20 * time.Second); ; {
		status, we, err = get(context.Background(), "waiter-1-key", mine, "300ms")
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusTooManyRequests || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status != http.StatusAccepted {
		t.Errorf("after the waits ended: %d %+v, want 202 pending", status, we)
	}
}

// TestMCPApprovalWaitsBounded: an MCP tools/call whose call is parked
// waits for it (approvals.mcp_wait) through the same per-principal
// allowance as GET ?wait=: with the principal's waits all held, the call
// answers its pending approval at once (the client polls) instead of
// adding another poller.
func TestMCPApprovalWaitsBounded(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "evidence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := New(Options{Policy: fakePolicy{allow: true}, Controls: st, OpenAPI: OpenAPIDocument,
		Approvals: ApprovalOptions{MCPWait: time.Minute}})
	now := time.Now()
	pc := evidence.ParkedCall{ID: uuid.New(), ReceiptID: uuid.New(), Status: wire.ApprovalPending,
		Principal: wire.Principal{ID: "mcp-agent", Roles: []string{wire.RoleAgent}}, Tool: "Exec",
		Input: json.RawMessage(`{}`), Args: json.RawMessage(`{}`), Reason: "test", Approvers: []string{"role:approver"},
		CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := st.ParkCall(context.Background(), pc); err != nil {
		t.Fatal(err)
	}
	pending := wire.ToolCallResponse{ReceiptID: pc.ReceiptID.String(), Approval: &wire.ApprovalRef{ID: pc.ID.String(), Status: wire.ApprovalPending}}
	for _, full := range []bool{false, true} {
		if full {
			for range maxWaitsPerPrincipal {
				if !srv.waits.enter("mcp-agent") {
					t.Fatal("could not fill the allowance")
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		polled := 0
		status, _ := srv.AwaitApproval(ctx, "mcp-agent", http.StatusAccepted, pending, func(time.Duration, time.Duration) { polled++ })
		cancel()
		if status != http.StatusAccepted {
			t.Errorf("full=%v: status %d, want the pending 202", full, status)
		}
		if waited := polled > 0; waited == full {
			t.Errorf("full=%v: polled %d times; want a wait only with room in the allowance", full, polled)
		}
	}
}
