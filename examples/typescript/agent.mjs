// Quickstart: an agent on the TypeScript SDK (npm install @portcullis/sdk;
// from a checkout: npm install /path/to/portcullis/sdk/typescript). The
// OpenAI and the Anthropic tool loops each run with a scripted "model"
// standing in for the LLM: pass
//   (p) => openai.chat.completions.create({ model, ...p })
//   (p) => anthropic.messages.create({ model, max_tokens: 1024, ...p })
// as create instead and nothing else changes.
//
//   gateway serve --dev        # prints an agent key
//   PORTCULLIS_API_KEY=<agent key> node agent.mjs
import { Client, runOpenAIToolLoop, runAnthropicToolLoop } from "@portcullis/sdk";

const key = process.env.PORTCULLIS_API_KEY;
if (!key) {
  console.error("set PORTCULLIS_API_KEY to an agent key (gateway serve --dev prints one)");
  process.exit(2);
}
const client = new Client(process.env.PORTCULLIS_URL ?? "http://127.0.0.1:8080", key);
const listed = await client.toolList();
console.log("tools offered to the model:", Object.entries(listed.names).map(([safe, own]) => `${safe} (${own})`).join(", "));

const summary = (r) => (r.success ? "ok" : r.error?.code ?? "failed");

// Turn 1: run a program and try a file the policy most likely refuses, by
// the model-safe names the gateway listed. Turn 2: answer.
function scriptedOpenAI({ messages }) {
  if (!messages.some((m) => m.role === "assistant")) {
    return { choices: [{ index: 0, finish_reason: "tool_calls", message: { role: "assistant", content: null, tool_calls: [
      { id: "call_1", type: "function", function: { name: "Exec", arguments: JSON.stringify({ argv: ["/usr/bin/echo", "hello from typescript"] }) } },
      { id: "call_2", type: "function", function: { name: "fs_read", arguments: JSON.stringify({ path: "/etc/shadow" }) } },
    ] } }] };
  }
  const results = messages.filter((m) => m.role === "tool").map((m) => JSON.parse(m.content));
  return { choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "tool results: " + results.map(summary).join(", ") } }] };
}

function scriptedAnthropic({ messages }) {
  if (!messages.some((m) => m.role === "assistant")) {
    return { type: "message", role: "assistant", stop_reason: "tool_use", content: [
      { type: "tool_use", id: "toolu_1", name: "Exec", input: { argv: ["/usr/bin/echo", "hello from typescript"] } },
      { type: "tool_use", id: "toolu_2", name: "fs_read", input: { path: "/etc/shadow" } },
    ] };
  }
  const results = messages.at(-1).content.map((b) => JSON.parse(b.content));
  return { type: "message", role: "assistant", stop_reason: "end_turn", content: [{ type: "text", text: "tool results: " + results.map(summary).join(", ") }] };
}

const ask = [{ role: "user", content: "say hello, then show me /etc/shadow" }];
for (const [api, loop, model] of [["openai", runOpenAIToolLoop, scriptedOpenAI], ["anthropic", runAnthropicToolLoop, scriptedAnthropic]]) {
  const result = await loop(client, model, ask, { sessionId: "quickstart-typescript" });
  for (const m of result.messages) {
    if (m.role === "tool") console.log(api, m.tool_call_id, "->", m.content);
    else if (m.role === "user" && Array.isArray(m.content)) for (const b of m.content) console.log(api, b.tool_use_id, `-> is_error=${b.is_error}`, b.content);
  }
  console.log(api, "model:", result.content);
  console.log(api, "receipts:", result.receipts.join(", "));
}
