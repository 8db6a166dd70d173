"""Portcullis agent SDK: every tool call authenticated, decided by policy,
enforced and recorded by the gateway. Standard library only."""

from .client import Client, PortcullisError
from .openai_loop import ToolLoopResult, handle_tool_call, run_tool_loop, tool_message
from .types import (
    Decision, DecisionResult, DryRunResponse, Error, FunctionTool, Receipt, ReceiptList, Scope,
    ToolCallRequest, ToolCallResponse, ToolOutput, WIRE_TYPES,
)

__all__ = [
    "Client", "PortcullisError", "ToolLoopResult", "handle_tool_call", "run_tool_loop", "tool_message",
    "Decision", "DecisionResult", "DryRunResponse", "Error", "FunctionTool", "Receipt", "ReceiptList",
    "Scope", "ToolCallRequest", "ToolCallResponse", "ToolOutput", "WIRE_TYPES",
]
