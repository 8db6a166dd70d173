package sdk

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/portcullis/portcullis/wire"
)

// OpenAI chat-completions tool calling: tools go to the model as
// {"type": "function", "function": {"name", "description", "parameters"}}
// (GET /v1/tools already answers in that shape, with model-safe names); the
// model answers with message.tool_calls, each {"id", "type": "function",
// "function": {"name", "arguments": "<JSON text>"}}; each call is answered
// by a {"role": "tool", "tool_call_id", "content"} message.

// ToolMessage is the OpenAI chat-completions message answering a model's
// tool call: {"role": "tool", "tool_call_id": ..., "content": <JSON>}. The
// content is the ToolOutput (success, data, error, metadata with the
// receipt id), so the model sees a denial's reasons and can adapt.
func ToolMessage(toolCallID string, resp *wire.ToolCallResponse) map[string]any {
	return map[string]any{"role": "tool", "tool_call_id": toolCallID, "content": outputJSON(resp)}
}

// HandleToolCall runs one model tool call (its id, function name and the
// JSON arguments string the model produced) and returns the tool message to
// append to the conversation. Refusals become tool messages the model can
// read; only failures to reach the gateway at all are returned as errors.
func (c *Client) HandleToolCall(ctx context.Context, toolCallID, name, arguments string, opts ...CallOption) (map[string]any, error) {
	resp, err := c.runModelCall(ctx, toolCallID, name, []byte(arguments), opts)
	if err != nil {
		return nil, err
	}
	return ToolMessage(toolCallID, resp), nil
}

// ChatCompletionFunc sends one chat-completions request (the conversation
// so far and the tools, in the API's shape) with the caller's own client
// and model settings, and returns the response body (a chat.completion
// object). With the official Go client: marshal the messages into the
// request params, call Chat.Completions.New, return resp.RawJSON().
type ChatCompletionFunc func(ctx context.Context, messages []map[string]any, tools []wire.FunctionTool) (json.RawMessage, error)

// openAIToolCall is one entry of message.tool_calls.
type openAIToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatCompletion struct {
	Choices []struct {
		Message struct {
			Content   *string          `json:"content"`
			ToolCalls []openAIToolCall `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
}

// RunOpenAIToolLoop drives a chat-completions model until it answers
// without tool calls: it offers the tools this caller may call, runs each
// call the model asks for through the gateway, and sends the results back.
func (c *Client) RunOpenAIToolLoop(ctx context.Context, create ChatCompletionFunc, messages []map[string]any, opts ...LoopOption) (*LoopResult, error) {
	cfg := newLoopConfig(opts)
	tools, err := c.Tools(ctx)
	if err != nil {
		return nil, err
	}
	res := &LoopResult{Messages: append([]map[string]any(nil), messages...)}
	for turn := 0; turn < cfg.maxTurns; turn++ {
		raw, err := create(ctx, res.Messages, tools)
		if err != nil {
			return res, err
		}
		var cc chatCompletion
		if err := json.Unmarshal(raw, &cc); err != nil || len(cc.Choices) == 0 {
			return res, fmt.Errorf("portcullis: the model's answer is not a chat completion with choices: %v", err)
		}
		msg := cc.Choices[0].Message
		assistant := map[string]any{"role": "assistant", "content": msg.Content}
		if len(msg.ToolCalls) > 0 {
			assistant["tool_calls"] = msg.ToolCalls
		}
		res.Messages = append(res.Messages, assistant)
		if len(msg.ToolCalls) == 0 {
			if msg.Content != nil {
				res.Content = *msg.Content
			}
			return res, nil
		}
		for _, tc := range msg.ToolCalls {
			resp, err := c.runModelCall(ctx, tc.ID, tc.Function.Name, []byte(tc.Function.Arguments), cfg.call)
			if err != nil {
				return res, err
			}
			if id := receiptOf(resp); id != "" {
				res.Receipts = append(res.Receipts, id)
			}
			res.Messages = append(res.Messages, ToolMessage(tc.ID, resp))
		}
	}
	return res, errTurns(cfg.maxTurns)
}
