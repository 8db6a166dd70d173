package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis/portcullis/sdk"
	"github.com/portcullis/portcullis/wire"
)

func TestAgainstGateway(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	ctx := context.Background()
	agent := sdk.New(g.url, g.keys["agent"])
	auditor := sdk.New(g.url, g.keys["auditor"])

	t.Run("exec success", func(t *testing.T) {
		res, err := agent.Exec(ctx, sdk.ExecInput{Argv: []string{"/bin/echo", "hello"}}, sdk.WithCallID("call-1"), sdk.WithSessionID("run-1"))
		if err != nil {
			t.Fatal(err)
		}
		if res.Data.ExitCode != 0 || res.Data.Stdout != "hello\n" || !res.Response.Output.Success || res.ReceiptID() == "" {
			t.Fatalf("exec: %+v %+v", res.Data, res.Response)
		}
		if res.Response.CallID != "call-1" || !res.Response.Decision.Allow {
			t.Errorf("call_id %q decision %+v", res.Response.CallID, res.Response.Decision)
		}
		r, err := auditor.Receipt(ctx, res.ReceiptID())
		if err != nil {
			t.Fatal(err)
		}
		if r.PrincipalID != "agent" || r.SessionID != "run-1" || r.CallID != "call-1" || r.Decision != wire.DecisionAllow {
			t.Errorf("receipt %+v", r)
		}
		list, err := auditor.Receipts(ctx, sdk.ReceiptFilter{SessionID: "run-1", Limit: 10})
		if err != nil || len(list.Receipts) != 1 || list.Receipts[0].ID != res.ReceiptID() {
			t.Errorf("receipts by session: %+v %v", list, err)
		}
	})

	t.Run("non-zero exit is a result, not an error", func(t *testing.T) {
		res, err := agent.Exec(ctx, sdk.ExecInput{Argv: []string{"/bin/false"}})
		if err != nil || res.Data.ExitCode == 0 || res.Response.Output.Success {
			t.Fatalf("exec false: %+v %v", res, err)
		}
	})

	t.Run("denial", func(t *testing.T) {
		noexec := sdk.New(g.url, g.keys["agent-noexec"])
		res, err := noexec.Exec(ctx, sdk.ExecInput{Argv: []string{"/bin/echo", "no"}})
		var e *sdk.Error
		if !errors.As(err, &e) || e.Code != wire.CodePermissionDenied || e.Status != http.StatusForbidden || e.ReceiptID == "" {
			t.Fatalf("denied exec: err %v (%#v)", err, e)
		}
		if !sdk.IsCode(err, wire.CodePermissionDenied) || res == nil || res.Response.Decision.Allow {
			t.Errorf("IsCode / response: %+v", res)
		}
		tools, err := noexec.Tools(ctx)
		if err != nil || len(tools) != 0 {
			t.Errorf("noexec sees tools %v (%v)", tools, err)
		}
		// Receipts are for auditors only.
		if _, err := agent.Receipts(ctx, sdk.ReceiptFilter{}); !sdk.IsCode(err, wire.CodeForbidden) {
			t.Errorf("agent listing receipts: %v, want forbidden", err)
		}
	})

	t.Run("invalid input", func(t *testing.T) {
		_, err := agent.Exec(ctx, sdk.ExecInput{Argv: []string{"echo", "relative"}})
		var e *sdk.Error
		if !errors.As(err, &e) || e.Code != wire.CodeInvalidInput || e.Status != http.StatusBadRequest || e.Details["field"] == nil {
			t.Fatalf("relative argv0: %v (%#v)", err, e)
		}
		if _, err := agent.Call(ctx, "NoSuchTool", map[string]any{}); !sdk.IsCode(err, wire.CodeUnknownTool) {
			t.Errorf("unknown tool: %v", err)
		}
		if _, err := sdk.New(g.url, "wrong-key").Tools(ctx); !sdk.IsCode(err, wire.CodeUnauthenticated) {
			t.Errorf("wrong key: %v", err)
		}
	})

	t.Run("exec timeout", func(t *testing.T) {
		start := time.Now()
		res, err := agent.Exec(ctx, sdk.ExecInput{Argv: []string{"/bin/sleep", "30"}, TimeoutS: 1})
		if !sdk.IsCode(err, wire.CodeTimeout) || res == nil || res.Data == nil || !res.Data.TimedOut {
			t.Fatalf("timeout: %v %+v", err, res)
		}
		if d := time.Since(start); d > 6*time.Second {
			t.Errorf("timed-out exec took %s", d)
		}
		// The client's own per-attempt timeout bounds a call too.
		short := sdk.New(g.url, g.keys["agent"], sdk.WithTimeout(300*time.Millisecond))
		_, err = short.Exec(ctx, sdk.ExecInput{Argv: []string{"/bin/sleep", "5"}, TimeoutS: 5})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("client timeout: %v, want context.DeadlineExceeded", err)
		}
	})

	t.Run("fs helpers", func(t *testing.T) {
		p := filepath.Join(g.scratch, "note.txt")
		w, err := agent.FSWrite(ctx, sdk.FSWriteInput{Path: p, Content: "one\ntwo\n"})
		if err != nil || w.Data.BytesWritten != 8 {
			t.Fatalf("fs.write: %+v %v", w, err)
		}
		r, err := agent.FSRead(ctx, sdk.FSReadInput{Path: p, StartLine: 2, EndLine: 2})
		if err != nil || r.Data.Content == nil || *r.Data.Content != "two\n" || r.Data.SHA256 != w.Data.SHA256After {
			t.Fatalf("fs.read: %+v %v", r.Data, err)
		}
		stale := strings.Repeat("0", 64)
		if _, err := agent.FSWrite(ctx, sdk.FSWriteInput{Path: p, Content: "x", IfMatchSHA256: &stale}); !sdk.IsCode(err, wire.CodePreconditionFailed) {
			t.Errorf("stale ifMatchSha256: %v", err)
		}
		if _, err := agent.FSRead(ctx, sdk.FSReadInput{Path: "/etc/passwd"}); err == nil {
			t.Error("fs.read outside the grants succeeded")
		}
		l, err := agent.FSList(ctx, sdk.FSListInput{Path: g.scratch})
		if err != nil || len(l.Data.Entries) != 1 || l.Data.Entries[0].Name != "note.txt" {
			t.Errorf("fs.list: %+v %v", l, err)
		}
		s, err := agent.FSSearch(ctx, sdk.FSSearchInput{Path: g.scratch, Pattern: "two"})
		if err != nil || len(s.Data.Matches) != 1 || s.Data.Matches[0].Line != 2 {
			t.Errorf("fs.search: %+v %v", s, err)
		}
	})

	t.Run("tools, decide and the OpenAI tool message", func(t *testing.T) {
		tools, err := agent.Tools(ctx)
		if err != nil || len(tools) != 5 || tools[0].Type != "function" || len(tools[0].Function.Parameters) == 0 {
			t.Fatalf("tools: %+v %v", tools, err)
		}
		d, err := agent.Decide(ctx, "Exec", sdk.ExecInput{Argv: []string{"/bin/echo"}})
		if err != nil || !d.Decision.Allow || d.Scope == nil {
			t.Fatalf("decide: %+v %v", d, err)
		}
		msg, err := agent.HandleToolCall(ctx, "call_xyz", "Exec", `{"argv":["/bin/echo","from model"]}`)
		if err != nil || msg["role"] != "tool" || msg["tool_call_id"] != "call_xyz" {
			t.Fatalf("tool message: %v %v", msg, err)
		}
		var out wire.ToolOutput
		if err := json.Unmarshal([]byte(msg["content"].(string)), &out); err != nil || !out.Success || out.Metadata["receipt_id"] == nil {
			t.Errorf("tool message content: %v %+v", err, out)
		}
		msg, _ = sdk.New(g.url, g.keys["agent-noexec"]).HandleToolCall(ctx, "call_2", "Exec", `{"argv":["/bin/echo"]}`)
		if !strings.Contains(msg["content"].(string), `"permission_denied"`) {
			t.Errorf("denial as tool message: %v", msg)
		}
		msg, _ = agent.HandleToolCall(ctx, "call_3", "Exec", `{"argv": [`)
		if !strings.Contains(msg["content"].(string), `"invalid_input"`) {
			t.Errorf("broken arguments as tool message: %v", msg)
		}
	})

	t.Run("traceparent reaches the receipt", func(t *testing.T) {
		tid, _ := trace.TraceIDFromHex(strings.Repeat("ab", 15) + "01")
		sid, _ := trace.SpanIDFromHex("0102030405060708")
		tctx := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
		}))
		res, err := agent.Exec(tctx, sdk.ExecInput{Argv: []string{"/bin/echo", "traced"}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := auditor.Receipt(ctx, res.ReceiptID())
		if err != nil || r.TraceID != tid.String() {
			t.Fatalf("receipt trace_id %q, want %s (%v)", r.TraceID, tid, err)
		}
	})
}

// flaky answers the scripted statuses in order, then 200 with an Exec
// success, counting requests.
func flaky(t *testing.T, answers ...func(w http.ResponseWriter)) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		w.Header().Set("Content-Type", "application/json")
		if i < len(answers) {
			answers[i](w)
			return
		}
		_, _ = w.Write([]byte(`{"receipt_id":"r-ok","decision":{"allow":true,"reasons":[],"policy_revision":"x"},"output":{"success":true,"data":{"exit_code":0,"stdout":"ok"},"error":null,"metadata":{}}}`))
	}))
	t.Cleanup(ts.Close)
	return ts, &n
}

func refusal(status int, code wire.Code) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(wire.ToolCallResponse{Output: wire.ToolOutput{Error: wire.Errorf(code, "scripted"), Metadata: map[string]any{}}})
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fast := []sdk.Option{sdk.WithBackoff(time.Millisecond, 5*time.Millisecond), sdk.WithRetries(3)}
	cases := []struct {
		name      string
		answers   []func(http.ResponseWriter)
		wantCalls int32
		wantCode  wire.Code // "" = success
	}{
		{"503 evidence_unavailable then 200", []func(http.ResponseWriter){refusal(503, wire.CodeEvidenceUnavailable), refusal(503, wire.CodeEvidenceUnavailable)}, 3, ""},
		{"429 then 200", []func(http.ResponseWriter){refusal(429, "")}, 2, ""},
		{"503 backend_unavailable may have run: no retry", []func(http.ResponseWriter){refusal(503, wire.CodeBackendUnavailable)}, 1, wire.CodeBackendUnavailable},
		{"400 is final", []func(http.ResponseWriter){refusal(400, wire.CodeInvalidInput)}, 1, wire.CodeInvalidInput},
		{"403 is final", []func(http.ResponseWriter){refusal(403, wire.CodePermissionDenied)}, 1, wire.CodePermissionDenied},
		{"200 is final", nil, 1, ""},
		{"gives up after the retries", []func(http.ResponseWriter){
			refusal(503, wire.CodeEvidenceUnavailable), refusal(503, wire.CodeEvidenceUnavailable),
			refusal(503, wire.CodeEvidenceUnavailable), refusal(503, wire.CodeEvidenceUnavailable)}, 4, wire.CodeEvidenceUnavailable},
	}
	for _, tc := range cases {
		ts, n := flaky(t, tc.answers...)
		_, err := sdk.New(ts.URL, "k", fast...).Exec(ctx, sdk.ExecInput{Argv: []string{"/bin/true"}})
		if got := n.Load(); got != tc.wantCalls {
			t.Errorf("%s: %d requests, want %d", tc.name, got, tc.wantCalls)
		}
		if (tc.wantCode == "") != (err == nil) || (tc.wantCode != "" && !sdk.IsCode(err, tc.wantCode)) {
			t.Errorf("%s: err %v, want code %q", tc.name, err, tc.wantCode)
		}
	}
	// Reads are side-effect free: any 503 is retried.
	ts, n := flaky(t, func(w http.ResponseWriter) { w.WriteHeader(503); _, _ = w.Write([]byte(`upstream down`)) })
	if _, err := sdk.New(ts.URL, "k", fast...).Tools(ctx); err != nil || n.Load() != 2 {
		t.Errorf("read retry: %v after %d requests", err, n.Load())
	}
	// A retry waits no longer than the caller's context allows.
	ts, _ = flaky(t, refusal(503, wire.CodeEvidenceUnavailable), refusal(503, wire.CodeEvidenceUnavailable))
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := sdk.New(ts.URL, "k", sdk.WithBackoff(10*time.Second, 10*time.Second)).Exec(cctx, sdk.ExecInput{Argv: []string{"/bin/true"}})
	if !sdk.IsCode(err, wire.CodeEvidenceUnavailable) || time.Since(start) > 2*time.Second {
		t.Errorf("cancelled backoff: %v after %s", err, time.Since(start))
	}
	if _, err := sdk.New("not a url", "k").Tools(ctx); err == nil {
		t.Error("bad base URL accepted")
	}
}

func TestToolMessageNil(t *testing.T) {
	t.Parallel()
	m := sdk.ToolMessage("c", nil)
	if !strings.Contains(m["content"].(string), `"internal"`) {
		t.Errorf("nil response message: %v", m)
	}
}
