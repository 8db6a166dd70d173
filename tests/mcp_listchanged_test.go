package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPToolsListChangedOnBundleReload: a policy bundle reload that grants
// a principal a tool pushes notifications/tools/list_changed on its MCP
// session's GET stream, and the official Go SDK client then lists the new
// tool. Another principal's session, whose tools did not change, is told
// nothing before it.
func TestMCPToolsListChangedOnBundleReload(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	g := d.start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a bound, not an assertion
	defer cancel()

	connect := func(key string) *mcp.ClientSession {
		hc := &http.Client{Transport: &bearer{key: key, next: http.DefaultTransport}}
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
		// The stream is read below, by hand, to know when it is open.
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.baseURL + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	names := func(cs *mcp.ClientSession) []string {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		var out []string
		for _, tool := range res.Tools {
			out = append(out, tool.Name)
		}
		return out
	}
	noexec := connect(d.keys[agentNoExec])
	if got := names(noexec); len(got) != 0 {
		t.Fatalf("agent-noexec lists %v before the reload", got)
	}
	full := connect(d.keys[agentFull])
	fullBefore := names(full)

	events := func(key, session string) <-chan string {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.baseURL+"/mcp", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		resp, err := (&http.Client{}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("GET stream: %d %v", resp.StatusCode, resp.Header)
		}
		sc := bufio.NewScanner(resp.Body)
		// The server's first line (": ok") is written once the stream is
		// registered: anything sent after it arrives here.
		if !sc.Scan() {
			t.Fatalf("GET stream closed: %v", sc.Err())
		}
		ch := make(chan string, 16)
		go func() {
			defer resp.Body.Close()
			defer close(ch)
			for sc.Scan() {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					ch <- data
				}
			}
		}()
		return ch
	}
	noexecEvents := events(d.keys[agentNoExec], noexec.ID())
	fullEvents := events(d.keys[agentFull], full.ID())

	// The new bundle grants agent-noexec Exec; agent-full's grants stay.
	path := filepath.Join(d.bundleDir, "data.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]map[string]map[string]map[string]any
	if err := json.Unmarshal(raw, &data); err != nil {
		t.Fatal(err)
	}
	data["e2e"]["principals"][agentNoExec]["tools"] = []string{"Exec"}
	writeJSON(t, path, data)
	if r := g.do(t, http.MethodPost, "/v1/policy/reload", d.keys[admin], nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"activated"`) {
		t.Fatalf("reload: %s", r)
	}

	select {
	case ev := <-noexecEvents:
		if !strings.Contains(ev, `"method":"notifications/tools/list_changed"`) {
			t.Fatalf("first event on agent-noexec's stream = %s, want notifications/tools/list_changed", ev)
		}
	case <-ctx.Done():
		t.Fatal("no notifications/tools/list_changed after the reload")
	}
	if got := names(noexec); !slices.Contains(got, "Exec") {
		t.Errorf("agent-noexec lists %v after the reload, want Exec", got)
	}
	// agent-full's list is unchanged, and its stream carried nothing.
	if got := names(full); !slices.Equal(got, fullBefore) {
		t.Errorf("agent-full lists %v after the reload, before %v", got, fullBefore)
	}
	select {
	case ev := <-fullEvents:
		t.Errorf("agent-full's stream got %s, though its tools did not change", ev)
	default:
	}
}
