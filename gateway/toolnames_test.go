package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// namedTool is a tool with any name that counts its runs.
type namedTool struct {
	name string
	runs atomic.Int32
}

func (t *namedTool) Name() string                { return t.name }
func (t *namedTool) Description() string         { return "the " + t.name + " tool" }
func (t *namedTool) Parameters() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (t *namedTool) Prepare(context.Context, json.RawMessage) (tools.Call, error) {
	return &namedCall{t: t}, nil
}

type namedCall struct{ t *namedTool }

func (c *namedCall) Args() map[string]any     { return map[string]any{} }
func (c *namedCall) Resolved() map[string]any { return map[string]any{} }
func (c *namedCall) Enforce(context.Context, wire.Decision) (wire.Scope, error) {
	return wire.Scope{Backend: "test"}, nil
}
func (c *namedCall) Run(context.Context, wire.Scope) tools.Result {
	c.t.runs.Add(1)
	return tools.Result{Output: wire.ToolOutput{Success: true, Data: map[string]any{"tool": c.t.name}, Metadata: map[string]any{}},
		Status: wire.StatusSucceeded, Backend: "test"}
}

// grantPolicy allows exactly the tools in grant and records the tool
// names the policy was asked about.
type grantPolicy struct {
	grant map[string]bool
	mu    sync.Mutex
	asked []string
}

func (g *grantPolicy) Decide(_ context.Context, in wire.PolicyInput) (wire.Decision, error) {
	g.mu.Lock()
	g.asked = append(g.asked, in.Tool)
	g.mu.Unlock()
	if g.grant[in.Tool] {
		return wire.Decision{Allow: true, PolicyRevision: "rev-1"}, nil
	}
	return wire.Decision{Allow: false, Reasons: []string{"not granted"}, PolicyRevision: "rev-1"}, nil
}
func (*grantPolicy) Ready() bool { return true }

// The served tools: the built-in names and two upstream-shaped ones.
var namedToolNames = []string{"Exec", "code.run", "fs.apply_patch", "fs.list", "fs.read", "fs.search", "fs.write", "http.get",
	"read_tool_result", "files.read_text_file", "github.get.issue"}

func namedServer(t *testing.T, names []string, grant ...string) (*httptest.Server, map[string]*namedTool, *grantPolicy, *memEvidence) {
	t.Helper()
	byName := map[string]*namedTool{}
	var list []tools.Tool
	for _, n := range names {
		nt := &namedTool{name: n}
		byName[n] = nt
		list = append(list, nt)
	}
	pol := &grantPolicy{grant: map[string]bool{}}
	for _, g := range grant {
		pol.grant[g] = true
	}
	ev := &memEvidence{}
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: pol, Evidence: ev, Receipts: ev, Tools: list,
		InstanceID: "test", MaxBodyBytes: 1 << 16, OpenAPI: OpenAPIDocument,
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, byName, pol, ev
}

func getTools(t *testing.T, base string) (wire.ToolList, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/tools", nil)
	req.Header.Set("Authorization", "Bearer "+agentKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/tools: %d %s", resp.StatusCode, b)
	}
	var out wire.ToolList
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out, string(b)
}

// The published function-name pattern of the OpenAI and Anthropic APIs.
var publishedNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// TestToolListModelSafe: every listed function name is one the model APIs
// accept, distinct, and mapped back to its tool; MCP keeps the tools' own
// names.
func TestToolListModelSafe(t *testing.T) {
	t.Parallel()
	ts, _, _, _ := namedServer(t, namedToolNames, namedToolNames...)
	list, _ := getTools(t, ts.URL)
	if len(list.Tools) != len(namedToolNames) || len(list.Names) != len(namedToolNames) {
		t.Fatalf("listed %d tools, %d names; want %d: %+v", len(list.Tools), len(list.Names), len(namedToolNames), list)
	}
	seen := map[string]bool{}
	for _, ft := range list.Tools {
		n := ft.Function.Name
		if !publishedNameRE.MatchString(n) {
			t.Errorf("function name %q does not match the model APIs' pattern", n)
		}
		own, ok := list.Names[n]
		if !ok || wire.ModelSafeName(own) != n || seen[own] {
			t.Errorf("names[%q] = %q, %v", n, own, ok)
		}
		seen[own] = true
	}
	if list.Names["fs_read"] != "fs.read" || list.Names["Exec"] != "Exec" || list.Names["files__read_text_file"] != "files.read_text_file" {
		t.Errorf("names = %v", list.Names)
	}

	sess := mcpInit(t, ts.URL, agentKey)
	a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sess, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, nil)
	var res struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(a.msg.Result, &res); err != nil {
		t.Fatal(err)
	}
	var mcpNames []string
	for _, tl := range res.Tools {
		mcpNames = append(mcpNames, tl.Name)
	}
	want := slices.Sorted(slices.Values(namedToolNames))
	if got, want := strings.Join(mcpNames, ","), strings.Join(want, ","); got != want {
		t.Errorf("MCP tools/list = %s, want the tools' own names %s", got, want)
	}
}

// TestEitherNameForm: the model-safe name and the tool's own name reach
// the same tool on every endpoint that takes one, and the policy and the
// receipt see the tool's own name.
func TestEitherNameForm(t *testing.T) {
	t.Parallel()
	ts, tools, pol, ev := namedServer(t, namedToolNames, namedToolNames...)
	for _, tc := range []struct{ sent, own string }{
		{"fs_read", "fs.read"}, {"fs.read", "fs.read"}, {"code_run", "code.run"}, {"files__read_text_file", "files.read_text_file"},
		{wire.ModelSafeName("github.get.issue"), "github.get.issue"}, {"Exec", "Exec"},
	} {
		before := tools[tc.own].runs.Load()
		status, resp := post(t, ts.URL, agentKey, `{"tool":`+jsonString(tc.sent)+`,"input":{}}`)
		if status != http.StatusOK || !resp.Output.Success {
			t.Errorf("call %q: %d %+v", tc.sent, status, resp.Output.Error)
			continue
		}
		if tools[tc.own].runs.Load() != before+1 {
			t.Errorf("call %q did not run %s", tc.sent, tc.own)
		}
		ev.mu.Lock()
		last := ev.events[len(ev.events)-2] // decision, then outcome
		ev.mu.Unlock()
		if last.Tool != tc.own {
			t.Errorf("call %q recorded tool %q, want %q", tc.sent, last.Tool, tc.own)
		}
		pol.mu.Lock()
		asked := pol.asked[len(pol.asked)-1]
		pol.mu.Unlock()
		if asked != tc.own {
			t.Errorf("call %q asked the policy about %q, want %q", tc.sent, asked, tc.own)
		}

		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/decisions", strings.NewReader(`{"tool":`+jsonString(tc.sent)+`,"input":{}}`))
		req.Header.Set("Authorization", "Bearer "+agentKey)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"allow":true`)) {
			t.Errorf("dry run %q: %d %s", tc.sent, r.StatusCode, b)
		}
	}

	sess := mcpInit(t, ts.URL, agentKey)
	before := tools["fs.read"].runs.Load()
	a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sess, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fs_read","arguments":{}}}`, nil)
	if a.msg.Error != nil || tools["fs.read"].runs.Load() != before+1 {
		t.Errorf("MCP tools/call fs_read: %s", a.raw)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestUnknownToolNamesNothing: a caller granted only fs.read who calls a
// tool that does not exist learns nothing of the other tools, on REST
// (tool call and dry run) and MCP. The old message listed every tool.
func TestUnknownToolNamesNothing(t *testing.T) {
	t.Parallel()
	ts, _, _, _ := namedServer(t, namedToolNames, "fs.read")
	list, _ := getTools(t, ts.URL)
	if len(list.Tools) != 1 || list.Names["fs_read"] != "fs.read" {
		t.Fatalf("caller granted fs.read sees %+v", list)
	}
	var answers []string
	for _, name := range []string{"nope", "fs.reed", "fs_nope", "Exe", "files__nope"} {
		for _, path := range []string{"/v1/tool-calls", "/v1/decisions"} {
			req, _ := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(`{"tool":`+jsonString(name)+`,"input":{}}`))
			req.Header.Set("Authorization", "Bearer "+agentKey)
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != http.StatusNotFound || !bytes.Contains(b, []byte(`"unknown_tool"`)) {
				t.Errorf("%s %q: %d %s, want 404 unknown_tool", path, name, r.StatusCode, b)
			}
			answers = append(answers, path+" "+string(b))
		}
		sess := mcpInit(t, ts.URL, agentKey)
		a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sess, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":`+jsonString(name)+`,"arguments":{}}}`, nil)
		if a.msg.Error == nil {
			t.Errorf("MCP tools/call %q: %s, want an error", name, a.raw)
		}
		answers = append(answers, "mcp "+a.raw)
	}
	for _, ans := range answers {
		for _, other := range namedToolNames {
			if other == "fs.read" {
				continue
			}
			for _, form := range []string{other, wire.ModelSafeName(other)} {
				if strings.Contains(ans, `"`+form) || strings.Contains(ans, " "+form) || strings.Contains(ans, form+",") {
					t.Errorf("an unknown-tool answer names %q, which the caller may not call:\n%s", form, ans)
				}
			}
		}
	}
}

// TestToolNameConflict: a tool literally named fs_read beside fs.read
// keeps its own name; fs.read, whose model-safe name it would shadow, is
// not offered to models (it stays callable as fs.read), so no listed name
// reaches a tool other than the one listed.
func TestToolNameConflict(t *testing.T) {
	t.Parallel()
	ts, tools, _, _ := namedServer(t, []string{"fs.read", "fs_read"}, "fs.read", "fs_read")
	list, _ := getTools(t, ts.URL)
	for safe, own := range list.Names {
		if own == "fs.read" {
			t.Errorf("fs.read listed as %q although fs_read is another tool", safe)
		}
	}
	if len(list.Tools) != 1 || list.Names[wire.ModelSafeName("fs_read")] != "fs_read" {
		t.Errorf("want only fs_read (as %s): %+v", wire.ModelSafeName("fs_read"), list)
	}
	for _, tc := range []struct{ sent, runs string }{{"fs_read", "fs_read"}, {"fs.read", "fs.read"}, {wire.ModelSafeName("fs_read"), "fs_read"}} {
		before := tools[tc.runs].runs.Load()
		if status, resp := post(t, ts.URL, agentKey, `{"tool":`+jsonString(tc.sent)+`,"input":{}}`); status != http.StatusOK {
			t.Errorf("call %q: %d %+v", tc.sent, status, resp.Output.Error)
		}
		if tools[tc.runs].runs.Load() != before+1 {
			t.Errorf("call %q did not run %s", tc.sent, tc.runs)
		}
	}
}

// TestNewToolNamesConflicts: a tool whose model-safe name is another
// tool's own name gets none; the others keep theirs.
func TestNewToolNamesConflicts(t *testing.T) {
	t.Parallel()
	tn := newToolNames([]string{"fs.read", "fs_read", "Exec"}, slog.New(slog.DiscardHandler))
	if _, ok := tn.safe["fs.read"]; ok {
		t.Errorf("fs.read got a model-safe name shadowed by tool fs_read: %v", tn.safe)
	}
	if tn.tools["Exec"] != "Exec" || tn.tools[wire.ModelSafeName("fs_read")] != "fs_read" {
		t.Errorf("tools = %v", tn.tools)
	}
}

// filterRecorder is a receipt reader that remembers the filters it was
// asked for.
type filterRecorder struct {
	*memEvidence
	mu    sync.Mutex
	tools []string
}

func (f *filterRecorder) Receipts(ctx context.Context, fl evidence.Filter) (wire.ReceiptList, error) {
	f.mu.Lock()
	f.tools = append(f.tools, fl.Tool)
	f.mu.Unlock()
	return wire.ReceiptList{}, nil
}

// TestReceiptFilterEitherName: GET /v1/receipts?tool= and the export take
// either name form of a served tool and query by its own name (receipts
// record that); any other name is queried as sent.
func TestReceiptFilterEitherName(t *testing.T) {
	t.Parallel()
	rec := &filterRecorder{memEvidence: &memEvidence{}}
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(auditorKey)), Principal: wire.Principal{ID: "auditor-1", Roles: []string{wire.RoleAuditor}}}},
		Policy: &grantPolicy{}, Evidence: rec.memEvidence, Receipts: rec, Tools: []tools.Tool{&namedTool{name: "fs.read"}},
		InstanceID: "test", OpenAPI: OpenAPIDocument,
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	for _, path := range []string{"/v1/receipts?tool=fs_read", "/v1/receipts?tool=fs.read", "/v1/receipts?tool=fs_reed",
		"/v1/receipts/export?format=jsonl&tool=fs_read"} {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+auditorKey)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", path, r.StatusCode)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got := strings.Join(rec.tools, ","); got != "fs.read,fs.read,fs_reed,fs.read" {
		t.Errorf("filters queried %s, want fs.read,fs.read,fs_reed,fs.read", got)
	}
}
