package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/portcullis/portcullis/sdk"
	"github.com/portcullis/portcullis/wire"
)

// The tool loops against the model APIs' recorded shapes
// (testdata/modelapi): a fake model server on loopback replays a fixture's
// responses and refuses requests the real API would refuse; the tool calls
// run against a real gateway; the test then checks the results the loop
// sent back.

type fixture struct {
	API             string            `json:"api"`
	Path            string            `json:"path"`
	ToolNamePattern string            `json:"tool_name_pattern"`
	Request         map[string]any    `json:"request"`
	Responses       []json.RawMessage `json:"responses"`
	Expect          map[string]struct {
		Tool      string    `json:"tool"`
		Success   bool      `json:"success"`
		ErrorCode wire.Code `json:"error_code"`
		Contains  string    `json:"contains"`
	} `json:"expect"`
	FinalContent string `json:"final_content"`
}

func loadFixture(t *testing.T, name string) fixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "modelapi", name))
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// fakeModel replays f's responses in order and keeps every request body.
// validate checks a request as the real API would; a bad request gets the
// API's 400 and fails the test.
type fakeModel struct {
	srv      *httptest.Server
	mu       sync.Mutex
	requests []map[string]any
}

func newFakeModel(t *testing.T, f fixture, validate func(req map[string]any, prev []map[string]any, prevResp json.RawMessage) error) *fakeModel {
	t.Helper()
	m := &fakeModel{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req map[string]any
		m.mu.Lock()
		defer m.mu.Unlock()
		n := len(m.requests)
		err := json.Unmarshal(b, &req)
		if err == nil && r.URL.Path != f.Path {
			err = fmt.Errorf("path %s, want %s", r.URL.Path, f.Path)
		}
		if err == nil && n >= len(f.Responses) {
			err = fmt.Errorf("request %d: the fixture has only %d responses", n+1, len(f.Responses))
		}
		if err == nil {
			var prev json.RawMessage
			if n > 0 {
				prev = f.Responses[n-1]
			}
			err = validate(req, m.requests, prev)
		}
		if err != nil {
			t.Errorf("%s request %d refused: %v\n%s", f.API, n+1, err, b)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, err.Error())
			return
		}
		m.requests = append(m.requests, req)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(f.Responses[n])
	}))
	t.Cleanup(m.srv.Close)
	return m
}

// post sends body to the fake model as an API client would.
func (m *fakeModel) post(ctx context.Context, path string, body any) (json.RawMessage, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.srv.URL+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("model API: HTTP %d: %s", resp.StatusCode, out)
	}
	return out, nil
}

// jsonSchemaObject checks a tool's parameters / input_schema: a JSON
// Schema object of type object.
func jsonSchemaObject(v any) error {
	s, ok := v.(map[string]any)
	if !ok || s["type"] != "object" {
		return fmt.Errorf("schema is not a JSON Schema of type object: %v", v)
	}
	if p, ok := s["properties"]; ok {
		if _, ok := p.(map[string]any); !ok {
			return fmt.Errorf("schema properties is not an object")
		}
	}
	return nil
}

func checkKeys(what string, m map[string]any, allowed ...string) error {
	for k := range m {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			return fmt.Errorf("%s: unknown field %q", what, k)
		}
	}
	return nil
}

// checkTool is what both APIs check of one tool: a name matching their
// pattern, unique among the tools, and an object JSON Schema for its input.
func checkTool(nameRE *regexp.Regexp, seen map[string]bool, field string, rawName, schema any) error {
	name, _ := rawName.(string)
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%s %q does not match %s", field, name, nameRE)
	}
	if seen[name] {
		return fmt.Errorf("duplicate tool name %q", name)
	}
	seen[name] = true
	if err := jsonSchemaObject(schema); err != nil {
		return fmt.Errorf("tool %s: %w", name, err)
	}
	return nil
}

// validateOpenAI is what the chat-completions API checks of the parts the
// loop writes: the tools, and that every tool call of the last assistant
// message is answered by exactly one tool message.
func validateOpenAI(nameRE *regexp.Regexp) func(map[string]any, []map[string]any, json.RawMessage) error {
	return func(req map[string]any, _ []map[string]any, prevResp json.RawMessage) error {
		if _, ok := req["model"].(string); !ok {
			return fmt.Errorf("model is required")
		}
		tools, _ := req["tools"].([]any)
		if len(tools) == 0 {
			return fmt.Errorf("no tools offered")
		}
		seen := map[string]bool{}
		for _, raw := range tools {
			tool, _ := raw.(map[string]any)
			fn, _ := tool["function"].(map[string]any)
			if tool["type"] != "function" || fn == nil {
				return fmt.Errorf("tool is not {type: function, function: {...}}: %v", raw)
			}
			if err := checkKeys("tools[].function", fn, "name", "description", "parameters", "strict"); err != nil {
				return err
			}
			if err := checkTool(nameRE, seen, "tools[].function.name", fn["name"], fn["parameters"]); err != nil {
				return err
			}
		}
		msgs, _ := req["messages"].([]any)
		if prevResp == nil {
			return nil
		}
		// The messages after the last assistant message answer its calls.
		last := -1
		for i, m := range msgs {
			if mm, _ := m.(map[string]any); mm["role"] == "assistant" {
				last = i
			}
		}
		if last < 0 {
			return fmt.Errorf("the assistant's message was not sent back")
		}
		asst := msgs[last].(map[string]any)
		if err := checkKeys("assistant message", asst, "role", "content", "tool_calls", "refusal", "name"); err != nil {
			return err
		}
		calls, _ := asst["tool_calls"].([]any)
		want := map[string]bool{}
		for _, c := range calls {
			cm, _ := c.(map[string]any)
			fn, _ := cm["function"].(map[string]any)
			if _, ok := fn["arguments"].(string); !ok || cm["type"] != "function" {
				return fmt.Errorf("assistant tool_calls entry is not {id, type: function, function: {name, arguments: string}}: %v", c)
			}
			want[cm["id"].(string)] = true
		}
		answered := map[string]bool{}
		for _, m := range msgs[last+1:] {
			mm, _ := m.(map[string]any)
			if err := checkKeys("tool message", mm, "role", "tool_call_id", "content"); err != nil {
				return err
			}
			id, _ := mm["tool_call_id"].(string)
			if mm["role"] != "tool" || !want[id] || answered[id] {
				return fmt.Errorf("message %v does not answer an open tool call exactly once", mm)
			}
			if _, ok := mm["content"].(string); !ok {
				return fmt.Errorf("tool message content is not a string")
			}
			answered[id] = true
		}
		if len(answered) != len(want) {
			return fmt.Errorf("tool calls %v answered %v: each needs a tool message", want, answered)
		}
		return nil
	}
}

// validateAnthropic is what the Messages API checks of the parts the loop
// writes: the tools, that the assistant's content went back as it came,
// and that the next user message opens with one tool_result per tool_use.
func validateAnthropic(nameRE *regexp.Regexp) func(map[string]any, []map[string]any, json.RawMessage) error {
	return func(req map[string]any, _ []map[string]any, prevResp json.RawMessage) error {
		if _, ok := req["model"].(string); !ok {
			return fmt.Errorf("model is required")
		}
		if mt, ok := req["max_tokens"].(float64); !ok || mt < 1 {
			return fmt.Errorf("max_tokens is required")
		}
		tools, _ := req["tools"].([]any)
		if len(tools) == 0 {
			return fmt.Errorf("no tools offered")
		}
		seen := map[string]bool{}
		for _, raw := range tools {
			tool, _ := raw.(map[string]any)
			if err := checkKeys("tools[]", tool, "name", "description", "input_schema", "cache_control", "type"); err != nil {
				return err
			}
			if err := checkTool(nameRE, seen, "tools[].name", tool["name"], tool["input_schema"]); err != nil {
				return err
			}
		}
		if prevResp == nil {
			return nil
		}
		msgs, _ := req["messages"].([]any)
		if len(msgs) < 2 {
			return fmt.Errorf("the conversation was not continued")
		}
		asst, _ := msgs[len(msgs)-2].(map[string]any)
		user, _ := msgs[len(msgs)-1].(map[string]any)
		var prev struct {
			Content []any `json:"content"`
		}
		_ = json.Unmarshal(prevResp, &prev)
		if asst["role"] != "assistant" || fmt.Sprint(asst["content"]) != fmt.Sprint(prev.Content) {
			return fmt.Errorf("the assistant's content blocks were not sent back as they came: %v", asst)
		}
		want := map[string]bool{}
		for _, b := range prev.Content {
			if bm, _ := b.(map[string]any); bm["type"] == "tool_use" {
				want[bm["id"].(string)] = true
			}
		}
		blocks, _ := user["content"].([]any)
		if user["role"] != "user" || len(blocks) < len(want) {
			return fmt.Errorf("the next user message must answer every tool_use: %v", user)
		}
		answered := map[string]bool{}
		for i, b := range blocks {
			bm, _ := b.(map[string]any)
			if bm["type"] != "tool_result" {
				if i < len(want) {
					return fmt.Errorf("tool_result blocks must come first in the user message")
				}
				continue
			}
			if err := checkKeys("tool_result", bm, "type", "tool_use_id", "content", "is_error", "cache_control"); err != nil {
				return err
			}
			id, _ := bm["tool_use_id"].(string)
			if !want[id] || answered[id] {
				return fmt.Errorf("tool_result for %q answers no open tool_use (or twice)", id)
			}
			if _, ok := bm["content"].(string); !ok {
				return fmt.Errorf("tool_result content is not a string")
			}
			if _, ok := bm["is_error"].(bool); !ok {
				return fmt.Errorf("tool_result is_error is not a boolean")
			}
			answered[id] = true
		}
		if len(answered) != len(want) {
			return fmt.Errorf("tool_use ids %v answered %v", want, answered)
		}
		return nil
	}
}

// checkResults holds the results the loop sent back against the fixture's
// expectations, and each call's receipt against the tool it must have
// reached (receipts record the tool's own name).
func checkResults(t *testing.T, g *gw, f fixture, results map[string]string, isError map[string]bool) {
	t.Helper()
	auditor := sdk.New(g.url, g.keys["auditor"])
	if len(results) != len(f.Expect) {
		t.Errorf("%d results sent back, want %d: %v", len(results), len(f.Expect), results)
	}
	for id, want := range f.Expect {
		content, ok := results[id]
		if !ok {
			t.Errorf("no result sent back for %s", id)
			continue
		}
		var out wire.ToolOutput
		if err := json.Unmarshal([]byte(content), &out); err != nil {
			t.Errorf("result for %s is not a ToolOutput: %v: %s", id, err, content)
			continue
		}
		if out.Success != want.Success || (want.ErrorCode != "" && (out.Error == nil || out.Error.Code != want.ErrorCode)) {
			t.Errorf("result for %s: success %v error %+v; want success %v code %q", id, out.Success, out.Error, want.Success, want.ErrorCode)
		}
		if want.Contains != "" && !strings.Contains(content, want.Contains) {
			t.Errorf("result for %s lacks %q: %s", id, want.Contains, content)
		}
		if isError != nil && isError[id] != !want.Success {
			t.Errorf("result for %s: is_error %v, want %v", id, isError[id], !want.Success)
		}
		rid, _ := out.Metadata["receipt_id"].(string)
		if rid == "" {
			t.Errorf("result for %s names no receipt", id)
			continue
		}
		r, err := auditor.Receipt(context.Background(), rid)
		if err != nil {
			t.Errorf("receipt %s: %v", rid, err)
			continue
		}
		if r.Tool != want.Tool || r.CallID != id || r.SessionID != "loop-"+f.API {
			t.Errorf("receipt for %s: tool %q call_id %q session %q; want %q, %q", id, r.Tool, r.CallID, r.SessionID, want.Tool, id)
		}
	}
}

func TestOpenAIToolLoopFixture(t *testing.T) {
	t.Parallel()
	f := loadFixture(t, "openai_chat_completions.json")
	g := startGateway(t)
	model := newFakeModel(t, f, validateOpenAI(regexp.MustCompile(f.ToolNamePattern)))
	c := sdk.New(g.url, g.keys["agent"])
	var initial []map[string]any
	for _, m := range f.Request["messages"].([]any) {
		initial = append(initial, m.(map[string]any))
	}
	create := func(ctx context.Context, messages []map[string]any, tools []wire.FunctionTool) (json.RawMessage, error) {
		return model.post(ctx, f.Path, map[string]any{"model": f.Request["model"], "messages": messages, "tools": tools})
	}
	res, err := c.RunOpenAIToolLoop(context.Background(), create, initial, sdk.WithCallOptions(sdk.WithSessionID("loop-"+f.API)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != f.FinalContent || len(res.Receipts) != len(f.Expect) {
		t.Errorf("loop ended with %q and receipts %v", res.Content, res.Receipts)
	}
	model.mu.Lock()
	reqs := append([]map[string]any(nil), model.requests...)
	model.mu.Unlock()
	if len(reqs) != len(f.Responses) {
		t.Fatalf("%d requests to the model, want %d", len(reqs), len(f.Responses))
	}
	results := map[string]string{}
	for _, m := range reqs[1]["messages"].([]any) {
		if mm := m.(map[string]any); mm["role"] == "tool" {
			results[mm["tool_call_id"].(string)] = mm["content"].(string)
		}
	}
	checkResults(t, g, f, results, nil)
}

func TestAnthropicToolLoopFixture(t *testing.T) {
	t.Parallel()
	f := loadFixture(t, "anthropic_messages.json")
	g := startGateway(t)
	model := newFakeModel(t, f, validateAnthropic(regexp.MustCompile(f.ToolNamePattern)))
	c := sdk.New(g.url, g.keys["agent"])
	var initial []map[string]any
	for _, m := range f.Request["messages"].([]any) {
		initial = append(initial, m.(map[string]any))
	}
	create := func(ctx context.Context, messages []map[string]any, tools []sdk.AnthropicTool) (json.RawMessage, error) {
		return model.post(ctx, f.Path, map[string]any{"model": f.Request["model"], "max_tokens": f.Request["max_tokens"],
			"system": f.Request["system"], "messages": messages, "tools": tools})
	}
	res, err := c.RunAnthropicToolLoop(context.Background(), create, initial, sdk.WithCallOptions(sdk.WithSessionID("loop-"+f.API)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != f.FinalContent || len(res.Receipts) != len(f.Expect) {
		t.Errorf("loop ended with %q and receipts %v", res.Content, res.Receipts)
	}
	model.mu.Lock()
	reqs := append([]map[string]any(nil), model.requests...)
	model.mu.Unlock()
	if len(reqs) != len(f.Responses) {
		t.Fatalf("%d requests to the model, want %d", len(reqs), len(f.Responses))
	}
	msgs := reqs[1]["messages"].([]any)
	results, isError := map[string]string{}, map[string]bool{}
	for _, b := range msgs[len(msgs)-1].(map[string]any)["content"].([]any) {
		bm := b.(map[string]any)
		results[bm["tool_use_id"].(string)] = bm["content"].(string)
		isError[bm["tool_use_id"].(string)] = bm["is_error"].(bool)
	}
	checkResults(t, g, f, results, isError)
}

// TestToolDefinitionsPublishedShape: every tool the gateway offers, in
// both APIs' shapes, passes the APIs' published name pattern and schema
// rule, for a caller granted the fs tools (whose own names have dots).
func TestToolDefinitionsPublishedShape(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	c := sdk.New(g.url, g.keys["agent"])
	list, err := c.ToolList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	if len(list.Tools) < 5 {
		t.Fatalf("agent sees %d tools, want Exec and the fs tools", len(list.Tools))
	}
	for _, tool := range list.Tools {
		own, ok := list.Names[tool.Function.Name]
		if !re.MatchString(tool.Function.Name) || !ok || wire.ModelSafeName(own) != tool.Function.Name {
			t.Errorf("tool %q (names: %q): not a model-safe name mapped back", tool.Function.Name, own)
		}
	}
	for _, at := range sdk.AnthropicTools(list.Tools) {
		var schema any
		if err := json.Unmarshal(at.InputSchema, &schema); err != nil || jsonSchemaObject(schema) != nil || !re.MatchString(at.Name) {
			t.Errorf("Anthropic tool %q: bad name or input_schema %s", at.Name, at.InputSchema)
		}
	}
}
