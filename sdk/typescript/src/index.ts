export { Client, PortcullisError, DEFAULT_TIMEOUT_MS, type ClientOptions, type CallOptions, type TLSOptions } from "./client.js";
export { toolMessage, handleToolCall, runToolLoop, type ToolMessage, type ChatCompletionLike, type ChatMessage, type ToolLoopResult } from "./openai.js";
export type * from "./types.js";
