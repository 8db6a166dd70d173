"""The tool loops against the model APIs' recorded shapes
(sdk/testdata/modelapi): a fake model server on loopback replays a fixture's
responses and refuses requests the real API would refuse; the tool calls run
against a real gateway; the test then checks the results the loop sent back.
"""

import http.server
import json
import os
import re
import threading
import unittest
import urllib.request

import portcullis

from .gateway import REPO, Gateway

FIXTURES = os.path.join(REPO, "sdk", "testdata", "modelapi")


def load(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return json.load(f)


def _schema_object(v):
    if not isinstance(v, dict) or v.get("type") != "object":
        raise ValueError("schema is not a JSON Schema of type object: %r" % (v,))
    if "properties" in v and not isinstance(v["properties"], dict):
        raise ValueError("schema properties is not an object")


def _keys(what, obj, allowed):
    extra = set(obj) - set(allowed)
    if extra:
        raise ValueError("%s: unknown fields %s" % (what, sorted(extra)))


def validate_openai(name_re, req, prev_resp):
    """What the chat-completions API checks of the parts the loop writes."""
    if not isinstance(req.get("model"), str):
        raise ValueError("model is required")
    tools = req.get("tools") or []
    if not tools:
        raise ValueError("no tools offered")
    seen = set()
    for t in tools:
        fn = t.get("function")
        if t.get("type") != "function" or not isinstance(fn, dict):
            raise ValueError("tool is not {type: function, function: {...}}: %r" % (t,))
        _keys("tools[].function", fn, ("name", "description", "parameters", "strict"))
        if not name_re.fullmatch(fn.get("name") or ""):
            raise ValueError("tools[].function.name %r does not match %s" % (fn.get("name"), name_re.pattern))
        if fn["name"] in seen:
            raise ValueError("duplicate tool name %r" % fn["name"])
        seen.add(fn["name"])
        _schema_object(fn.get("parameters"))
    if prev_resp is None:
        return
    msgs = req["messages"]
    last = max(i for i, m in enumerate(msgs) if m.get("role") == "assistant")
    asst = msgs[last]
    _keys("assistant message", asst, ("role", "content", "tool_calls", "refusal", "name"))
    want = set()
    for c in asst.get("tool_calls") or []:
        if c.get("type") != "function" or not isinstance(c["function"].get("arguments"), str):
            raise ValueError("assistant tool_calls entry is not {id, type: function, function: {name, arguments: str}}")
        want.add(c["id"])
    answered = set()
    for m in msgs[last + 1:]:
        _keys("tool message", m, ("role", "tool_call_id", "content"))
        if m.get("role") != "tool" or m.get("tool_call_id") not in want or m["tool_call_id"] in answered:
            raise ValueError("message %r does not answer an open tool call exactly once" % (m,))
        if not isinstance(m.get("content"), str):
            raise ValueError("tool message content is not a string")
        answered.add(m["tool_call_id"])
    if answered != want:
        raise ValueError("tool calls %s answered %s" % (sorted(want), sorted(answered)))


def validate_anthropic(name_re, req, prev_resp):
    """What the Messages API checks of the parts the loop writes."""
    if not isinstance(req.get("model"), str):
        raise ValueError("model is required")
    if not isinstance(req.get("max_tokens"), int) or req["max_tokens"] < 1:
        raise ValueError("max_tokens is required")
    tools = req.get("tools") or []
    if not tools:
        raise ValueError("no tools offered")
    seen = set()
    for t in tools:
        _keys("tools[]", t, ("name", "description", "input_schema", "cache_control", "type"))
        if not name_re.fullmatch(t.get("name") or ""):
            raise ValueError("tools[].name %r does not match %s" % (t.get("name"), name_re.pattern))
        if t["name"] in seen:
            raise ValueError("duplicate tool name %r" % t["name"])
        seen.add(t["name"])
        _schema_object(t.get("input_schema"))
    if prev_resp is None:
        return
    msgs = req["messages"]
    asst, user = msgs[-2], msgs[-1]
    if asst.get("role") != "assistant" or asst.get("content") != prev_resp["content"]:
        raise ValueError("the assistant's content blocks were not sent back as they came")
    want = {b["id"] for b in prev_resp["content"] if b.get("type") == "tool_use"}
    blocks = user.get("content")
    if user.get("role") != "user" or not isinstance(blocks, list):
        raise ValueError("the next user message must answer every tool_use")
    answered = set()
    for i, b in enumerate(blocks):
        if b.get("type") != "tool_result":
            if i < len(want):
                raise ValueError("tool_result blocks must come first in the user message")
            continue
        _keys("tool_result", b, ("type", "tool_use_id", "content", "is_error", "cache_control"))
        if b.get("tool_use_id") not in want or b["tool_use_id"] in answered:
            raise ValueError("tool_result for %r answers no open tool_use (or twice)" % b.get("tool_use_id"))
        if not isinstance(b.get("content"), str) or not isinstance(b.get("is_error"), bool):
            raise ValueError("tool_result content must be a string and is_error a boolean")
        answered.add(b["tool_use_id"])
    if answered != want:
        raise ValueError("tool_use ids %s answered %s" % (sorted(want), sorted(answered)))


class FakeModel:
    """Replays a fixture's responses on loopback; refuses (HTTP 400, the
    APIs' invalid_request_error) any request the validator rejects."""

    def __init__(self, fixture, validate):
        self.fixture, self.requests, self.errors = fixture, [], []
        name_re = re.compile(fixture["tool_name_pattern"])
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                n = len(outer.requests)
                try:
                    req = json.loads(body)
                    if self.path != fixture["path"]:
                        raise ValueError("path %s, want %s" % (self.path, fixture["path"]))
                    if n >= len(fixture["responses"]):
                        raise ValueError("the fixture has only %d responses" % len(fixture["responses"]))
                    validate(name_re, req, fixture["responses"][n - 1] if n else None)
                except ValueError as e:
                    outer.errors.append("request %d: %s" % (n + 1, e))
                    out = json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": str(e)}})
                    self.send_response(400)
                else:
                    outer.requests.append(req)
                    out = json.dumps(fixture["responses"][n])
                    self.send_response(200)
                data = out.encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]

    def post(self, body):
        req = urllib.request.Request(self.url + self.fixture["path"], data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


class ModelAPIFixtures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway()
        cls.agent = portcullis.Client(cls.gw.url, cls.gw.keys["agent"])
        cls.auditor = portcullis.Client(cls.gw.url, cls.gw.keys["auditor"])

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def check_results(self, f, session, results, is_error=None):
        self.assertEqual(set(results), set(f["expect"]))
        for call_id, want in f["expect"].items():
            out = json.loads(results[call_id])
            self.assertEqual(out["success"], want["success"], call_id)
            if want.get("error_code"):
                self.assertEqual(out["error"]["code"], want["error_code"], call_id)
            if want.get("contains"):
                self.assertIn(want["contains"], results[call_id])
            if is_error is not None:
                self.assertEqual(is_error[call_id], not want["success"], call_id)
            receipt = self.auditor.receipt(out["metadata"]["receipt_id"])
            self.assertEqual((receipt.tool, receipt.call_id, receipt.session_id), (want["tool"], call_id, session))

    def test_openai_tool_loop_fixture(self):
        f = load("openai_chat_completions.json")
        model = FakeModel(f, validate_openai)
        self.addCleanup(model.close)
        session = "loop-py-" + f["api"]

        def create(messages, tools, **kw):
            return model.post({"model": f["request"]["model"], "messages": messages, "tools": tools})

        res = portcullis.run_openai_tool_loop(self.agent, create, list(f["request"]["messages"]), session_id=session)
        self.assertEqual(model.errors, [])
        self.assertEqual(res.content, f["final_content"])
        self.assertEqual(len(res.receipts), len(f["expect"]))
        self.assertEqual(len(model.requests), len(f["responses"]))
        results = {m["tool_call_id"]: m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"}
        self.check_results(f, session, results)

    def test_anthropic_tool_loop_fixture(self):
        f = load("anthropic_messages.json")
        model = FakeModel(f, validate_anthropic)
        self.addCleanup(model.close)
        session = "loop-py-" + f["api"]

        def create(messages, tools, **kw):
            return model.post({"model": f["request"]["model"], "max_tokens": f["request"]["max_tokens"],
                               "system": f["request"]["system"], "messages": messages, "tools": tools})

        res = portcullis.run_anthropic_tool_loop(self.agent, create, list(f["request"]["messages"]), session_id=session)
        self.assertEqual(model.errors, [])
        self.assertEqual(res.content, f["final_content"])
        self.assertEqual(len(res.receipts), len(f["expect"]))
        self.assertEqual(len(model.requests), len(f["responses"]))
        blocks = model.requests[1]["messages"][-1]["content"]
        self.check_results(f, session, {b["tool_use_id"]: b["content"] for b in blocks},
                           {b["tool_use_id"]: b["is_error"] for b in blocks})

    def test_tool_definitions_published_shape(self):
        """Every tool offered, in both APIs' shapes, passes the published
        name pattern and schema rule, and names map back."""
        listed = self.agent.tool_list()
        name_re = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
        self.assertGreaterEqual(len(listed["tools"]), 5)
        for t in listed["tools"]:
            self.assertRegex(t["function"]["name"], name_re)
            self.assertIn(t["function"]["name"], listed["names"])
        self.assertEqual(listed["names"].get("fs_read"), "fs.read")
        for t in portcullis.anthropic_tools(listed["tools"]):
            self.assertRegex(t["name"], name_re)
            _schema_object(t["input_schema"])


if __name__ == "__main__":
    unittest.main()
