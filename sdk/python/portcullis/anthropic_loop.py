"""An Anthropic Messages-API tool loop that runs every tool_use through the
gateway. Like the OpenAI loop it takes the API call as a plain callable
(e.g. ``anthropic.Anthropic().messages.create`` with model and max_tokens
bound), so this package needs no anthropic dependency and tests can replay
recorded responses.

Shapes (Messages API, tool use): tools are ``{"name", "description",
"input_schema"}``; the model answers with content blocks, among them
``{"type": "tool_use", "id", "name", "input"}`` and ``stop_reason:
"tool_use"``; the next user message answers each with ``{"type":
"tool_result", "tool_use_id", "content", "is_error"}``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Mapping, Optional

from .client import Client, PortcullisError
from .openai_loop import ToolLoopResult, _get, _output_json
from .types import ToolCallResponse


def anthropic_tools(tools: List[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """The gateway's tool list (Client.tools(), OpenAI function tools) in
    the Messages API's shape. The names stay the model-safe names the
    gateway gave, which that API requires."""
    return [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
             "input_schema": t["function"]["parameters"]} for t in tools]


def tool_result(tool_use_id: str, resp: Optional[ToolCallResponse]) -> Dict[str, Any]:
    """The tool_result block answering one tool_use. content is the
    ToolOutput as JSON (success, data, error, metadata with the receipt id);
    is_error is set when the call did not succeed, refusals included, so
    the model reads the reason and can adapt."""
    content, success = _output_json(resp)
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": not success}


def handle_tool_use(
    client: Client, block: Any, *, session_id: Optional[str] = None, traceparent: Optional[str] = None,
) -> Dict[str, Any]:
    """Runs one tool_use block (dict or the anthropic package's object) and
    returns its tool_result. Refusals are answered to the model, not raised;
    unreachable gateways raise."""
    tool_use_id, name, args = _get(block, "id"), _get(block, "name"), _get(block, "input")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return {"type": "tool_result", "tool_use_id": tool_use_id, "is_error": True, "content": json.dumps({
            "success": False, "data": None, "metadata": {}, "error": {
                "code": "invalid_input", "message": "the tool input is not a JSON object",
                "details": {"field": "input"}}})}
    try:
        resp = client.call(name, args, call_id=tool_use_id, session_id=session_id, traceparent=traceparent)
    except PortcullisError as e:
        if e.response is None:
            raise
        resp = e.response
    return tool_result(tool_use_id, resp)


def run_anthropic_tool_loop(
    client: Client,
    create: Callable[..., Any],
    messages: List[Dict[str, Any]],
    *,
    max_turns: int = 16,
    session_id: Optional[str] = None,
    **create_kwargs: Any,
) -> ToolLoopResult:
    """Drives the model until it answers without tool_use.

    create(messages=..., tools=..., **create_kwargs) must return a Messages
    API message (dict or the anthropic package's object). The tools offered
    are exactly those the gateway lets this caller call. The model's content
    blocks go back exactly as they came (thinking blocks included), as the
    API requires.
    """
    tools = anthropic_tools(client.tools())
    msgs = list(messages)
    receipts: List[str] = []
    for _ in range(max_turns):
        message = create(messages=msgs, tools=tools, **create_kwargs)
        content = list(_get(message, "content") or [])
        msgs.append({"role": "assistant", "content": content})
        results: List[Dict[str, Any]] = []
        text: List[str] = []
        for block in content:
            kind = _get(block, "type")
            if kind == "text":
                text.append(_get(block, "text") or "")
            elif kind == "tool_use":
                r = handle_tool_use(client, block, session_id=session_id)
                rid = json.loads(r["content"]).get("metadata", {}).get("receipt_id")
                if rid:
                    receipts.append(rid)
                results.append(r)
        if not results:
            return ToolLoopResult(content="".join(text), messages=msgs, receipts=receipts)
        msgs.append({"role": "user", "content": results})
    raise RuntimeError(f"the model still asked for tools after {max_turns} turns")
