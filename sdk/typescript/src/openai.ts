import { Client, PortcullisError, type CallOptions } from "./client.js";
import type { ToolCallResponse, ToolOutput } from "./types.js";

/** The OpenAI `{"role": "tool"}` message answering one model tool call. */
export interface ToolMessage {
  role: "tool";
  tool_call_id: string;
  content: string;
}

/**
 * The tool message for a gateway answer: the ToolOutput as JSON (success,
 * data, error, metadata with the receipt id), so the model reads a denial's
 * reasons and can adapt.
 */
export function toolMessage(toolCallId: string, resp: ToolCallResponse | undefined): ToolMessage {
  return { role: "tool", tool_call_id: toolCallId, content: outputJSON(resp) };
}

/** A tool answer's ToolOutput as the JSON text a model reads. */
export function outputJSON(resp: ToolCallResponse | undefined): string {
  const output: ToolOutput = resp?.output ?? {
    success: false, data: null, metadata: {},
    error: { code: "internal", message: "no answer from the gateway", details: {} },
  };
  return JSON.stringify(output);
}

/**
 * Runs one model tool call (id, function name, JSON arguments string) and
 * returns its tool message. Refusals are answered to the model; failures to
 * reach the gateway reject.
 */
export async function handleToolCall(client: Client, toolCallId: string, name: string, args: string, o: CallOptions = {}): Promise<ToolMessage> {
  let input: unknown;
  try {
    input = JSON.parse(args || "{}");
  } catch {
    input = undefined;
  }
  if (!input || typeof input !== "object" || Array.isArray(input)) {
    return toolMessage(toolCallId, {
      decision: null,
      output: { success: false, data: null, metadata: {}, error: { code: "invalid_input", message: "the tool arguments are not a JSON object", details: { field: "arguments" } } },
    });
  }
  try {
    return toolMessage(toolCallId, await client.call(name, input as Record<string, unknown>, { ...o, callId: toolCallId }));
  } catch (e) {
    if (e instanceof PortcullisError && e.response) return toolMessage(toolCallId, e.response);
    throw e;
  }
}

/** The parts of a chat completion the loop reads (OpenAI's shape). */
export interface ChatCompletionLike {
  choices: Array<{
    message: {
      content?: string | null;
      tool_calls?: Array<{ id: string; type?: string; function: { name: string; arguments: string } }> | null;
    };
  }>;
}

export type ChatMessage = Record<string, unknown> & { role: string };

export interface ToolLoopResult<M = ChatMessage> {
  content: string | null;
  messages: M[];
  receipts: string[];
}

/**
 * Drives the model until it answers without tool calls. `create` is the
 * chat-completions function (e.g. `(p) => openai.chat.completions.create({model, ...p})`);
 * the tools offered are exactly those the gateway lets this caller call.
 */
export async function runToolLoop(
  client: Client,
  create: (params: { messages: ChatMessage[]; tools: unknown[] }) => Promise<ChatCompletionLike> | ChatCompletionLike,
  messages: ChatMessage[],
  options: { maxTurns?: number; sessionId?: string } = {},
): Promise<ToolLoopResult> {
  const tools = await client.tools();
  const msgs = [...messages];
  const receipts: string[] = [];
  for (let turn = 0; turn < (options.maxTurns ?? 16); turn++) {
    const completion = await create({ messages: msgs, tools });
    const message = completion.choices[0]!.message;
    const calls = message.tool_calls ?? [];
    const assistant: ChatMessage = { role: "assistant", content: message.content ?? null };
    if (calls.length > 0) assistant.tool_calls = calls.map((c) => ({ id: c.id, type: "function", function: c.function }));
    msgs.push(assistant);
    if (calls.length === 0) return { content: message.content ?? null, messages: msgs, receipts };
    for (const c of calls) {
      const tm = await handleToolCall(client, c.id, c.function.name, c.function.arguments, { sessionId: options.sessionId });
      const rid = (JSON.parse(tm.content) as ToolOutput).metadata?.["receipt_id"];
      if (typeof rid === "string") receipts.push(rid);
      msgs.push({ ...tm });
    }
  }
  throw new Error(`the model still asked for tools after ${options.maxTurns ?? 16} turns`);
}
