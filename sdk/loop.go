package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/portcullis/portcullis/wire"
)

// Tool loops. RunOpenAIToolLoop and RunAnthropicToolLoop drive a model
// through its tool calls, running every call through the gateway. They do
// not talk to a model API themselves: the caller passes a function that
// sends the request with whatever client it uses and returns the
// response body, so the SDK depends on no model vendor's library and a
// test can replay recorded responses.

// LoopResult is how a tool loop ended.
type LoopResult struct {
	// Content is the model's final text.
	Content string
	// Messages is the whole conversation, in the API's own message shape,
	// the tool results included: send it back to continue the run.
	Messages []map[string]any
	// Receipts are the receipt ids of the calls made, in order.
	Receipts []string
}

// LoopOption configures a tool loop.
type LoopOption func(*loopConfig)

type loopConfig struct {
	maxTurns int
	call     []CallOption
}

// DefaultMaxTurns bounds a tool loop: a model still asking for tools after
// this many turns ends the loop with an error.
const DefaultMaxTurns = 16

// WithMaxTurns sets how many model turns a loop may take.
func WithMaxTurns(n int) LoopOption {
	return func(c *loopConfig) {
		if n > 0 {
			c.maxTurns = n
		}
	}
}

// WithCallOptions applies opts (WithSessionID ...) to every tool call the
// loop makes; the call id is always the model's own.
func WithCallOptions(opts ...CallOption) LoopOption {
	return func(c *loopConfig) { c.call = append(c.call, opts...) }
}

func newLoopConfig(opts []LoopOption) loopConfig {
	c := loopConfig{maxTurns: DefaultMaxTurns}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// outputJSON is a tool output as the JSON text a model reads: success,
// data, error (code, message, details) and metadata with the receipt id,
// so the model sees a refusal's reasons and can adapt.
func outputJSON(resp *wire.ToolCallResponse) string {
	out := wire.ToolOutput{Error: wire.Errorf(wire.CodeInternal, "no answer from the gateway")}
	if resp != nil {
		out = resp.Output
	}
	if out.Metadata == nil {
		out.Metadata = map[string]any{}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return `{"success":false,"data":null,"error":{"code":"internal","message":"tool output is not JSON","details":{}},"metadata":{}}`
	}
	return string(b)
}

// receiptOf is the receipt id of a tool answer, if any.
func receiptOf(resp *wire.ToolCallResponse) string {
	if resp == nil {
		return ""
	}
	if resp.ReceiptID != "" {
		return resp.ReceiptID
	}
	if id, ok := resp.Output.Metadata["receipt_id"].(string); ok {
		return id
	}
	return ""
}

func errTurns(n int) error {
	return fmt.Errorf("portcullis: the model still asked for tools after %d turns", n)
}

// runModelCall runs one tool call a model asked for: its id, the name it
// used (a model-safe name or the tool's own; the gateway takes either) and
// its arguments as JSON. Refusals (any answer but 200, the gateway's or
// a proxy's), and arguments that are not a JSON object, come back as an
// answer for the model; only a gateway that could not be reached is an
// error.
func (c *Client) runModelCall(ctx context.Context, id, name string, args []byte, opts []CallOption) (*wire.ToolCallResponse, error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 {
		trimmed = []byte("{}")
	}
	if trimmed[0] != '{' || !json.Valid(trimmed) {
		return &wire.ToolCallResponse{Output: wire.ToolOutput{
			Error:    wire.FieldError(wire.CodeInvalidInput, "arguments", "the tool arguments are not a JSON object; send a JSON object"),
			Metadata: map[string]any{}}}, nil
	}
	opts = append(append([]CallOption(nil), opts...), WithCallID(id))
	resp, err := c.Call(ctx, name, json.RawMessage(trimmed), opts...)
	if err == nil {
		return resp, nil
	}
	var e *Error
	if errors.As(err, &e) {
		if resp != nil {
			return resp, nil
		}
		return &wire.ToolCallResponse{ReceiptID: e.ReceiptID, Output: wire.ToolOutput{
			Error: &wire.Error{Code: e.Code, Message: e.Message, Details: e.Details}, Metadata: map[string]any{}}}, nil
	}
	return nil, err
}
