// Package sdk is the Go client of the Portcullis gateway for agents and
// auditors.
//
// An agent calls tools through the gateway instead of running them itself:
// every call is authenticated by the client's API key, decided by policy,
// enforced, and recorded as a receipt. The client speaks the wire package's
// types (the gateway's own vocabulary), so it cannot drift from the server:
//
//	c := sdk.New("http://127.0.0.1:8080", os.Getenv("PORTCULLIS_API_KEY"))
//	res, err := c.Exec(ctx, sdk.ExecInput{Argv: []string{"/usr/bin/git", "status"}})
//
// Any answer other than 200 is an *Error carrying the contract's code and
// the HTTP status. Calls are retried only when the gateway says nothing ran
// (429, or 503 with evidence_unavailable or sandbox_unavailable), with
// exponential backoff and jitter; side-effect-free reads retry on any 503.
// A W3C traceparent is sent from the caller's context, so the receipt's
// trace_id names the agent's own trace.
//
// Tool loops: RunOpenAIToolLoop (chat completions) and RunAnthropicToolLoop
// (Messages API) offer the model the tools this caller may call, named by
// their model-safe names (fs.read is fs_read, as those APIs require; the
// gateway accepts either form), run each call the model makes through the
// gateway, and answer it with the tool's output, refusals included. They
// take the model call as a function returning the response body, so they
// work with any client library and depend on none.
//
// Install: go get github.com/portcullis/portcullis/sdk. The SDK is a module
// of its own: it requires the wire module (the gateway's vocabulary, no
// dependencies) and OpenTelemetry's API, none of the server's
// dependencies.
package sdk
