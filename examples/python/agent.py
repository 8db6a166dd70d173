"""A minimal agent loop on the Python SDK. A scripted "model" stands in for
the LLM: pass openai.OpenAI().chat.completions.create (with model=...) as
create instead and nothing else changes.

    gateway serve --dev        # prints an agent key
    PORTCULLIS_API_KEY=<agent key> python3 examples/python/agent.py
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python"))

import portcullis  # noqa: E402


def scripted_model(messages, tools, **_):
    """Turn 1: run a program and try a file the policy most likely refuses.
    Turn 2: answer from the tool results."""
    if not any(m["role"] == "assistant" for m in messages):
        return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "Exec", "arguments": json.dumps({"argv": ["/bin/echo", "hello from python"]})}},
            {"id": "call_2", "type": "function",
             "function": {"name": "fs.read", "arguments": json.dumps({"path": "/etc/shadow"})}},
        ]}}]}
    results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    summary = ["ok" if r["success"] else r["error"]["code"] if r.get("error") else "failed" for r in results]
    return {"choices": [{"message": {"role": "assistant", "content": "tool results: " + ", ".join(summary)}}]}


def main():
    key = os.environ.get("PORTCULLIS_API_KEY")
    if not key:
        sys.exit("set PORTCULLIS_API_KEY to an agent key (gateway serve --dev prints one)")
    client = portcullis.Client(os.environ.get("PORTCULLIS_URL", "http://127.0.0.1:8080"), key)
    result = portcullis.run_tool_loop(client, scripted_model, [{"role": "user", "content": "say hello"}],
                                      session_id="example-python")
    for m in result.messages:
        if m["role"] == "tool":
            print(m["tool_call_id"], "->", m["content"])
    print("model:", result.content)
    print("receipts:", ", ".join(result.receipts))


if __name__ == "__main__":
    main()
