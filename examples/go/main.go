// Command example is a minimal agent loop on the Go SDK. A scripted "model"
// decides the tool calls, so it runs without an LLM; swap script for a real
// chat-completions call and the loop stays the same.
//
//	gateway serve --dev   # prints an agent key
//	PORTCULLIS_URL=http://127.0.0.1:8080 PORTCULLIS_API_KEY=<agent key> go run ./examples/go
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/portcullis/portcullis/sdk"
)

// step is one model turn: the tool calls it asks for.
type step []struct{ id, name, args string }

// script plays the model: run a program, then try to read a file the
// policy most likely refuses, then stop.
var script = []step{
	{{"call_1", "Exec", `{"argv": ["/bin/echo", "hello from a governed agent"]}`}},
	{{"call_2", "fs.read", `{"path": "/etc/shadow"}`}},
}

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
	tools, err := c.Tools(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "listing tools:", err)
		os.Exit(1)
	}
	fmt.Printf("tools offered to the model: %d\n", len(tools))
	var messages []map[string]any
	for _, turn := range script {
		for _, call := range turn {
			msg, err := c.HandleToolCall(ctx, call.id, call.name, call.args, sdk.WithSessionID("example-go"))
			if err != nil {
				fmt.Fprintln(os.Stderr, "gateway unreachable:", err)
				os.Exit(1)
			}
			messages = append(messages, msg)
			fmt.Printf("%s %s -> %s\n", call.id, call.name, msg["content"])
		}
	}
	fmt.Printf("done: %d tool messages; receipts are under session_id example-go\n", len(messages))
}
