export { Client, PortcullisError, ApprovalPendingError, DEFAULT_TIMEOUT_MS, type ClientOptions, type CallOptions, type TLSOptions } from "./client.js";
export { toolMessage, handleToolCall, runToolLoop, runToolLoop as runOpenAIToolLoop, type ToolMessage, type ChatCompletionLike, type ChatMessage, type ToolLoopResult } from "./openai.js";
export {
  anthropicTools, toolResult, handleToolUse, runAnthropicToolLoop,
  type AnthropicTool, type ToolUseBlock, type ToolResultBlock, type AnthropicMessageLike, type AnthropicMessageParam,
} from "./anthropic.js";
export type * from "./types.js";
