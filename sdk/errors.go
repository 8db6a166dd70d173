package sdk

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/portcullis/portcullis/wire"
)

// Error is a refusal or failure the gateway reported: an HTTP answer other
// than 200, or a tool whose output carries an error. Code is the contract's
// error code (permission_denied, invalid_input, ...); for a body that is not
// the gateway's (a proxy's 502, say) Code is empty and Message says what came.
type Error struct {
	Status  int            // HTTP status
	Code    wire.Code      // contract error code
	Message string         // the gateway's explanation
	Details map[string]any // the offending field and more
	// ReceiptID names the receipt written for this call, when there is one.
	ReceiptID string
	// Response is the full tool-call answer (tool calls only).
	Response *wire.ToolCallResponse
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("portcullis: HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("portcullis: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// IsCode reports whether err is (or wraps) an *Error with code.
func IsCode(err error, code wire.Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// fromWire builds an Error from a contract error.
func fromWire(status int, we *wire.Error) *Error {
	if we == nil {
		return &Error{Status: status, Message: http.StatusText(status)}
	}
	return &Error{Status: status, Code: we.Code, Message: we.Message, Details: we.Details}
}
