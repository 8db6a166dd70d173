package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/wire"
)

// A tool call enters the pipeline as a callRequest, whichever way it came:
// an HTTP body (POST /v1/tool-calls, POST /v1/decisions), an MCP
// tools/call, or a nested call from a running code.run. Each entrance
// checks the envelope once, with the same rules and the same size bound,
// and the pipeline never decodes it again.

// callRequest is one tool call as the pipeline takes it.
type callRequest struct {
	principal wire.Principal
	req       wire.ToolCallRequest
	// parent is the receipt of the running call that made this one
	// (code.run's bridge); nil for a call from an agent.
	parent *uuid.UUID
	depth  int // nesting depth: 0 for a call from an agent
	// refused is set when the envelope was refused before any tool saw it
	// (too large, malformed, not an object): the call is recorded as
	// invalid and never runs.
	refused *wire.Error
}

// readCall reads and checks the envelope of an HTTP tool call.
func (s *Server) readCall(c echo.Context) callRequest {
	p, _ := principalOf(c)
	in := callRequest{principal: p}
	body, we := s.readBody(c)
	if we == nil {
		we = parseToolCall(body, &in.req)
	}
	in.refused = we
	return in
}

// errNotJSON is a typed call whose input is not JSON: it cannot be a body
// at all, so it is answered without a receipt, as an HTTP body that is not
// JSON never reaches a tool either.
var errNotJSON = errors.New("input is not JSON")

// typedCall checks a call that enters already decoded (MCP tools/call, a
// nested call) as if it had been sent as a body: the input is compacted as
// an encoded body holds it (so its digest is the same), the envelope is
// held to MaxBodyBytes, and its fields to the rules parseToolCall applies.
// A call over the size bound is refused with no envelope, exactly like a
// body that was never read.
func (s *Server) typedCall(p wire.Principal, req wire.ToolCallRequest, parent *uuid.UUID, depth int) (callRequest, error) {
	in := callRequest{principal: p, parent: parent, depth: depth}
	input, err := json.Marshal(req.Input)
	if err != nil {
		return in, errNotJSON
	}
	req.Input = input
	if we := s.checkSize(envelopeSize(req)); we != nil {
		in.refused = we
		return in, nil
	}
	in.req, in.refused = req, checkEnvelope(&req)
	return in, nil
}

// envelopeSize is the length of req encoded as a request body, its input
// already encoded: the envelope around a one-byte stand-in, plus the input.
func envelopeSize(req wire.ToolCallRequest) int64 {
	input := req.Input
	req.Input = json.RawMessage("0")
	b, err := json.Marshal(req)
	if err != nil {
		return 0
	}
	return int64(len(b) - 1 + len(input))
}

// checkSize is the one request size bound: at most MaxBodyBytes, more is
// too_large (HTTP bodies and typed calls alike).
func (s *Server) checkSize(n int64) *wire.Error {
	if limit := s.opts.MaxBodyBytes; n > limit {
		return &wire.Error{Code: wire.CodeTooLarge, Message: fmt.Sprintf("request body exceeds %d bytes", limit), Details: map[string]any{"field": "body", "limit": limit}}
	}
	return nil
}

// readBody reads at most MaxBodyBytes; more is too_large.
func (s *Server) readBody(c echo.Context) ([]byte, *wire.Error) {
	if we := s.checkSize(c.Request().ContentLength); we != nil {
		return nil, we
	}
	b, err := io.ReadAll(io.LimitReader(c.Request().Body, s.opts.MaxBodyBytes+1))
	if err != nil {
		return nil, wire.Errorf(wire.CodeInvalidInput, "could not read the request body: %v", err)
	}
	if we := s.checkSize(int64(len(b))); we != nil {
		return nil, we
	}
	return b, nil
}

// parseToolCall decodes and checks the envelope of a tool call.
func parseToolCall(body []byte, req *wire.ToolCallRequest) *wire.Error {
	if !utf8.Valid(body) {
		return wire.FieldError(wire.CodeInvalidInput, "body", "request body is not valid UTF-8")
	}
	if err := decodeStrict(body, req); err != nil {
		return jsonError(err)
	}
	return checkEnvelope(req)
}

// checkEnvelope checks the envelope's fields: a printable tool name, call
// and session ids within bounds, and an input that is a JSON object.
func checkEnvelope(req *wire.ToolCallRequest) *wire.Error {
	switch {
	case req.Tool == "":
		return wire.FieldError(wire.CodeInvalidInput, "tool", "tool is required, e.g. \"Exec\"")
	case !printable(req.Tool) || len(req.Tool) > 128:
		return wire.FieldError(wire.CodeInvalidInput, "tool", "tool must be a printable name of at most 128 bytes")
	case len(req.CallID) > 256 || !printable(req.CallID):
		return wire.FieldError(wire.CodeInvalidInput, "call_id", "call_id must be printable and at most 256 bytes")
	case len(req.SessionID) > 256 || !printable(req.SessionID):
		return wire.FieldError(wire.CodeInvalidInput, "session_id", "session_id must be printable and at most 256 bytes")
	}
	in := bytes.TrimSpace(req.Input)
	if len(in) == 0 || in[0] != '{' {
		return wire.FieldError(wire.CodeInvalidInput, "input", "input must be a JSON object holding the tool's arguments")
	}
	return nil
}

var errTrailing = errors.New("trailing data after the JSON object")

// decodeStrict decodes exactly one JSON value into v, refusing unknown fields.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errTrailing
	}
	return nil
}

// jsonError explains a decoding failure and names the field where it can.
func jsonError(err error) *wire.Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &wire.Error{Code: wire.CodeInvalidInput, Message: fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, err), Details: map[string]any{"field": "body", "offset": syn.Offset}}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return wire.FieldError(wire.CodeInvalidInput, field, "%s must be %s, got JSON %s", field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return wire.FieldError(wire.CodeInvalidInput, "body", "request body is empty or cut short; send a JSON object")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, uerr := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		field := name
		if uerr != nil || field == "" {
			field = "body" // an empty or unprintable key: name the body
		}
		return wire.FieldError(wire.CodeInvalidInput, field, "unknown field %q; accepted: tool, input, call_id, session_id", name)
	case errors.Is(err, errTrailing):
		return wire.FieldError(wire.CodeInvalidInput, "body", "trailing data after the JSON object")
	}
	return wire.FieldError(wire.CodeInvalidInput, "body", "invalid JSON: %v", err)
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "map", "struct":
		return "an object"
	case "bool":
		return "a boolean"
	}
	return "a " + k
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// bestEffortArgs decodes input for the receipt of a call that never reached
// its tool; undecodable input is recorded only by its digest.
func bestEffortArgs(raw json.RawMessage) map[string]any {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}
