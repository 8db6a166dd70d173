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
	CodeInvalidFrontmatter  Code = "invalid_frontmatter"
	CodeReadLimit           Code = "read_limit"
	CodeWriteLimit          Code = "write_limit"
	CodeTooLarge            Code = "too_large"
	CodeTimeout             Code = "timeout"
	CodeEvidenceUnavailable Code = "evidence_unavailable"
	CodeSandboxUnavailable  Code = "sandbox_unavailable"
	CodeBackendUnavailable  Code = "backend_unavailable"
	CodeInternal            Code = "internal"
)

// Error is a contract error: a code, a message that says what was wrong and
// what would be accepted, and details naming the offending field.
type Error struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf builds a contract error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Details: map[string]any{}}
}

// FieldError builds a contract error naming the offending field.
func FieldError(code Code, field string, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Details: map[string]any{"field": field}}
}
