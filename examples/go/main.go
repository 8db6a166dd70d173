// Command quickstart is a minimal agent on the Go SDK: the OpenAI and the
// Anthropic tool loop, each with a scripted "model" so it runs without an
// LLM. Swap a script for a real API call (see create below) and nothing
// else changes.
//
//	gateway serve --dev   # prints an agent key
//	PORTCULLIS_URL=http://127.0.0.1:8080 PORTCULLIS_API_KEY=<agent key> go run .
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/portcullis/portcullis/sdk"
	"github.com/portcullis/portcullis/wire"
)

func main() {
	url, key := os.Getenv("PORTCULLIS_URL"), os.Getenv("PORTCULLIS_API_KEY")
	if url == "" {
		url = "http://127.0.0.1:8080"
	}
	if key == "" {
		fmt.Fprintln(os.Stderr, "set PORTCULLIS_API_KEY to an agent key (gateway serve --dev prints one)")
		os.Exit(2)
	}
	ctx := context.Background()
	c := sdk.New(url, key)
	list, err := c.ToolList(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "listing tools:", err)
		os.Exit(1)
	}
	fmt.Print("tools offered to the model:")
	for _, t := range list.Tools {
		fmt.Printf(" %s (%s)", t.Function.Name, list.Names[t.Function.Name])
	}
	fmt.Println()

	ask := []map[string]any{{"role": "user", "content": "say hello, then show me /etc/shadow"}}
	session := sdk.WithCallOptions(sdk.WithSessionID("quickstart-go"))

	// OpenAI chat completions. With a real model, create sends
	// {"model", "messages", "tools"} to /v1/chat/completions and returns
	// the response body.
	openai, err := c.RunOpenAIToolLoop(ctx, scriptedOpenAI, ask, session)
	if err != nil {
		fmt.Fprintln(os.Stderr, "openai loop:", err)
		os.Exit(1)
	}
	report("openai", openai)

	// Anthropic Messages. With a real model, create sends {"model",
	// "max_tokens", "messages", "tools"} to /v1/messages.
	anthropic, err := c.RunAnthropicToolLoop(ctx, scriptedAnthropic, ask, session)
	if err != nil {
		fmt.Fprintln(os.Stderr, "anthropic loop:", err)
		os.Exit(1)
	}
	report("anthropic", anthropic)
}

func report(api string, r *sdk.LoopResult) {
	for _, m := range r.Messages {
		switch {
		case m["role"] == "tool":
			fmt.Printf("%s %v -> %v\n", api, m["tool_call_id"], m["content"])
		case m["role"] == "user":
			if blocks, ok := m["content"].([]sdk.ToolResultBlock); ok {
				for _, b := range blocks {
					fmt.Printf("%s %s -> is_error=%v %s\n", api, b.ToolUseID, b.IsError, b.Content)
				}
			}
		}
	}
	fmt.Printf("%s model: %s\n%s receipts: %v\n", api, r.Content, api, r.Receipts)
}

// The scripted models: turn 1 runs a program and tries a file the policy
// most likely refuses (by the model-safe names the gateway listed); turn 2
// answers.

func scriptedOpenAI(_ context.Context, messages []map[string]any, _ []wire.FunctionTool) (json.RawMessage, error) {
	if len(messages) == 1 {
		return json.RawMessage(`{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"Exec","arguments":"{\"argv\":[\"/usr/bin/echo\",\"hello from a governed agent\"]}"}},
			{"id":"call_2","type":"function","function":{"name":"fs_read","arguments":"{\"path\":\"/etc/shadow\"}"}}]}}]}`), nil
	}
	return json.RawMessage(`{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"done"}}]}`), nil
}

func scriptedAnthropic(_ context.Context, messages []map[string]any, _ []sdk.AnthropicTool) (json.RawMessage, error) {
	if len(messages) == 1 {
		return json.RawMessage(`{"type":"message","role":"assistant","stop_reason":"tool_use","content":[
			{"type":"tool_use","id":"toolu_1","name":"Exec","input":{"argv":["/usr/bin/echo","hello from a governed agent"]}},
			{"type":"tool_use","id":"toolu_2","name":"fs_read","input":{"path":"/etc/shadow"}}]}`), nil
	}
	return json.RawMessage(`{"type":"message","role":"assistant","stop_reason":"end_turn","content":[{"type":"text","text":"done"}]}`), nil
}
