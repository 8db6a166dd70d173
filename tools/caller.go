package tools

import "context"

// Caller is who made the call that is running: the authenticated
// principal, the session it named and the call's receipt. Tools that act
// on the caller's own records (read_tool_result) read it; identity comes
// only from the pipeline, never from the tool's input.
type Caller struct {
	PrincipalID string
	SessionID   string
	ReceiptID   string
}

type callerKey struct{}

// WithCaller records who made the running call (set by the pipeline).
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the running call's caller, if the pipeline set one.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}
