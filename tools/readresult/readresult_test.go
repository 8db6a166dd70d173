package readresult_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence/results"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/readresult"
	"github.com/portcullis/portcullis/wire"
)

func newTool(t *testing.T, maxBytes int64) (*readresult.Tool, *results.Store) {
	t.Helper()
	s := results.New(results.Options{Dir: filepath.Join(t.TempDir(), "results"), Retention: time.Hour, MaxBytes: maxBytes})
	return readresult.New(s), s
}

func run(t *testing.T, tool *readresult.Tool, input string, caller *tools.Caller) tools.Result {
	t.Helper()
	c, err := tool.Prepare(context.Background(), json.RawMessage(input))
	if err != nil {
		t.Fatalf("Prepare(%s): %v", input, err)
	}
	sc, err := c.Enforce(context.Background(), wire.Decision{Allow: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if caller != nil {
		ctx = tools.WithCaller(ctx, *caller)
	}
	return c.Run(ctx, sc)
}

func TestPrepareRefuses(t *testing.T) {
	t.Parallel()
	tool, _ := newTool(t, 4096)
	for _, in := range []string{
		`{}`,
		`{"receipt_id": 5}`,
		`{"receipt_id": "not-a-uuid"}`,
		`{"receipt_id": "../../etc/passwd"}`,
		`{"receipt_id": "00000000-0000-0000-0000-000000000000"}`,
		`{"receipt_id": "{01a20313-28e8-7b79-9035-d239511fbe58}"}`,
		`{"receipt_id": "01a2031328e87b799035d239511fbe58"}`,
		`{"receipt_id": "01a20313-28e8-7b79-9035-d239511fbe58", "session_id": "other"}`,
		`{"receipt_id": "01a20313-28e8-7b79-9035-d239511fbe58", "receipt_id": "01a20313-28e8-7b79-9035-d239511fbe59"}`,
	} {
		_, err := tool.Prepare(context.Background(), json.RawMessage(in))
		var we *wire.Error
		if err == nil || !asWire(err, &we) || we.Code != wire.CodeInvalidInput {
			t.Errorf("Prepare(%s) = %v, want invalid_input", in, err)
		}
	}
}

func asWire(err error, we **wire.Error) bool {
	e, ok := err.(*wire.Error)
	*we = e
	return ok
}

// TestOwnSessionOnly: the caller reads its own result; another principal,
// another session or a receipt never kept gets the same not_found (the
// message names only the id the caller sent), and no caller or no
// session is refused.
func TestOwnSessionOnly(t *testing.T) {
	t.Parallel()
	tool, s := newTool(t, 4096)
	id := uuid.Must(uuid.NewV7())
	if err := s.Save(results.Record{ReceiptID: id, PrincipalID: "agent-a", SessionID: "run-1", Tool: "Exec", Time: time.Now(),
		Output: wire.ToolOutput{Success: true, Data: map[string]any{"stdout": "the answer"}}}); err != nil {
		t.Fatal(err)
	}
	in := `{"receipt_id": "` + id.String() + `"}`
	res := run(t, tool, in, &tools.Caller{PrincipalID: "agent-a", SessionID: "run-1"})
	if !res.Output.Success || res.Status != wire.StatusSucceeded || len(res.OutputSHA256) != 64 {
		t.Fatalf("own result: %+v", res.Output)
	}
	b, _ := json.Marshal(res.Output.Data)
	if !strings.Contains(string(b), "the answer") || !strings.Contains(string(b), `"tool":"Exec"`) {
		t.Errorf("data = %s", b)
	}
	unknown := uuid.Must(uuid.NewV7())
	var msgs []string
	for _, c := range []struct {
		caller tools.Caller
		id     uuid.UUID
	}{
		{tools.Caller{PrincipalID: "agent-b", SessionID: "run-1"}, id},
		{tools.Caller{PrincipalID: "agent-a", SessionID: "run-2"}, id},
		{tools.Caller{PrincipalID: "agent-a", SessionID: "run-1"}, unknown},
	} {
		res := run(t, tool, `{"receipt_id": "`+c.id.String()+`"}`, &c.caller)
		if res.Output.Success || res.Output.Error == nil || res.Output.Error.Code != wire.CodeNotFound || res.Output.Data != nil {
			t.Fatalf("read as %+v: %+v, want not_found", c.caller, res.Output)
		}
		msgs = append(msgs, strings.ReplaceAll(res.Output.Error.Message, c.id.String(), "<id>"))
	}
	if msgs[0] != msgs[1] || msgs[1] != msgs[2] {
		t.Errorf("not_found answers differ, telling a foreign result from none:\n%q", msgs)
	}
	if res := run(t, tool, in, &tools.Caller{PrincipalID: "agent-a"}); res.Output.Error == nil || res.Output.Error.Code != wire.CodeInvalidInput {
		t.Errorf("read without a session: %+v", res.Output)
	}
	if res := run(t, tool, in, nil); res.Output.Error == nil || res.Output.Error.Code != wire.CodeInternal {
		t.Errorf("read without a caller: %+v", res.Output)
	}
}

// TestTooLarge: a result over the bound answers read_limit with its size.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	tool, s := newTool(t, 1024)
	id := uuid.Must(uuid.NewV7())
	if err := s.Save(results.Record{ReceiptID: id, PrincipalID: "p", SessionID: "s", Tool: "Exec", Time: time.Now(),
		Output: wire.ToolOutput{Success: true, Data: strings.Repeat("z", 5000)}}); err != nil {
		t.Fatal(err)
	}
	res := run(t, tool, `{"receipt_id": "`+id.String()+`"}`, &tools.Caller{PrincipalID: "p", SessionID: "s"})
	if res.Output.Error == nil || res.Output.Error.Code != wire.CodeReadLimit || !strings.Contains(res.Output.Error.Message, "1024") {
		t.Fatalf("oversized result: %+v", res.Output)
	}
}
