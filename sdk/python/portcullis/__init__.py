"""Portcullis agent SDK: every tool call authenticated, decided by policy,
enforced and recorded by the gateway. Standard library only.

Distribution name ``portcullis-sdk`` (``pip install portcullis-sdk``); the
import name is ``portcullis``."""

from .client import ApprovalPending, Client, PortcullisError
from .anthropic_loop import anthropic_tools, handle_tool_use, run_anthropic_tool_loop, tool_result
from .openai_loop import ToolLoopResult, handle_tool_call, run_tool_loop, tool_message
from .types import (
    Decision, DecisionResult, DryRunResponse, Error, FunctionTool, Receipt, ReceiptList, Scope,
    ToolCallRequest, ToolCallResponse, ToolList, ToolOutput, WIRE_TYPES,
)

# run_openai_tool_loop names the OpenAI loop beside run_anthropic_tool_loop.
run_openai_tool_loop = run_tool_loop

__all__ = [
    "ApprovalPending",
    "Client", "PortcullisError", "ToolLoopResult", "handle_tool_call", "run_tool_loop", "tool_message",
    "anthropic_tools", "handle_tool_use", "run_anthropic_tool_loop", "tool_result", "run_openai_tool_loop",
    "Decision", "DecisionResult", "DryRunResponse", "Error", "FunctionTool", "Receipt", "ReceiptList",
    "Scope", "ToolCallRequest", "ToolCallResponse", "ToolList", "ToolOutput", "WIRE_TYPES",
]
