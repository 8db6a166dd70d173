package sdk

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/portcullis/portcullis/wire"
)

// ToolMessage is the OpenAI chat-completions message answering a model's
// tool call: {"role": "tool", "tool_call_id": ..., "content": <JSON>}. The
// content is the ToolOutput (success, data, error, metadata with the
// receipt id), so the model sees a denial's reasons and can adapt.
func ToolMessage(toolCallID string, resp *wire.ToolCallResponse) map[string]any {
	var out wire.ToolOutput
	if resp != nil {
		out = resp.Output
	} else {
		out = wire.ToolOutput{Error: wire.Errorf(wire.CodeInternal, "no answer from the gateway"), Metadata: map[string]any{}}
	}
	b, err := json.Marshal(out)
	if err != nil {
		b = []byte(`{"success":false,"data":null,"error":{"code":"internal","message":"tool output is not JSON","details":{}},"metadata":{}}`)
	}
	return map[string]any{"role": "tool", "tool_call_id": toolCallID, "content": string(b)}
}

// HandleToolCall runs one model tool call (its id, function name and the
// JSON arguments string the model produced) and returns the tool message to
// append to the conversation. Refusals become tool messages the model can
// read; only failures to reach the gateway at all are returned as errors.
func (c *Client) HandleToolCall(ctx context.Context, toolCallID, name, arguments string, opts ...CallOption) (map[string]any, error) {
	if arguments == "" {
		arguments = "{}"
	}
	if !json.Valid([]byte(arguments)) {
		return ToolMessage(toolCallID, &wire.ToolCallResponse{Output: wire.ToolOutput{
			Error:    wire.FieldError(wire.CodeInvalidInput, "arguments", "the tool arguments are not valid JSON; send a JSON object"),
			Metadata: map[string]any{}}}), nil
	}
	opts = append([]CallOption{WithCallID(toolCallID)}, opts...)
	resp, err := c.Call(ctx, name, json.RawMessage(arguments), opts...)
	var e *Error
	if err != nil && resp == nil {
		if errors.As(err, &e) {
			return ToolMessage(toolCallID, &wire.ToolCallResponse{Output: wire.ToolOutput{
				Error: &wire.Error{Code: e.Code, Message: e.Message, Details: e.Details}, Metadata: map[string]any{}}}), nil
		}
		return nil, err
	}
	return ToolMessage(toolCallID, resp), nil
}
