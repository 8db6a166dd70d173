// Package readresult is the built-in tool read_tool_result: an agent reads
// back the full output of one of its own earlier calls, by receipt id, from
// the results the gateway keeps (evidence/results). It is the recovery
// primitive for an output that was cut or dropped from the model's
// context (seed 003's read_tool_result). The policy decides it like any
// tool; the tool itself answers only the principal and session that made
// the call, and answers not_found otherwise, never revealing whether the
// receipt exists.
package readresult

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence/results"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/internal/inputschema"
	"github.com/portcullis/portcullis/tools/internal/strictjson"
	"github.com/portcullis/portcullis/wire"
)

// Name is the tool's wire name (already model-safe).
const Name = "read_tool_result"

// Backend names where the call ran, in receipts and metadata.
const Backend = "gateway"

// Store is what the tool needs of the result store.
type Store interface {
	Load(receiptID uuid.UUID, principal, session string) (results.Stored, error)
	Retention() time.Duration
	MaxBytes() int64
}

// Tool is read_tool_result.
type Tool struct{ store Store }

var _ tools.Tool = (*Tool)(nil)

// New returns the tool over a result store.
func New(s Store) *Tool { return &Tool{store: s} }

// Results returns the result store of the read_tool_result tool in ts,
// or nil: serve uses it to keep results for the tool to read.
func Results(ts []tools.Tool) *results.Store {
	for _, t := range ts {
		if rt, ok := t.(*Tool); ok {
			s, _ := rt.store.(*results.Store)
			return s
		}
	}
	return nil
}

func (t *Tool) Name() string { return Name }

// Annotations: it reads back a kept result.
func (t *Tool) Annotations() map[string]any { return tools.Hints(true, false, true, false) }

func (t *Tool) Description() string {
	return fmt.Sprintf("Read back the full result (ToolOutput) of one of your own earlier tool calls in this session, by the receipt_id its answer carried, "+
		"for output that was cut or dropped from your context. Only calls you made in the same session_id; results are kept %s, with secrets redacted, "+
		"up to %d bytes each. Anything else answers not_found.", t.store.Retention(), t.store.MaxBytes())
}

var schema = inputschema.MustCompile(Name, `{"type":"object","properties":{"receipt_id":{"type":"string","format":"uuid","description":"The receipt_id of the earlier call whose result to read."}},"required":["receipt_id"],"additionalProperties":false}`)

func (t *Tool) Parameters() json.RawMessage { return schema.JSON() }

// Prepare accepts exactly {"receipt_id": "<uuid>"}.
func (t *Tool) Prepare(_ context.Context, input json.RawMessage) (tools.Call, error) {
	obj, err := schema.Decode(input)
	if err != nil {
		return nil, err
	}
	v, ok := obj.Get("receipt_id")
	if !ok {
		return nil, strictjson.Invalid("receipt_id", "receipt_id is required: the receipt_id an earlier call's answer carried")
	}
	s, err := strictjson.String(v, "receipt_id", 64)
	if err != nil {
		return nil, err
	}
	id, err := uuid.Parse(s)
	if err != nil || id.String() != strings.ToLower(s) || id == uuid.Nil {
		return nil, strictjson.Invalid("receipt_id", "receipt_id must be a receipt id (a UUID such as 01a2…-…), got %q", s)
	}
	return &call{t: t, id: id}, nil
}

type call struct {
	t  *Tool
	id uuid.UUID
}

func (c *call) Args() map[string]any     { return map[string]any{"receipt_id": c.id.String()} }
func (c *call) Resolved() map[string]any { return map[string]any{"receipt_id": c.id.String()} }

// Enforce gives the call no file system, no network and no environment:
// it reads only the gateway's own result store.
func (c *call) Enforce(_ context.Context, d wire.Decision) (wire.Scope, error) {
	if !d.Allow {
		return wire.Scope{}, wire.Errorf(wire.CodePermissionDenied, "the policy denied this call")
	}
	return wire.Scope{
		FSGrants: []wire.FSGrant{},
		Network:  wire.Network{Posture: wire.PostureOff, Allow: []string{}},
		EnvNames: []string{},
		Limits:   wire.Limits{},
		Backend:  Backend,
	}, nil
}

// Data is read_tool_result's output.data.
type Data struct {
	ReceiptID string          `json:"receipt_id"`
	Tool      string          `json:"tool"`
	Time      time.Time       `json:"time"`
	ExpiresAt time.Time       `json:"expires_at"`
	Output    json.RawMessage `json:"output"`
}

func (c *call) Run(ctx context.Context, _ wire.Scope) tools.Result {
	start := time.Now()
	fail := func(status string, we *wire.Error) tools.Result {
		return tools.Timed(tools.Result{Output: wire.ToolOutput{Error: we, Metadata: map[string]any{"backend": Backend}},
			Status: status, Backend: Backend}, time.Since(start).Milliseconds())
	}
	caller, ok := tools.CallerFrom(ctx)
	if !ok || caller.PrincipalID == "" {
		return fail(wire.StatusError, wire.Errorf(wire.CodeInternal, "read_tool_result ran without its caller"))
	}
	if caller.SessionID == "" {
		return fail(wire.StatusFailed, wire.FieldError(wire.CodeInvalidInput, "session_id",
			"read_tool_result reads results of the calling session: send the session_id the earlier call was made with"))
	}
	st, err := c.t.store.Load(c.id, caller.PrincipalID, caller.SessionID)
	switch {
	case errors.Is(err, results.ErrNotFound):
		return fail(wire.StatusFailed, &wire.Error{Code: wire.CodeNotFound,
			Message: fmt.Sprintf("no result of receipt %s is kept for you in this session: the receipt is unknown, not yours, of another session, expired, or its call kept no result", c.id),
			Details: map[string]any{"field": "receipt_id"}})
	case err != nil:
		return fail(wire.StatusError, wire.Errorf(wire.CodeBackendUnavailable, "the result store cannot be read: %v", err))
	case st.Omitted == "" && st.Output == nil:
		return fail(wire.StatusError, wire.Errorf(wire.CodeInternal, "the kept result of receipt %s has no output", c.id))
	case st.Omitted != "":
		return fail(wire.StatusFailed, &wire.Error{Code: wire.CodeReadLimit,
			Message: fmt.Sprintf("the result of receipt %s was %d bytes after redaction, more than the %d kept (evidence.results_max_bytes): it was not kept", c.id, st.Bytes, c.t.store.MaxBytes()),
			Details: map[string]any{"field": "receipt_id", "bytes": st.Bytes, "limit": c.t.store.MaxBytes()}})
	}
	data := Data{ReceiptID: st.ReceiptID, Tool: st.Tool, Time: st.Time, ExpiresAt: st.ExpiresAt, Output: *st.Output}
	b, err := json.Marshal(data)
	if err != nil {
		return fail(wire.StatusError, wire.Errorf(wire.CodeInternal, "encoding the output: %v", err))
	}
	sum := sha256.Sum256(b)
	return tools.Timed(tools.Result{
		Output:       wire.ToolOutput{Success: true, Data: data, Metadata: map[string]any{"backend": Backend}},
		Status:       wire.StatusSucceeded,
		OutputSHA256: hex.EncodeToString(sum[:]),
		Backend:      Backend,
	}, time.Since(start).Milliseconds())
}
