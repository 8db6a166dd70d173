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

// statusOf maps a contract code to its HTTP status: the one table the whole
// API answers from (in the manner of upspin's errors.Kind).
func statusOf(code wire.Code) int {
	switch code {
	case wire.CodeUnauthenticated:
		return http.StatusUnauthorized
	case wire.CodeForbidden, wire.CodePermissionDenied, wire.CodeFSDenied,
		wire.CodeNetworkDenied, wire.CodeSandboxViolation:
		return http.StatusForbidden
	case wire.CodeInvalidInput:
		return http.StatusBadRequest
	case wire.CodeUnknownTool, wire.CodeNotFound:
		return http.StatusNotFound
	case wire.CodePreconditionFailed:
		return http.StatusPreconditionFailed
	case wire.CodeInvalidFrontmatter:
		return http.StatusUnprocessableEntity
	case wire.CodeTooLarge, wire.CodeReadLimit, wire.CodeWriteLimit:
		return http.StatusRequestEntityTooLarge
	case wire.CodeTimeout:
		return http.StatusGatewayTimeout
	case wire.CodeEvidenceUnavailable, wire.CodeSandboxUnavailable, wire.CodeBackendUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
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
		return wire.Errorf(wire.CodeEvidenceUnavailable, "the evidence store is unavailable; nothing was run; retry later")
	case errors.Is(err, evidence.ErrNotFound):
		return wire.Errorf(wire.CodeNotFound, "no such receipt")
	case errors.Is(err, evidence.ErrBadFilter):
		return wire.FieldError(wire.CodeInvalidInput, "until", "bad receipt filter: %s; until must be after since", strings.TrimPrefix(err.Error(), "evidence: "))
	case errors.Is(err, evidence.ErrBadCursor):
		return wire.FieldError(wire.CodeInvalidInput, "cursor", "cursor is not one this gateway issued; pass next_cursor unchanged")
	case errors.Is(err, context.DeadlineExceeded):
		return wire.Errorf(wire.CodeTimeout, "the request took too long")
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return wire.Errorf(wire.CodeNotFound, "no such route")
		case http.StatusMethodNotAllowed:
			return &wire.Error{Code: wire.CodeInvalidInput, Message: "method not allowed on this route", Details: map[string]any{"field": "method"}}
		case http.StatusRequestEntityTooLarge:
			return wire.Errorf(wire.CodeTooLarge, "request body too large")
		case http.StatusUnauthorized:
			return wire.Errorf(wire.CodeUnauthenticated, "missing or unknown API key: send Authorization: Bearer <api-key>")
		case http.StatusBadRequest:
			return wire.Errorf(wire.CodeInvalidInput, "bad request")
		}
	}
	return wire.Errorf(wire.CodeInternal, "internal error")
}

// errorHandler is echo's HTTPErrorHandler: every failure outside the tool-call
// pipeline answers {"error": {...}} with the status of its code. Echo's default
// handler only type-asserts and so misses wrapped errors.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	we := toWireError(err)
	if we.Code == wire.CodeInternal {
		s.log.ErrorContext(c.Request().Context(), "request failed", "err", err, "path", c.Path(), "request_id", requestID(c))
	}
	status := statusOf(we.Code)
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, wire.ErrorBody{Error: we})
}
