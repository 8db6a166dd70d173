import dataclasses
import http.server
import json
import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import portcullis
from portcullis.types import WIRE_TYPES, json_name

from .gateway import REPO, Gateway


class AgainstGateway(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway()
        cls.agent = portcullis.Client(cls.gw.url, cls.gw.keys["agent"])
        cls.noexec = portcullis.Client(cls.gw.url, cls.gw.keys["agent-noexec"])
        cls.auditor = portcullis.Client(cls.gw.url, cls.gw.keys["auditor"])

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def test_success_and_receipt(self):
        resp = self.agent.exec(["/bin/echo", "hello"], call_id="c-1", session_id="py-run")
        self.assertTrue(resp.output.success)
        self.assertEqual(resp.output.data["stdout"], "hello\n")
        self.assertEqual(resp.call_id, "c-1")
        self.assertTrue(resp.decision.allow)
        r = self.auditor.receipt(resp.receipt_id)
        self.assertEqual((r.principal_id, r.session_id, r.call_id, r.decision), ("agent", "py-run", "c-1", "allow"))
        self.assertEqual(r.outcome.status, "succeeded")
        listed = self.auditor.receipts(session_id="py-run", limit=5)
        self.assertEqual([x.id for x in listed.receipts], [resp.receipt_id])

    def test_denial(self):
        with self.assertRaises(portcullis.PortcullisError) as cm:
            self.noexec.exec(["/bin/echo", "no"])
        e = cm.exception
        self.assertEqual((e.code, e.status), ("permission_denied", 403))
        self.assertTrue(e.receipt_id)
        self.assertFalse(e.response.decision.allow)
        self.assertEqual(self.noexec.tools(), [])
        with self.assertRaises(portcullis.PortcullisError) as cm:
            self.agent.receipts()
        self.assertEqual(cm.exception.code, "forbidden")

    def test_invalid_input(self):
        with self.assertRaises(portcullis.PortcullisError) as cm:
            self.agent.exec(["echo", "relative"])
        self.assertEqual((cm.exception.code, cm.exception.status), ("invalid_input", 400))
        self.assertTrue(cm.exception.details.get("field", "").startswith("argv"))
        with self.assertRaises(portcullis.PortcullisError) as cm:
            self.agent.call("NoSuchTool", {})
        self.assertEqual(cm.exception.code, "unknown_tool")
        with self.assertRaises(portcullis.PortcullisError) as cm:
            portcullis.Client(self.gw.url, "wrong").tools()
        self.assertEqual((cm.exception.code, cm.exception.status), ("unauthenticated", 401))

    def test_exec_timeout(self):
        t0 = time.monotonic()
        resp = self.agent.exec(["/bin/sleep", "30"], timeout_s=1)
        self.assertLess(time.monotonic() - t0, 6)
        self.assertFalse(resp.output.success)
        self.assertEqual(resp.output.error.code, "timeout")
        self.assertTrue(resp.output.data["timed_out"])

    def test_fs_and_decide(self):
        p = os.path.join(self.gw.scratch, "py.txt")
        w = self.agent.fs_write(p, "alpha\nbeta\n")
        self.assertEqual(w.output.data["bytesWritten"], 11)
        r = self.agent.fs_read(p, startLine=2, endLine=2)
        self.assertEqual(r.output.data["content"], "beta\n")
        d = self.agent.decide("Exec", {"argv": ["/bin/echo"]})
        self.assertTrue(d.decision.allow)
        self.assertIsNotNone(d.scope)

    def test_traceparent_reaches_receipt(self):
        trace_id = secrets.token_hex(16)
        client = portcullis.Client(self.gw.url, self.gw.keys["agent"],
                                   traceparent=lambda: "00-%s-%s-01" % (trace_id, secrets.token_hex(8)))
        resp = client.exec(["/bin/echo", "traced"])
        self.assertEqual(self.auditor.receipt(resp.receipt_id).trace_id, trace_id)

    def test_openai_tool_loop(self):
        """A scripted model: asks for Exec, then for a denied fs.read, then
        answers from what the tools said."""
        seen = []

        def create(messages, tools, **kw):
            seen.append([t["function"]["name"] for t in tools])
            turn = sum(1 for m in messages if m["role"] == "assistant")
            if turn == 0:
                return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_a", "type": "function",
                     "function": {"name": "Exec", "arguments": json.dumps({"argv": ["/bin/echo", "from-model"]})}},
                    {"id": "call_b", "type": "function",
                     "function": {"name": "fs.read", "arguments": json.dumps({"path": "/etc/shadow"})}},
                ]}}]}
            results = {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}
            return {"choices": [{"message": {"role": "assistant", "content": "echo said %s; read: %s" % (
                results["call_a"]["data"]["stdout"].strip(), results["call_b"]["error"]["code"])}}]}

        res = portcullis.run_tool_loop(self.agent, create, [{"role": "user", "content": "go"}], session_id="loop-1")
        self.assertIn("echo said from-model; read: ", res.content)
        self.assertNotIn("read: None", res.content)
        self.assertEqual(len(res.receipts), 2)
        self.assertEqual(seen[0], ["Exec", "fs_list", "fs_read", "fs_search", "fs_write"])  # model-safe names
        listed = self.auditor.receipts(session_id="loop-1")
        self.assertEqual(sorted(r.call_id for r in listed.receipts), ["call_a", "call_b"])


class Approvals(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway()
        cls.parked = portcullis.Client(cls.gw.url, cls.gw.keys["agent-parked"])

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def _approve(self, approval_id):
        req = urllib.request.Request(self.gw.url + "/v1/approvals/" + approval_id, method="POST",
                                     data=json.dumps({"decision": "approve", "reason": "py"}).encode(),
                                     headers={"Authorization": "Bearer " + self.gw.keys["approver"],
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()

    def test_wait_for_approval(self):
        with self.assertRaises(portcullis.PortcullisError) as cm:
            self.parked.exec(["/usr/bin/echo", "approved"])
        self.assertEqual(cm.exception.code, "approval_required")
        self.assertEqual(cm.exception.status, 202)
        parked = cm.exception.response
        self.assertEqual(parked.approval.status, "pending")
        with self.assertRaises(portcullis.ApprovalPending):
            self.parked.wait_for_approval(parked, timeout=0.3)
        t = threading.Timer(0.5, self._approve, args=(parked.approval.id,))
        t.start()
        final = self.parked.wait_for_approval(parked, timeout=30)
        t.join()
        self.assertTrue(final.output.success)
        self.assertEqual(final.receipt_id, parked.receipt_id)
        self.assertEqual(final.output.data["stdout"], "approved\n")


class _Scripted(http.server.BaseHTTPRequestHandler):
    answers = []
    count = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer()

    def do_GET(self):
        self._answer()

    def _answer(self):
        cls = type(self)
        i = cls.count
        cls.count += 1
        status, code = cls.answers[i] if i < len(cls.answers) else (200, None)
        if code is None and status == 200:
            body = {"receipt_id": "r", "decision": {"allow": True, "reasons": [], "policy_revision": "x"},
                    "output": {"success": True, "data": {}, "error": None, "metadata": {}}, "tools": []}
        else:
            body = {"output": {"success": False, "data": None, "metadata": {},
                               "error": {"code": code or "", "message": "scripted", "details": {}}},
                    "error": {"code": code or "", "message": "scripted", "details": {}}}
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *a):
        pass


class Retries(unittest.TestCase):
    def run_script(self, answers, fn):
        handler = type("H", (_Scripted,), {"answers": answers, "count": 0})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            c = portcullis.Client("http://127.0.0.1:%d" % srv.server_address[1], "k", backoff=0.001, max_backoff=0.005)
            err = None
            try:
                fn(c)
            except portcullis.PortcullisError as e:
                err = e
            return handler.count, err
        finally:
            srv.shutdown()
            srv.server_close()

    def test_policy(self):
        call = lambda c: c.exec(["/bin/true"])
        cases = [
            ("503 evidence_unavailable twice, then 200", [(503, "evidence_unavailable")] * 2, call, 3, None),
            ("429 then 200", [(429, None)], call, 2, None),
            ("503 backend_unavailable may have run", [(503, "backend_unavailable")], call, 1, "backend_unavailable"),
            ("400 is final", [(400, "invalid_input")], call, 1, "invalid_input"),
            ("200 is final", [], call, 1, None),
            ("gives up after 3 retries", [(503, "evidence_unavailable")] * 5, call, 4, "evidence_unavailable"),
            ("reads retry any 503", [(503, "")], lambda c: c.tools(), 2, None),
        ]
        for name, answers, fn, want_calls, want_code in cases:
            with self.subTest(name):
                n, err = self.run_script(answers, fn)
                self.assertEqual(n, want_calls)
                self.assertEqual(err.code if err else None, want_code)


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@unittest.skipUnless(shutil.which("openssl"), "openssl not installed (makes the test certificates)")
class TokenProviderAndTLS(unittest.TestCase):
    """token_provider is asked before every attempt; ca_file and client_cert
    reach the TLS handshake."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        p = lambda n: os.path.join(self.dir, n)
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        _openssl("req", "-x509", *ec, "-keyout", p("ca.key"), "-out", p("ca.pem"), "-days", "1", "-subj", "/CN=py-ca")
        for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
                          ("client", "extendedKeyUsage=clientAuth\n")):
            with open(p(name + ".ext"), "w") as f:
                f.write(ext)
            cn = "127.0.0.1" if name == "server" else "agent-7"
            _openssl("req", *ec, "-keyout", p(name + ".key"), "-out", p(name + ".csr"), "-subj", "/CN=" + cn)
            _openssl("x509", "-req", "-in", p(name + ".csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"),
                     "-CAcreateserial", "-out", p(name + ".pem"), "-days", "1", "-extfile", p(name + ".ext"))
        self.p = p

    def test_token_provider_ca_and_client_cert(self):
        p = self.p
        seen = []

        class H(_Scripted):
            answers = [(503, "")]
            count = 0

            def _answer(self):
                cert = self.connection.getpeercert() or {}
                cn = dict(x[0] for x in cert.get("subject", ())).get("commonName")
                seen.append((self.headers.get("Authorization"), cn))
                _Scripted._answer(self)

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        sctx.load_cert_chain(p("server.pem"), p("server.key"))
        sctx.load_verify_locations(p("ca.pem"))
        sctx.verify_mode = ssl.CERT_OPTIONAL
        srv.socket = sctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        url = "https://127.0.0.1:%d" % srv.server_address[1]
        n = iter(range(1, 100))
        c = portcullis.Client(url, token_provider=lambda: "jwt-%d" % next(n), ca_file=p("ca.pem"),
                              client_cert=(p("client.pem"), p("client.key")), backoff=0.001, max_backoff=0.005)
        c.tools()
        self.assertEqual(seen, [("Bearer jwt-1", "agent-7"), ("Bearer jwt-2", "agent-7")])
        # Without the CA, the gateway's certificate is not trusted.
        with self.assertRaises(urllib.error.URLError):
            portcullis.Client(url, "k").tools()


class Drift(unittest.TestCase):
    def test_dataclasses_match_openapi(self):
        """Every dataclass names exactly the fields of its OpenAPI schema."""
        with open(os.path.join(REPO, "gateway", "openapi.json")) as f:
            schemas = json.load(f)["components"]["schemas"]
        for name, cls in WIRE_TYPES.items():
            with self.subTest(name):
                self.assertIn(name, schemas, "dataclass %s has no schema in openapi.json" % name)
                want = sorted(schemas[name].get("properties", {}))
                got = sorted(json_name(f) for f in dataclasses.fields(cls))
                self.assertEqual(got, want)


if __name__ == "__main__":
    unittest.main()
