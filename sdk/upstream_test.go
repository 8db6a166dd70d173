package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/sdk"
	"github.com/portcullis/portcullis/wire"
)

// startEverything runs @modelcontextprotocol/server-everything (npm, not
// ours) in its Streamable HTTP mode on a free loopback port and answers its
// MCP URL; it skips (fails with PORTCULLIS_REQUIRE_MCP_SERVERS=1) when the
// server is not installed (scripts/test.sh installs it into .tools/mcp).
func startEverything(t *testing.T) string {
	t.Helper()
	modules := os.Getenv("PORTCULLIS_MCP_SERVERS")
	if modules == "" {
		modules = filepath.Join("..", ".tools", "mcp", "node_modules")
	}
	server := filepath.Join(modules, "@modelcontextprotocol", "server-everything", "dist", "index.js")
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(server); err != nil || serr != nil {
		if os.Getenv("PORTCULLIS_REQUIRE_MCP_SERVERS") == "1" {
			t.Fatalf("server-everything required (PORTCULLIS_REQUIRE_MCP_SERVERS=1): node %v, %s: %v", err, server, serr)
		}
		t.Skipf("server-everything or node missing (%s); scripts/test.sh installs it", server)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(node, server, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
			break
		}
		if i == 300 {
			t.Fatalf("server-everything not listening on %d", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}

// TestUpstreamTools: the Go SDK lists and calls an upstream MCP server's
// tools (server-everything, fronted by the gateway as "web") like any
// other: the granted one is listed with its model-safe name and the
// server's inputSchema, called by either name with a receipt, and the
// OpenAI tool-call helper dispatches it; the ungranted one is neither
// listed nor run.
func TestUpstreamTools(t *testing.T) {
	t.Parallel()
	url := startEverything(t)
	g := startGatewayWith(t, gwOptions{agentTools: []string{"web.echo"},
		extraConfig: fmt.Sprintf("upstreams:\n  - name: web\n    url: %q\n    allow_networks: [\"127.0.0.1/32\"]\n", url)})
	ctx := context.Background()
	agent := sdk.New(g.url, g.keys["agent"])
	auditor := sdk.New(g.url, g.keys["auditor"])

	var list *wire.ToolList
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if list, err = agent.ToolList(ctx); err != nil {
			t.Fatal(err)
		}
		if list.Names["web__echo"] == "web.echo" || time.Now().After(deadline) {
			break
		}
	}
	if list.Names["web__echo"] != "web.echo" {
		t.Fatalf("web.echo not listed by its model-safe name: %v", list.Names)
	}
	var echo *wire.FunctionSpec
	for i, tl := range list.Tools {
		if strings.Contains(tl.Function.Name, "get") && strings.Contains(tl.Function.Name, "env") {
			t.Fatalf("ungranted upstream tool listed: %s", tl.Function.Name)
		}
		if tl.Function.Name == "web__echo" {
			echo = &list.Tools[i].Function
		}
	}
	if echo == nil || echo.Description == "" || !strings.Contains(string(echo.Parameters), `"message"`) {
		t.Fatalf("web__echo without the server's description and inputSchema: %+v", echo)
	}

	for _, name := range []string{"web.echo", "web__echo"} {
		resp, err := agent.Call(ctx, name, map[string]any{"message": "go sdk via " + name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var data struct {
			Content []struct{ Text string } `json:"content"`
			IsError bool                    `json:"isError"`
		}
		raw, _ := json.Marshal(resp.Output.Data)
		if err := json.Unmarshal(raw, &data); err != nil || data.IsError || len(data.Content) == 0 ||
			!strings.Contains(data.Content[0].Text, "go sdk via "+name) || !resp.Output.Success {
			t.Fatalf("%s: %v %+v", name, err, resp.Output)
		}
		rc, err := auditor.Receipt(ctx, resp.ReceiptID)
		if err != nil || rc.Tool != "web.echo" || rc.Decision != "allow" || rc.Outcome == nil || rc.Outcome.Status != wire.StatusSucceeded {
			t.Fatalf("%s receipt: %v %+v", name, err, rc)
		}
	}

	msg, err := agent.HandleToolCall(ctx, "call_1", "web__echo", `{"message":"from the model"}`)
	if err != nil || msg["tool_call_id"] != "call_1" || !strings.Contains(fmt.Sprint(msg["content"]), "from the model") {
		t.Fatalf("HandleToolCall web__echo: %v %v", err, msg)
	}

	if _, err := agent.Call(ctx, "web.get-env", map[string]any{}); !sdk.IsCode(err, wire.CodePermissionDenied) {
		t.Fatalf("ungranted upstream tool: want permission_denied, got %v", err)
	}
	if _, err := agent.Call(ctx, "web.echo", map[string]any{"message": 5}); !sdk.IsCode(err, wire.CodeInvalidInput) {
		t.Fatalf("schema-invalid input: want invalid_input, got %v", err)
	}
}
