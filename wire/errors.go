package wire

import "fmt"

// Code is a contract error code (output.error.code).
type Code string

// The contract's error codes.
const (
	CodeUnauthenticated    Code = "unauthenticated"
	CodeForbidden          Code = "forbidden"
	CodeInvalidInput       Code = "invalid_input"
	CodeUnknownTool        Code = "unknown_tool"
	CodePermissionDenied   Code = "permission_denied"
	CodeFSDenied           Code = "fs_denied"
	CodeNetworkDenied      Code = "network_denied"
	CodeSandboxViolation   Code = "sandbox_violation"
	CodeNotFound           Code = "not_found"
	CodePreconditionFailed Code = "precondition_failed"
	// CodeInvalidFrontmatter: fs.apply_patch's updateFrontmatter found a
	// front matter that is not valid YAML (details.line names the line).
	// Not in the contract's list; seed 001 (CrewAgent) asks for it.
	CodeInvalidFrontmatter Code = "invalid_frontmatter"
	CodeReadLimit          Code = "read_limit"
	CodeWriteLimit         Code = "write_limit"
	CodeTooLarge           Code = "too_large"
	CodeTimeout            Code = "timeout"
	// CodeToolError: an upstream MCP tool answered isError (HTTP 200).
	CodeToolError Code = "tool_error"
	// CodeToolChanged: an upstream tool's definition is not the pinned one
	// (changed, or new), so it is quarantined until an admin approves it.
	CodeToolChanged         Code = "tool_changed"
	CodeApprovalRequired    Code = "approval_required"
	CodeApprovalRejected    Code = "approval_rejected"
	CodeApprovalExpired     Code = "approval_expired"
	CodeRateLimited         Code = "rate_limited"
	CodeEvidenceUnavailable Code = "evidence_unavailable"
	CodeSandboxUnavailable  Code = "sandbox_unavailable"
	CodeBackendUnavailable  Code = "backend_unavailable"
	CodeInternal            Code = "internal"
)

// Codes lists every contract code, in the order above: tables keyed by
// code (the gateway's status and MCP mapping) are tested against it.
var Codes = []Code{
	CodeUnauthenticated, CodeForbidden, CodeInvalidInput, CodeUnknownTool,
	CodePermissionDenied, CodeFSDenied, CodeNetworkDenied, CodeSandboxViolation,
	CodeNotFound, CodePreconditionFailed, CodeInvalidFrontmatter, CodeReadLimit, CodeWriteLimit,
	CodeTooLarge, CodeTimeout, CodeToolError, CodeToolChanged, CodeApprovalRequired, CodeApprovalRejected,
	CodeApprovalExpired, CodeRateLimited, CodeEvidenceUnavailable, CodeSandboxUnavailable,
	CodeBackendUnavailable, CodeInternal,
}

// Error is a contract error: a code, a message that says what was wrong and
// what would be accepted, and details naming the offending field.
//
// Op and Err are for the gateway's own log, never for the client: the
// operation that failed ("exec: start", "httpget: resolve") and the cause
// it wraps (a syscall error, a driver error). Neither is encoded; the
// gateway logs them where the error leaves it.
type Error struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
	Op      string         `json:"-"`
	Err     error          `json:"-"`
}

func (e *Error) Error() string {
	if e.Err != nil {
		return string(e.Code) + ": " + e.Message + " (" + e.Op + ": " + e.Err.Error() + ")"
	}
	return string(e.Code) + ": " + e.Message
}

// Unwrap is the cause, for errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// Wrap builds a contract error whose message is for the client and whose
// cause (err, with the operation op) is only logged.
func Wrap(code Code, op string, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Details: map[string]any{}, Op: op, Err: err}
}

// Errorf builds a contract error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Details: map[string]any{}}
}

// FieldError builds a contract error naming the offending field.
func FieldError(code Code, field string, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Details: map[string]any{"field": field}}
}
