"""Quickstart: an agent on the Python SDK (pip install portcullis-sdk; from
a checkout: pip install ./sdk/python). The OpenAI and the Anthropic tool
loops each run with a scripted "model" standing in for the LLM: pass
openai.OpenAI().chat.completions.create (with model=...) or
anthropic.Anthropic().messages.create (with model=..., max_tokens=...) as
create instead and nothing else changes.

    gateway serve --dev        # prints an agent key
    PORTCULLIS_API_KEY=<agent key> python3 agent.py
"""

import json
import os
import sys

import portcullis


def scripted_openai(messages, tools, **_):
    """Turn 1: run a program and try a file the policy most likely refuses,
    by the model-safe names the gateway listed. Turn 2: answer."""
    if not any(m["role"] == "assistant" for m in messages):
        return {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "Exec", "arguments": json.dumps({"argv": ["/usr/bin/echo", "hello from python"]})}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "fs_read", "arguments": json.dumps({"path": "/etc/shadow"})}},
            ]}}]}
    results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    return {"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "tool results: " + ", ".join(summary(r) for r in results)}}]}


def scripted_anthropic(messages, tools, **_):
    if not any(m["role"] == "assistant" for m in messages):
        return {"type": "message", "role": "assistant", "stop_reason": "tool_use", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Exec", "input": {"argv": ["/usr/bin/echo", "hello from python"]}},
            {"type": "tool_use", "id": "toolu_2", "name": "fs_read", "input": {"path": "/etc/shadow"}},
        ]}
    results = [json.loads(b["content"]) for b in messages[-1]["content"]]
    return {"type": "message", "role": "assistant", "stop_reason": "end_turn", "content": [
        {"type": "text", "text": "tool results: " + ", ".join(summary(r) for r in results)}]}


def summary(r):
    return "ok" if r["success"] else (r["error"] or {}).get("code", "failed")


def main():
    key = os.environ.get("PORTCULLIS_API_KEY")
    if not key:
        sys.exit("set PORTCULLIS_API_KEY to an agent key (gateway serve --dev prints one)")
    client = portcullis.Client(os.environ.get("PORTCULLIS_URL", "http://127.0.0.1:8080"), key)
    listed = client.tool_list()
    print("tools offered to the model:", ", ".join("%s (%s)" % (n, t) for n, t in sorted(listed["names"].items())))
    ask = [{"role": "user", "content": "say hello, then show me /etc/shadow"}]
    for api, loop, model in (("openai", portcullis.run_openai_tool_loop, scripted_openai),
                             ("anthropic", portcullis.run_anthropic_tool_loop, scripted_anthropic)):
        result = loop(client, model, ask, session_id="quickstart-python")
        for m in result.messages:
            if m["role"] == "tool":
                print(api, m["tool_call_id"], "->", m["content"])
            elif m["role"] == "user" and isinstance(m["content"], list):
                for b in m["content"]:
                    print(api, b["tool_use_id"], "-> is_error=%s" % b["is_error"], b["content"])
        print(api, "model:", result.content)
        print(api, "receipts:", ", ".join(result.receipts))


if __name__ == "__main__":
    main()
