"""The Python SDK against an upstream MCP server the gateway fronts:
@modelcontextprotocol/server-everything (npm, not ours) in its Streamable
HTTP mode on loopback, as upstream "web". Its tools are listed and called
like any other. Skipped when node or the server is missing (scripts/test.sh
installs it into .tools/mcp); PORTCULLIS_REQUIRE_MCP_SERVERS=1 makes that a
failure."""

import json
import os
import shutil
import socket
import subprocess
import time
import unittest

import portcullis
from portcullis.openai_loop import handle_tool_call

from .gateway import REPO, Gateway


def _everything():
    modules = os.environ.get("PORTCULLIS_MCP_SERVERS") or os.path.join(REPO, ".tools", "mcp", "node_modules")
    server = os.path.join(modules, "@modelcontextprotocol", "server-everything", "dist", "index.js")
    node = shutil.which("node")
    if node is None or not os.path.exists(server):
        return None, None
    return node, server


class UpstreamTools(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        node, server = _everything()
        if node is None:
            if os.environ.get("PORTCULLIS_REQUIRE_MCP_SERVERS") == "1":
                raise RuntimeError("server-everything required (PORTCULLIS_REQUIRE_MCP_SERVERS=1) but missing")
            raise unittest.SkipTest("node or server-everything missing (scripts/test.sh installs it)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cls.server = subprocess.Popen([node, server, "streamableHttp"], env=dict(os.environ, PORT=str(port)),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            cls.server.kill()
            raise RuntimeError("server-everything not listening on %d" % port)
        try:
            cls.gw = Gateway(agent_tools=["web.echo"], extra_config=[
                "upstreams:", "  - name: web", '    url: "http://127.0.0.1:%d/mcp"' % port,
                '    allow_networks: ["127.0.0.1/32"]'])
        except Exception:
            cls.server.kill()
            raise
        cls.agent = portcullis.Client(cls.gw.url, cls.gw.keys["agent"])
        cls.auditor = portcullis.Client(cls.gw.url, cls.gw.keys["auditor"])
        deadline = time.time() + 60
        while time.time() < deadline:
            if cls.agent.tool_list()["names"].get("web__echo") == "web.echo":
                break
            time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.server.kill()
        cls.server.wait()

    def test_listed_with_the_servers_schema(self):
        listed = self.agent.tool_list()
        self.assertEqual(listed["names"].get("web__echo"), "web.echo", listed["names"])
        fns = {t["function"]["name"]: t["function"] for t in listed["tools"]}
        self.assertIn("message", json.dumps(fns["web__echo"]["parameters"]))
        self.assertTrue(fns["web__echo"]["description"])
        self.assertFalse([n for n in fns if "env" in n], "an ungranted upstream tool is listed")

    def test_call_by_either_name_with_a_receipt(self):
        for name in ("web.echo", "web__echo"):
            resp = self.agent.call(name, {"message": "python sdk via " + name}, session_id="py-up")
            self.assertTrue(resp.output.success, resp)
            self.assertFalse(resp.output.data["isError"])
            self.assertIn("python sdk via " + name, resp.output.data["content"][0]["text"])
            r = self.auditor.receipt(resp.receipt_id)
            self.assertEqual((r.tool, r.decision, r.outcome.status), ("web.echo", "allow", "succeeded"))

    def test_openai_tool_call(self):
        msg = handle_tool_call(self.agent, "call_1", "web__echo", json.dumps({"message": "from the model"}))
        self.assertEqual(msg["tool_call_id"], "call_1")
        out = json.loads(msg["content"])
        self.assertTrue(out["success"])
        self.assertIn("from the model", out["data"]["content"][0]["text"])

    def test_refusals(self):
        with self.assertRaises(portcullis.PortcullisError) as cm:
            self.agent.call("web.get-env", {})
        self.assertEqual((cm.exception.code, cm.exception.status), ("permission_denied", 403))
        with self.assertRaises(portcullis.PortcullisError) as cm:
            self.agent.call("web.echo", {"message": 5})
        self.assertEqual(cm.exception.code, "invalid_input")
        self.assertEqual(cm.exception.details.get("field"), "input.message")


if __name__ == "__main__":
    unittest.main()
