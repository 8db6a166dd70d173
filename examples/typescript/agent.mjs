// A minimal agent loop on the TypeScript SDK. A scripted "model" stands in
// for the LLM: pass (p) => openai.chat.completions.create({ model, ...p })
// instead and nothing else changes.
//
//   (cd sdk/typescript && npm ci && npm run build)
//   gateway serve --dev        # prints an agent key
//   PORTCULLIS_API_KEY=<agent key> node examples/typescript/agent.mjs
import { Client, runToolLoop } from "../../sdk/typescript/dist/src/index.js";

const key = process.env.PORTCULLIS_API_KEY;
if (!key) {
  console.error("set PORTCULLIS_API_KEY to an agent key (gateway serve --dev prints one)");
  process.exit(2);
}
const client = new Client(process.env.PORTCULLIS_URL ?? "http://127.0.0.1:8080", key);

// Turn 1: run a program and try a file the policy most likely refuses.
// Turn 2: answer from the tool results.
function scriptedModel({ messages }) {
  if (!messages.some((m) => m.role === "assistant")) {
    return { choices: [{ message: { content: null, tool_calls: [
      { id: "call_1", type: "function", function: { name: "Exec", arguments: JSON.stringify({ argv: ["/bin/echo", "hello from typescript"] }) } },
      { id: "call_2", type: "function", function: { name: "fs.read", arguments: JSON.stringify({ path: "/etc/shadow" }) } },
    ] } }] };
  }
  const results = messages.filter((m) => m.role === "tool").map((m) => JSON.parse(m.content));
  return { choices: [{ message: { content: "tool results: " + results.map((r) => (r.success ? "ok" : r.error?.code ?? "failed")).join(", ") } }] };
}

const result = await runToolLoop(client, scriptedModel, [{ role: "user", content: "say hello" }], { sessionId: "example-typescript" });
for (const m of result.messages) if (m.role === "tool") console.log(m.tool_call_id, "->", m.content);
console.log("model:", result.content);
console.log("receipts:", result.receipts.join(", "));
