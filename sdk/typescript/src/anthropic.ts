// Anthropic Messages-API tool use: tools go to the model as {"name",
// "description", "input_schema"}; the model answers with content blocks,
// among them {"type": "tool_use", "id", "name", "input": {...}} and
// stop_reason "tool_use"; the next user message answers every tool_use
// with a {"type": "tool_result", "tool_use_id", "content", "is_error"} block.
import { Client, PortcullisError, type CallOptions } from "./client.js";
import { outputJSON, type ToolLoopResult } from "./openai.js";
import type { FunctionTool, ToolCallResponse, ToolOutput } from "./types.js";

/** One tool in the Messages API's shape. */
export interface AnthropicTool {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
}

/**
 * The gateway's tool list (`client.tools()`) in the Messages API's shape.
 * The names stay the model-safe names the gateway gave, which that API
 * requires.
 */
export function anthropicTools(tools: FunctionTool[]): AnthropicTool[] {
  return tools.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters }));
}

/** A tool_use content block of a model's answer. */
export interface ToolUseBlock {
  type: "tool_use";
  id: string;
  name: string;
  input: unknown;
}

/** The tool_result block answering one tool_use. */
export interface ToolResultBlock {
  type: "tool_result";
  tool_use_id: string;
  content: string;
  is_error: boolean;
}

/**
 * The tool_result for a gateway answer: content is the ToolOutput as JSON
 * (success, data, error, metadata with the receipt id); is_error is set
 * when the call did not succeed, refusals included, so the model reads the
 * reason and can adapt.
 */
export function toolResult(toolUseId: string, resp: ToolCallResponse | undefined): ToolResultBlock {
  return { type: "tool_result", tool_use_id: toolUseId, content: outputJSON(resp), is_error: !resp?.output.success };
}

/**
 * Runs one tool_use block through the gateway and returns its tool_result.
 * Refusals are answered to the model; failures to reach the gateway reject.
 */
export async function handleToolUse(client: Client, block: ToolUseBlock, o: CallOptions = {}): Promise<ToolResultBlock> {
  const input = block.input ?? {};
  if (typeof input !== "object" || Array.isArray(input)) {
    return toolResult(block.id, {
      decision: null,
      output: { success: false, data: null, metadata: {}, error: { code: "invalid_input", message: "the tool input is not a JSON object", details: { field: "input" } } },
    });
  }
  try {
    return toolResult(block.id, await client.call(block.name, input as Record<string, unknown>, { ...o, callId: block.id }));
  } catch (e) {
    if (e instanceof PortcullisError && e.response) return toolResult(block.id, e.response);
    throw e;
  }
}

/** The parts of a Messages API answer the loop reads. */
export interface AnthropicMessageLike {
  content: Array<{ type: string; text?: string; id?: string; name?: string; input?: unknown } & Record<string, unknown>>;
  stop_reason?: string | null;
}

export type AnthropicMessageParam = { role: "user" | "assistant"; content: unknown };

/**
 * Drives a Messages-API model until it answers without tool_use. `create`
 * is the messages function (e.g.
 * `(p) => anthropic.messages.create({ model, max_tokens: 1024, ...p })`);
 * the tools offered are exactly those the gateway lets this caller call.
 * The model's content blocks go back exactly as they came (thinking blocks
 * included), as the API requires.
 */
export async function runAnthropicToolLoop(
  client: Client,
  create: (params: { messages: AnthropicMessageParam[]; tools: AnthropicTool[] }) => Promise<AnthropicMessageLike> | AnthropicMessageLike,
  messages: AnthropicMessageParam[],
  options: { maxTurns?: number; sessionId?: string } = {},
): Promise<ToolLoopResult<AnthropicMessageParam>> {
  const tools = anthropicTools(await client.tools());
  const msgs = [...messages];
  const receipts: string[] = [];
  for (let turn = 0; turn < (options.maxTurns ?? 16); turn++) {
    const message = await create({ messages: msgs, tools });
    msgs.push({ role: "assistant", content: message.content });
    const results: ToolResultBlock[] = [];
    let text = "";
    for (const block of message.content) {
      if (block.type === "text") text += block.text ?? "";
      if (block.type !== "tool_use") continue;
      const r = await handleToolUse(client, block as unknown as ToolUseBlock, { sessionId: options.sessionId });
      const rid = (JSON.parse(r.content) as ToolOutput).metadata?.["receipt_id"];
      if (typeof rid === "string") receipts.push(rid);
      results.push(r);
    }
    if (results.length === 0) return { content: text, messages: msgs, receipts };
    msgs.push({ role: "user", content: results });
  }
  throw new Error(`the model still asked for tools after ${options.maxTurns ?? 16} turns`);
}
