package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/portcullis/portcullis/wire"
)

// Anthropic Messages-API tool use: tools go to the model as {"name",
// "description", "input_schema"}; the model answers with content blocks,
// among them {"type": "tool_use", "id", "name", "input": {...}} and
// stop_reason "tool_use"; the next user message answers every tool_use
// with a {"type": "tool_result", "tool_use_id", "content", "is_error"}
// block.

// AnthropicTool is one tool in the Messages API's shape.
type AnthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// AnthropicTools turns the gateway's tool list (Client.Tools) into the
// Messages API's tools. The names stay the model-safe names the gateway
// gave, which that API requires.
func AnthropicTools(tools []wire.FunctionTool) []AnthropicTool {
	out := make([]AnthropicTool, 0, len(tools))
	for _, t := range tools {
		out = append(out, AnthropicTool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: t.Function.Parameters})
	}
	return out
}

// ToolUseBlock is a tool_use content block of a model's answer.
type ToolUseBlock struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// ToolResultBlock answers one tool_use. Content is the ToolOutput as JSON
// (success, data, error, metadata with the receipt id); IsError is set when
// the call did not succeed, refusals included, so the model reads the
// reason and can adapt.
type ToolResultBlock struct {
	Type      string `json:"type"`
	ToolUseID string `json:"tool_use_id"`
	Content   string `json:"content"`
	IsError   bool   `json:"is_error"`
}

// ToolResult is the tool_result block for a gateway answer.
func ToolResult(toolUseID string, resp *wire.ToolCallResponse) ToolResultBlock {
	return ToolResultBlock{Type: "tool_result", ToolUseID: toolUseID, Content: outputJSON(resp),
		IsError: resp == nil || !resp.Output.Success}
}

// HandleToolUse runs one tool_use block through the gateway and returns
// its tool_result. Refusals become results the model can read; only
// failures to reach the gateway at all are returned as errors.
func (c *Client) HandleToolUse(ctx context.Context, block ToolUseBlock, opts ...CallOption) (ToolResultBlock, error) {
	resp, err := c.runModelCall(ctx, block.ID, block.Name, block.Input, opts)
	if err != nil {
		return ToolResultBlock{}, err
	}
	return ToolResult(block.ID, resp), nil
}

// MessagesFunc sends one Messages API request (the conversation so far
// and the tools, in the API's shape) with the caller's own client, model
// and max_tokens, and returns the response body (a message object).
type MessagesFunc func(ctx context.Context, messages []map[string]any, tools []AnthropicTool) (json.RawMessage, error)

type anthropicMessage struct {
	Content    []json.RawMessage `json:"content"`
	StopReason string            `json:"stop_reason"`
}

// RunAnthropicToolLoop drives a Messages-API model until it answers
// without tool_use: it offers the tools this caller may call, runs each
// tool_use through the gateway, and answers them all in the next user
// message. The model's content blocks go back exactly as they came
// (thinking blocks and their signatures included), as the API requires.
func (c *Client) RunAnthropicToolLoop(ctx context.Context, create MessagesFunc, messages []map[string]any, opts ...LoopOption) (*LoopResult, error) {
	cfg := newLoopConfig(opts)
	list, err := c.Tools(ctx)
	if err != nil {
		return nil, err
	}
	tools := AnthropicTools(list)
	res := &LoopResult{Messages: append([]map[string]any(nil), messages...)}
	for turn := 0; turn < cfg.maxTurns; turn++ {
		raw, err := create(ctx, res.Messages, tools)
		if err != nil {
			return res, err
		}
		var m anthropicMessage
		if err := json.Unmarshal(raw, &m); err != nil || m.Content == nil {
			return res, fmt.Errorf("portcullis: the model's answer is not a Messages API message with content: %v", err)
		}
		res.Messages = append(res.Messages, map[string]any{"role": "assistant", "content": m.Content})
		var results []ToolResultBlock
		var text strings.Builder
		for _, b := range m.Content {
			var kind struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if json.Unmarshal(b, &kind) != nil {
				continue
			}
			switch kind.Type {
			case "text":
				text.WriteString(kind.Text)
			case "tool_use":
				var tu ToolUseBlock
				if err := json.Unmarshal(b, &tu); err != nil {
					return res, fmt.Errorf("portcullis: a tool_use block does not parse: %w", err)
				}
				resp, err := c.runModelCall(ctx, tu.ID, tu.Name, tu.Input, cfg.call)
				if err != nil {
					return res, err
				}
				if id := receiptOf(resp); id != "" {
					res.Receipts = append(res.Receipts, id)
				}
				results = append(results, ToolResult(tu.ID, resp))
			}
		}
		if len(results) == 0 {
			res.Content = text.String()
			return res, nil
		}
		res.Messages = append(res.Messages, map[string]any{"role": "user", "content": results})
	}
	return res, errTurns(cfg.maxTurns)
}
