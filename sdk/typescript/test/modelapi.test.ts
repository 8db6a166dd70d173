// The tool loops against the model APIs' recorded shapes
// (sdk/testdata/modelapi): a fake model server on loopback replays a
// fixture's responses and refuses requests the real API would refuse; the
// tool calls run against a real gateway; the test then checks the results
// the loop sent back.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import {
  Client, anthropicTools, runAnthropicToolLoop, runOpenAIToolLoop,
  type AnthropicMessageLike, type AnthropicMessageParam, type ChatCompletionLike, type ChatMessage, type ToolOutput,
} from "../src/index.js";
import { REPO, startGateway, type Gateway } from "./gateway.js";

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

interface Fixture {
  api: string;
  path: string;
  tool_name_pattern: string;
  request: Json;
  responses: Json[];
  expect: Record<string, { tool: string; success: boolean; error_code?: string; contains?: string }>;
  final_content: string;
}

function load(name: string): Fixture {
  return JSON.parse(readFileSync(join(REPO, "sdk", "testdata", "modelapi", name), "utf8")) as Fixture;
}

function schemaObject(v: unknown): void {
  const s = v as Json;
  if (!s || typeof s !== "object" || s["type"] !== "object") throw new Error(`schema is not a JSON Schema of type object: ${JSON.stringify(v)}`);
  if ("properties" in s && (typeof s["properties"] !== "object" || Array.isArray(s["properties"]))) throw new Error("schema properties is not an object");
}

function keys(what: string, obj: Json, allowed: string[]): void {
  for (const k of Object.keys(obj)) if (!allowed.includes(k)) throw new Error(`${what}: unknown field ${k}`);
}

/** What the chat-completions API checks of the parts the loop writes. */
function validateOpenAI(nameRE: RegExp, req: Json, prev: Json | undefined): void {
  if (typeof req["model"] !== "string") throw new Error("model is required");
  const tools = (req["tools"] ?? []) as Json[];
  if (tools.length === 0) throw new Error("no tools offered");
  const seen = new Set<string>();
  for (const t of tools) {
    const fn = t["function"] as Json | undefined;
    if (t["type"] !== "function" || !fn) throw new Error(`tool is not {type: function, function}: ${JSON.stringify(t)}`);
    keys("tools[].function", fn, ["name", "description", "parameters", "strict"]);
    if (!nameRE.test(fn["name"])) throw new Error(`tools[].function.name ${JSON.stringify(fn["name"])} does not match ${nameRE}`);
    if (seen.has(fn["name"])) throw new Error(`duplicate tool name ${fn["name"]}`);
    seen.add(fn["name"]);
    schemaObject(fn["parameters"]);
  }
  if (!prev) return;
  const msgs = req["messages"] as Json[];
  const last = msgs.map((m) => m["role"]).lastIndexOf("assistant");
  if (last < 0) throw new Error("the assistant's message was not sent back");
  keys("assistant message", msgs[last]!, ["role", "content", "tool_calls", "refusal", "name"]);
  const want = new Set<string>();
  for (const c of (msgs[last]!["tool_calls"] ?? []) as Json[]) {
    if (c["type"] !== "function" || typeof c["function"]?.["arguments"] !== "string") throw new Error("assistant tool_calls entry is malformed");
    want.add(c["id"]);
  }
  const answered = new Set<string>();
  for (const m of msgs.slice(last + 1)) {
    keys("tool message", m, ["role", "tool_call_id", "content"]);
    if (m["role"] !== "tool" || !want.has(m["tool_call_id"]) || answered.has(m["tool_call_id"])) throw new Error(`message ${JSON.stringify(m)} does not answer an open tool call exactly once`);
    if (typeof m["content"] !== "string") throw new Error("tool message content is not a string");
    answered.add(m["tool_call_id"]);
  }
  if (answered.size !== want.size) throw new Error(`tool calls ${[...want]} answered ${[...answered]}`);
}

/** What the Messages API checks of the parts the loop writes. */
function validateAnthropic(nameRE: RegExp, req: Json, prev: Json | undefined): void {
  if (typeof req["model"] !== "string") throw new Error("model is required");
  if (!Number.isInteger(req["max_tokens"]) || req["max_tokens"] < 1) throw new Error("max_tokens is required");
  const tools = (req["tools"] ?? []) as Json[];
  if (tools.length === 0) throw new Error("no tools offered");
  const seen = new Set<string>();
  for (const t of tools) {
    keys("tools[]", t, ["name", "description", "input_schema", "cache_control", "type"]);
    if (!nameRE.test(t["name"])) throw new Error(`tools[].name ${JSON.stringify(t["name"])} does not match ${nameRE}`);
    if (seen.has(t["name"])) throw new Error(`duplicate tool name ${t["name"]}`);
    seen.add(t["name"]);
    schemaObject(t["input_schema"]);
  }
  if (!prev) return;
  const msgs = req["messages"] as Json[];
  const asst = msgs[msgs.length - 2]!;
  const user = msgs[msgs.length - 1]!;
  if (asst["role"] !== "assistant" || JSON.stringify(asst["content"]) !== JSON.stringify(prev["content"])) {
    throw new Error("the assistant's content blocks were not sent back as they came");
  }
  const want = new Set((prev["content"] as Json[]).filter((b) => b["type"] === "tool_use").map((b) => b["id"] as string));
  const blocks = user["content"] as Json[];
  if (user["role"] !== "user" || !Array.isArray(blocks)) throw new Error("the next user message must answer every tool_use");
  const answered = new Set<string>();
  blocks.forEach((b, i) => {
    if (b["type"] !== "tool_result") {
      if (i < want.size) throw new Error("tool_result blocks must come first in the user message");
      return;
    }
    keys("tool_result", b, ["type", "tool_use_id", "content", "is_error", "cache_control"]);
    if (!want.has(b["tool_use_id"]) || answered.has(b["tool_use_id"])) throw new Error(`tool_result for ${b["tool_use_id"]} answers no open tool_use (or twice)`);
    if (typeof b["content"] !== "string" || typeof b["is_error"] !== "boolean") throw new Error("tool_result content must be a string and is_error a boolean");
    answered.add(b["tool_use_id"]);
  });
  if (answered.size !== want.size) throw new Error(`tool_use ids ${[...want]} answered ${[...answered]}`);
}

/** Replays a fixture's responses; refuses (400) what the validator rejects. */
class FakeModel {
  readonly requests: Json[] = [];
  readonly errors: string[] = [];
  private server: Server;
  url = "";
  constructor(private f: Fixture, validate: (re: RegExp, req: Json, prev: Json | undefined) => void) {
    const nameRE = new RegExp(f.tool_name_pattern);
    this.server = createServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        const n = this.requests.length;
        try {
          const parsed = JSON.parse(body) as Json;
          if (req.url !== f.path) throw new Error(`path ${req.url}, want ${f.path}`);
          if (n >= f.responses.length) throw new Error(`the fixture has only ${f.responses.length} responses`);
          validate(nameRE, parsed, n > 0 ? f.responses[n - 1] : undefined);
          this.requests.push(parsed);
          res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(f.responses[n]));
        } catch (e) {
          this.errors.push(`request ${n + 1}: ${(e as Error).message}`);
          res.writeHead(400, { "content-type": "application/json" })
            .end(JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: (e as Error).message } }));
        }
      });
    });
  }
  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    const a = this.server.address();
    this.url = `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}`;
  }
  async post(body: unknown): Promise<Json> {
    const r = await fetch(this.url + this.f.path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const out = (await r.json()) as Json;
    if (!r.ok) throw new Error(`model API: HTTP ${r.status}: ${JSON.stringify(out)}`);
    return out;
  }
  close(): void {
    this.server.close();
  }
}

describe("tool loops against recorded model API shapes", () => {
  let gw: Gateway;
  let agent: Client;
  let auditor: Client;
  before(async () => {
    gw = await startGateway();
    agent = new Client(gw.url, gw.keys["agent"]!);
    auditor = new Client(gw.url, gw.keys["auditor"]!);
  });
  after(() => gw?.stop());

  async function checkResults(f: Fixture, session: string, results: Map<string, string>, isError?: Map<string, boolean>): Promise<void> {
    assert.deepEqual([...results.keys()].sort(), Object.keys(f.expect).sort());
    for (const [id, want] of Object.entries(f.expect)) {
      const content = results.get(id)!;
      const out = JSON.parse(content) as ToolOutput;
      assert.equal(out.success, want.success, id);
      if (want.error_code) assert.equal(out.error?.code, want.error_code, id);
      if (want.contains) assert.ok(content.includes(want.contains), `${id}: ${content}`);
      if (isError) assert.equal(isError.get(id), !want.success, id);
      const r = await auditor.receipt(out.metadata["receipt_id"] as string);
      assert.deepEqual([r.tool, r.call_id, r.session_id], [want.tool, id, session]);
    }
  }

  test("OpenAI chat completions", async () => {
    const f = load("openai_chat_completions.json");
    const model = new FakeModel(f, validateOpenAI);
    await model.start();
    try {
      const session = "loop-ts-" + f.api;
      const create = async (p: { messages: ChatMessage[]; tools: unknown[] }) =>
        (await model.post({ model: f.request["model"], ...p })) as ChatCompletionLike;
      const res = await runOpenAIToolLoop(agent, create, f.request["messages"] as ChatMessage[], { sessionId: session });
      assert.deepEqual(model.errors, []);
      assert.equal(res.content, f.final_content);
      assert.equal(res.receipts.length, Object.keys(f.expect).length);
      assert.equal(model.requests.length, f.responses.length);
      const results = new Map<string, string>();
      for (const m of model.requests[1]!["messages"] as Json[]) if (m["role"] === "tool") results.set(m["tool_call_id"], m["content"]);
      await checkResults(f, session, results);
    } finally {
      model.close();
    }
  });

  test("Anthropic messages", async () => {
    const f = load("anthropic_messages.json");
    const model = new FakeModel(f, validateAnthropic);
    await model.start();
    try {
      const session = "loop-ts-" + f.api;
      const create = async (p: { messages: AnthropicMessageParam[]; tools: unknown[] }) =>
        (await model.post({ model: f.request["model"], max_tokens: f.request["max_tokens"], system: f.request["system"], ...p })) as AnthropicMessageLike;
      const res = await runAnthropicToolLoop(agent, create, f.request["messages"] as AnthropicMessageParam[], { sessionId: session });
      assert.deepEqual(model.errors, []);
      assert.equal(res.content, f.final_content);
      assert.equal(res.receipts.length, Object.keys(f.expect).length);
      assert.equal(model.requests.length, f.responses.length);
      const msgs = model.requests[1]!["messages"] as Json[];
      const blocks = msgs[msgs.length - 1]!["content"] as Json[];
      await checkResults(f, session, new Map(blocks.map((b) => [b["tool_use_id"], b["content"]])), new Map(blocks.map((b) => [b["tool_use_id"], b["is_error"]])));
    } finally {
      model.close();
    }
  });

  test("tool definitions pass the APIs' published name pattern and schema rule", async () => {
    const listed = await agent.toolList();
    const re = /^[a-zA-Z0-9_-]{1,64}$/;
    assert.ok(listed.tools.length >= 5);
    for (const t of listed.tools) {
      assert.match(t.function.name, re);
      assert.ok(listed.names[t.function.name], t.function.name);
    }
    assert.equal(listed.names["fs_read"], "fs.read");
    for (const t of anthropicTools(listed.tools)) {
      assert.match(t.name, re);
      schemaObject(t.input_schema);
    }
  });
});
