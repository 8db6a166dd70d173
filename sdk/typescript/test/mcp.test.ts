// The MCP endpoint, driven by the official MCP TypeScript SDK client over
// Streamable HTTP: a real third-party client, not our own encoder.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { Client as McpClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";

import { Client } from "../src/index.js";
import { REPO, startGateway, type Gateway } from "./gateway.js";

let gw: Gateway;
before(async () => { gw = await startGateway(); });
after(() => gw.stop());

async function connect(key: string): Promise<{ client: McpClient; transport: StreamableHTTPClientTransport }> {
  const transport = new StreamableHTTPClientTransport(new URL(gw.url + "/mcp"), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  const client = new McpClient({ name: "portcullis-mcp-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

interface TextContent { type: string; text: string }

test("official MCP client: initialize, list, call allowed and denied tools", async () => {
  const { client, transport } = await connect(gw.keys.agent);
  assert.ok(transport.sessionId, "no Mcp-Session-Id negotiated");
  assert.equal(client.getServerVersion()?.name, "portcullis");
  assert.ok(client.getServerCapabilities()?.tools);

  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name), ["Exec", "fs.list", "fs.read", "fs.search", "fs.write"]);
  const exec = tools.find((t) => t.name === "Exec")!;
  assert.equal(exec.inputSchema.type, "object");
  assert.ok(exec.inputSchema.properties && "argv" in exec.inputSchema.properties);
  // Behaviour hints, and an outputSchema the client validates each
  // structuredContent against (callTool below would throw on a mismatch).
  assert.equal(exec.annotations?.destructiveHint, true);
  assert.equal(tools.find((t) => t.name === "fs.read")!.annotations?.readOnlyHint, true);
  assert.equal(tools.find((t) => t.name === "fs.write")!.annotations?.readOnlyHint, false);
  assert.equal(exec.outputSchema?.type, "object");
  // Same tools, same schemas as GET /v1/tools.
  const rest = await new Client(gw.url, gw.keys.agent).tools();
  assert.deepEqual(tools.map((t) => t.inputSchema), rest.map((t) => t.function.parameters));

  const ok = await client.callTool({ name: "Exec", arguments: { argv: ["/bin/echo", "via mcp"] } });
  assert.equal(ok.isError, false);
  const out = JSON.parse((ok.content as TextContent[])[0]!.text) as { success: boolean; data: { stdout: string } };
  assert.equal(out.success, true);
  assert.equal(out.data.stdout, "via mcp\n");
  const rid = (ok._meta as Record<string, unknown>)["portcullis/receipt_id"] as string;
  const auditor = new Client(gw.url, gw.keys.auditor);
  const rc = await auditor.receipt(rid);
  assert.deepEqual([rc.principal_id, rc.session_id, rc.decision, rc.outcome?.status],
    ["agent", transport.sessionId, "allow", "succeeded"]);

  // Outside the grants: refused by enforcement, reported as a tool error.
  const outside = await client.callTool({ name: "fs.read", arguments: { path: "/etc/hostname" } });
  assert.equal(outside.isError, true);

  await transport.terminateSession();
  await client.close();
});

test("official MCP client: a principal without grants is denied, and recorded", async () => {
  const { client, transport } = await connect(gw.keys["agent-noexec"]);
  assert.deepEqual((await client.listTools()).tools, []);
  const res = await client.callTool({ name: "Exec", arguments: { argv: ["/bin/echo", "no"] } });
  assert.equal(res.isError, true);
  const out = JSON.parse((res.content as TextContent[])[0]!.text) as { error: { code: string } };
  assert.equal(out.error.code, "permission_denied");
  const rid = (res._meta as Record<string, unknown>)["portcullis/receipt_id"] as string;
  const rc = await new Client(gw.url, gw.keys.auditor).receipt(rid);
  assert.deepEqual([rc.principal_id, rc.decision], ["agent-noexec", "deny"]);
  await transport.terminateSession();
  await client.close();
});

test("official MCP client: no key, no session", async () => {
  const transport = new StreamableHTTPClientTransport(new URL(gw.url + "/mcp"));
  const client = new McpClient({ name: "anon", version: "1.0.0" });
  await assert.rejects(client.connect(transport));
});

// An upstream MCP server the gateway fronts: server-everything (npm, not
// ours) in its Streamable HTTP mode on loopback. The official client sees
// its tools through the gateway, governed: only the granted one is listed.
test("official MCP client: lists and calls an upstream server's tools through the gateway", async (t) => {
  const modules = process.env["PORTCULLIS_MCP_SERVERS"] ?? join(REPO, ".tools", "mcp", "node_modules");
  const server = join(modules, "@modelcontextprotocol", "server-everything", "dist", "index.js");
  if (!existsSync(server)) {
    if (process.env["PORTCULLIS_REQUIRE_MCP_SERVERS"] === "1") assert.fail(`${server} missing (PORTCULLIS_REQUIRE_MCP_SERVERS=1)`);
    t.skip(`${server} missing (scripts/test.sh installs it)`);
    return;
  }
  const port = await new Promise<number>((done) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => done(p));
    });
  });
  const child = spawn(process.execPath, [server, "streamableHttp"], { env: { ...process.env, PORT: String(port) }, stdio: "ignore" });
  t.after(() => { child.kill("SIGKILL"); });
  const up = await startGateway({
    agentTools: ["web.echo"],
    extraConfig: ["upstreams:", "  - name: web", `    url: "http://127.0.0.1:${port}/mcp"`, '    allow_networks: ["127.0.0.1/32"]'],
  });
  t.after(() => up.stop());
  const transport = new StreamableHTTPClientTransport(new URL(up.url + "/mcp"), {
    requestInit: { headers: { Authorization: `Bearer ${up.keys.agent}` } },
  });
  const client = new McpClient({ name: "portcullis-mcp-upstream-test", version: "1.0.0" });
  await client.connect(transport);
  let names: string[] = [];
  for (let i = 0; i < 200 && !names.includes("web.echo"); i++) {
    names = (await client.listTools()).tools.map((tl) => tl.name);
    if (!names.includes("web.echo")) await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(names.includes("web.echo"), `web.echo not listed: ${names.join(", ")}`);
  assert.ok(!names.includes("web.get-env"), "an ungranted upstream tool is listed");
  const res = await client.callTool({ name: "web.echo", arguments: { message: "through the gateway" } });
  assert.equal(res.isError, false);
  const out = JSON.parse((res.content as TextContent[])[0]!.text) as { success: boolean; data: { content: TextContent[] } };
  assert.equal(out.success, true);
  assert.match(out.data.content[0]!.text, /through the gateway/);
  const rid = (res._meta as Record<string, unknown>)["portcullis/receipt_id"] as string;
  const rc = await new Client(up.url, up.keys.auditor).receipt(rid);
  assert.deepEqual([rc.tool, rc.decision, rc.outcome?.status], ["web.echo", "allow", "succeeded"]);
  const denied = await client.callTool({ name: "web.get-env", arguments: {} });
  assert.equal(denied.isError, true);
  await transport.terminateSession();
  await client.close();
});

test("official MCP client: a policy reload that grants a tool pushes tools/list_changed", { timeout: 60_000 }, async () => {
  const { client, transport } = await connect(gw.keys["agent-noexec"]);
  assert.deepEqual((await client.listTools()).tools, []);
  const changed = new Promise<void>((resolve) => {
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => resolve());
  });
  const path = join(gw.bundle, "data.json");
  const before = readFileSync(path, "utf8");
  const reload = async () => {
    const res = await fetch(gw.url + "/v1/policy/reload", { method: "POST", headers: { Authorization: `Bearer ${gw.keys.admin}` } });
    assert.equal(res.status, 200, await res.text());
  };
  const data = JSON.parse(before) as { e2e: { principals: Record<string, { tools: string[] }> } };
  data.e2e.principals["agent-noexec"]!.tools = ["Exec"];
  writeFileSync(path, JSON.stringify(data));
  try {
    await reload();
    await changed; // the server sends it on the client's GET stream, whenever that opens
    assert.deepEqual((await client.listTools()).tools.map((t) => t.name), ["Exec"]);
  } finally {
    writeFileSync(path, before);
    await reload();
    await transport.terminateSession();
    await client.close();
  }
});
