"""An OpenAI chat-completions tool loop that runs every tool call through
the gateway. It takes the completion function as a plain callable
(e.g. ``openai.OpenAI().chat.completions.create`` with the model bound), so
this package needs no openai dependency and tests can script the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from .client import Client, PortcullisError
from .types import ToolCallResponse, to_dict


def _output_json(resp: Optional[ToolCallResponse]) -> Tuple[str, bool]:
    """The ToolOutput as the JSON text a model reads, and whether it succeeded."""
    if resp is None:
        output: Dict[str, Any] = {"success": False, "data": None, "metadata": {},
                                  "error": {"code": "internal", "message": "no answer from the gateway", "details": {}}}
    else:
        output = to_dict(resp.output)
        output.setdefault("data", None)
        output.setdefault("error", None)
    return json.dumps(output), bool(output.get("success"))


def tool_message(tool_call_id: str, resp: Optional[ToolCallResponse]) -> Dict[str, Any]:
    """The {"role": "tool"} message answering one model tool call. Its
    content is the ToolOutput as JSON (success, data, error, metadata with the
    receipt id), so the model reads a denial's reasons and can adapt."""
    return {"role": "tool", "tool_call_id": tool_call_id, "content": _output_json(resp)[0]}


def handle_tool_call(
    client: Client, tool_call_id: str, name: str, arguments: str, *, session_id: Optional[str] = None,
    traceparent: Optional[str] = None,
) -> Dict[str, Any]:
    """Runs one model tool call and returns its tool message. Refusals are
    answered to the model, not raised; unreachable gateways raise."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        args = None
    if not isinstance(args, dict):
        return {
            "role": "tool", "tool_call_id": tool_call_id,
            "content": json.dumps({"success": False, "data": None, "metadata": {}, "error": {
                "code": "invalid_input", "message": "the tool arguments are not a JSON object",
                "details": {"field": "arguments"}}}),
        }
    try:
        resp = client.call(name, args, call_id=tool_call_id, session_id=session_id, traceparent=traceparent)
    except PortcullisError as e:
        if e.response is None:
            raise
        resp = e.response
    return tool_message(tool_call_id, resp)


def _get(obj: Any, key: str) -> Any:
    """Reads key from a dict or an attribute from an SDK object."""
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


@dataclass
class ToolLoopResult:
    content: Optional[str]  # the model's final answer
    messages: List[Dict[str, Any]]  # the whole conversation, tool messages included
    receipts: List[str] = field(default_factory=list)  # receipt ids of the calls made


def run_tool_loop(
    client: Client,
    create: Callable[..., Any],
    messages: List[Dict[str, Any]],
    *,
    max_turns: int = 16,
    session_id: Optional[str] = None,
    **create_kwargs: Any,
) -> ToolLoopResult:
    """Drives the model until it answers without tool calls.

    create(messages=..., tools=..., **create_kwargs) must return a chat
    completion (dict or the openai package's object). The tools offered are
    exactly those the gateway lets this caller call.
    """
    tools = client.tools()
    msgs = list(messages)
    receipts: List[str] = []
    for _ in range(max_turns):
        completion = create(messages=msgs, tools=tools, **create_kwargs)
        message = _get(_get(completion, "choices")[0], "message")
        calls = _get(message, "tool_calls") or []
        assistant: Dict[str, Any] = {"role": "assistant", "content": _get(message, "content")}
        if calls:
            assistant["tool_calls"] = [
                {"id": _get(c, "id"), "type": "function", "function": {
                    "name": _get(_get(c, "function"), "name"), "arguments": _get(_get(c, "function"), "arguments")}}
                for c in calls
            ]
        msgs.append(assistant)
        if not calls:
            return ToolLoopResult(content=_get(message, "content"), messages=msgs, receipts=receipts)
        for c in assistant["tool_calls"]:
            tm = handle_tool_call(client, c["id"], c["function"]["name"], c["function"]["arguments"] or "{}",
                                  session_id=session_id)
            rid = json.loads(tm["content"]).get("metadata", {}).get("receipt_id")
            if rid:
                receipts.append(rid)
            msgs.append(tm)
    raise RuntimeError(f"the model still asked for tools after {max_turns} turns")
