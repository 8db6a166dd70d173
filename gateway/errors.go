package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// answer is how one contract code is answered: its HTTP status, and how
// MCP reports a tools/call refused with it.
type answer struct {
	status int
	// rpc is the JSON-RPC error code MCP answers a tools/call refused
	// with this code; 0 means the refusal is a tool result with isError,
	// for the model to read and correct its call (the MCP spec's split
	// between protocol errors and tool errors).
	rpc int
}

// codeTable is the one table from a contract code to its answer (in the
// manner of upspin's errors.Kind). Every code in wire.Codes has a row
// (TestCodeTable); a code without one answers as internal.
var codeTable = map[wire.Code]answer{
	wire.CodeUnauthenticated:     {status: http.StatusUnauthorized},
	wire.CodeForbidden:           {status: http.StatusForbidden},
	wire.CodeInvalidInput:        {status: http.StatusBadRequest},
	wire.CodeUnknownTool:         {status: http.StatusNotFound, rpc: rpcInvalidParams},
	wire.CodePermissionDenied:    {status: http.StatusForbidden},
	wire.CodeFSDenied:            {status: http.StatusForbidden},
	wire.CodeNetworkDenied:       {status: http.StatusForbidden},
	wire.CodeSandboxViolation:    {status: http.StatusForbidden},
	wire.CodeNotFound:            {status: http.StatusNotFound},
	wire.CodePreconditionFailed:  {status: http.StatusPreconditionFailed},
	wire.CodeInvalidFrontmatter:  {status: http.StatusUnprocessableEntity},
	wire.CodeReadLimit:           {status: http.StatusRequestEntityTooLarge},
	wire.CodeWriteLimit:          {status: http.StatusRequestEntityTooLarge},
	wire.CodeTooLarge:            {status: http.StatusRequestEntityTooLarge},
	wire.CodeTimeout:             {status: http.StatusGatewayTimeout},
	wire.CodeToolError:           {status: http.StatusOK},
	wire.CodeToolChanged:         {status: http.StatusConflict},
	wire.CodeApprovalRequired:    {status: http.StatusAccepted},
	wire.CodeApprovalRejected:    {status: http.StatusForbidden},
	wire.CodeApprovalExpired:     {status: http.StatusGone},
	wire.CodeRateLimited:         {status: http.StatusTooManyRequests},
	wire.CodeEvidenceUnavailable: {status: http.StatusServiceUnavailable},
	wire.CodeSandboxUnavailable:  {status: http.StatusServiceUnavailable},
	wire.CodeBackendUnavailable:  {status: http.StatusServiceUnavailable},
	wire.CodeInternal:            {status: http.StatusInternalServerError},
}

// statusOf is code's HTTP status (codeTable).
func statusOf(code wire.Code) int {
	if a, ok := codeTable[code]; ok {
		return a.status
	}
	return http.StatusInternalServerError
}

// mcpRPCCode is the JSON-RPC error code of a tools/call refused with
// code, or 0 when MCP reports it as a tool result with isError (codeTable).
func mcpRPCCode(code wire.Code) int { return codeTable[code].rpc }

// logCause logs what a contract error leaving the gateway does not tell
// its client: the cause it wraps (wire.Wrap), and for internal errors the
// error itself. Called once, where the error leaves (errorHandler, the
// pipeline's answer).
func (s *Server) logCause(ctx context.Context, we *wire.Error, attrs ...any) {
	switch {
	case we.Err != nil:
		s.log.ErrorContext(ctx, "request failed", append(attrs, "code", we.Code, "op", we.Op, "err", we.Err)...)
	case we.Code == wire.CodeInternal:
		s.log.ErrorContext(ctx, "request failed", append(attrs, "code", we.Code, "err", we.Message)...)
	}
}

// toWireError turns any error into the contract error a client may see. The
// cause of an internal error is logged by the caller, never sent.
func toWireError(err error) *wire.Error {
	var we *wire.Error
	var fe *evidence.HoldFieldError
	switch {
	case errors.As(err, &we):
		if we.Details == nil {
			we.Details = map[string]any{}
		}
		return we
	case errors.As(err, &fe):
		return wire.FieldError(wire.CodeInvalidInput, fe.Field, "%s: %s", fe.Field, fe.Message)
	case errors.Is(err, evidence.ErrHoldNotFound):
		return wire.Errorf(wire.CodeNotFound, "no such legal hold")
	case errors.Is(err, evidence.ErrHoldReleased):
		return wire.Errorf(wire.CodePreconditionFailed, "the legal hold is already released; place a new hold to hold the evidence again")
	case errors.Is(err, evidence.ErrUnavailable):
		return wire.Wrap(wire.CodeEvidenceUnavailable, "evidence", err, "the evidence store is unavailable; nothing was run; retry later")
	case errors.Is(err, evidence.ErrApprovalNotFound):
		return wire.Errorf(wire.CodeNotFound, "no such approval")
	case errors.Is(err, evidence.ErrApprovalSettled):
		return wire.Errorf(wire.CodePreconditionFailed, "the approval is already settled (approved, rejected or expired); a parked call is decided once")
	case errors.Is(err, evidence.ErrNotFound):
		return wire.Errorf(wire.CodeNotFound, "no such receipt")
	case errors.Is(err, evidence.ErrBadFilter):
		return wire.FieldError(wire.CodeInvalidInput, "until", "bad receipt filter: %s; until must be after since", strings.TrimPrefix(err.Error(), "evidence: "))
	case errors.Is(err, evidence.ErrBadCursor):
		return wire.FieldError(wire.CodeInvalidInput, "cursor", "cursor is not one this gateway issued; pass next_cursor unchanged")
	case errors.Is(err, context.DeadlineExceeded):
		return wire.Wrap(wire.CodeTimeout, "gateway", err, "the request took too long")
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return wire.Errorf(wire.CodeNotFound, "no such route")
		case http.StatusMethodNotAllowed:
			return &wire.Error{Code: wire.CodeInvalidInput, Message: "method not allowed on this route; the Allow header lists those it serves", Details: map[string]any{"field": "method"}}
		case http.StatusRequestEntityTooLarge:
			return wire.Errorf(wire.CodeTooLarge, "request body too large")
		case http.StatusUnauthorized:
			return wire.Errorf(wire.CodeUnauthenticated, "missing or unknown API key: send Authorization: Bearer <api-key>")
		case http.StatusBadRequest:
			return wire.Errorf(wire.CodeInvalidInput, "bad request")
		}
	}
	return wire.Wrap(wire.CodeInternal, "gateway", err, "internal error")
}

// errorHandler is echo's HTTPErrorHandler: every failure outside the tool-call
// pipeline answers {"error": {...}} with the status of its code. Echo's default
// handler only type-asserts and so misses wrapped errors.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	we := toWireError(err)
	markError(c, we.Code)
	s.logCause(c.Request().Context(), we, "path", c.Path(), "request_id", requestID(c))
	status := statusOf(we.Code)
	if errors.Is(err, echo.ErrMethodNotAllowed) {
		// The contract's invalid_input (field "method"), with the status
		// HTTP gives a method the route does not serve; the router set
		// Allow.
		status = http.StatusMethodNotAllowed
	}
	if c.Request().Method == http.MethodPost && s.toolCallRoutes[c.Path()] {
		// Every answer of a tool-call route is a ToolCallResponse,
		// failures before the pipeline (authentication) included, so
		// SDKs parse one shape.
		_ = c.JSON(status, wire.ToolCallResponse{Output: failed(we, nil)})
		return
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, wire.ErrorBody{Error: we})
}

// toolCallRoute registers a POST route whose every answer, error or not,
// is a ToolCallResponse (s.toolCallRoutes, read by errorHandler).
func (s *Server) toolCallRoute(e *echo.Echo, path string, h echo.HandlerFunc) {
	if s.toolCallRoutes == nil {
		s.toolCallRoutes = map[string]bool{}
	}
	s.toolCallRoutes[path] = true
	e.POST(path, h)
}
