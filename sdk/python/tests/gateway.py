"""Starts the real gateway binary for the tests, configured like the Go
end-to-end suite: tests/testdata/policy/e2e.rego with per-run data, random
keys stored hashed, the embedded store and the process backend.

PORTCULLIS_TEST_GATEWAY_BIN names the binary (scripts/test.sh builds it);
without it the gateway is built with `go build`. Failing to get a binary is an
error, never a skip.
"""

import hashlib
import json
import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_built = None


def gateway_binary():
    global _built
    env_bin = os.environ.get("PORTCULLIS_TEST_GATEWAY_BIN")
    if env_bin:
        return env_bin
    if _built is None:
        out = tempfile.mkdtemp(prefix="portcullis-py-bin-")
        subprocess.run(["go", "build", "-o", out + os.sep, "./cmd/gateway", "./cmd/portcullis-exec-helper"],
                       cwd=REPO, check=True)
        _built = os.path.join(out, "gateway")
    return _built


class Gateway:
    """A running gateway: url, keys by principal ("agent", "agent-noexec",
    "auditor"), scratch (a directory "agent" may read and write).
    agent_tools adds tools "agent" may call (upstream tools, "web.echo");
    extra_config adds config lines (upstreams:)."""

    def __init__(self, agent_tools=(), extra_config=()):
        self.root = os.path.realpath(tempfile.mkdtemp(prefix="portcullis-py-"))
        self.scratch = os.path.join(self.root, "scratch")
        bundle = os.path.join(self.root, "bundle")
        for d in (bundle, self.scratch, os.path.join(self.root, "data")):
            os.makedirs(d)
        with open(os.path.join(REPO, "tests", "testdata", "policy", "e2e.rego")) as f:
            rego = f.read()
        with open(os.path.join(bundle, "e2e.rego"), "w") as f:
            f.write(rego)
        data = {"e2e": {"principals": {
            "agent": {"tools": ["Exec", "fs.read", "fs.write", "fs.list", "fs.search"] + list(agent_tools),
                      "fs_grants": [{"path": "/usr", "mode": "r"}, {"path": self.scratch, "mode": "rw"}]},
            "agent-noexec": {"tools": []},
            # Its calls wait for a person (test_client.Approvals).
            "agent-parked": {"tools": ["Exec"], "fs_grants": [{"path": "/usr", "mode": "r"}],
                             "approval": {"required": True, "reason": "sdk test", "ttl_s": 300}},
        }}}
        with open(os.path.join(bundle, "data.json"), "w") as f:
            json.dump(data, f)
        self.keys = {}
        lines = ['listen: "127.0.0.1:0"', "data_dir: %s" % json.dumps(os.path.join(self.root, "data")),
                 "policy:", "  bundle: %s" % json.dumps(bundle), "sandbox:", "  backend: process", "principals:"]
        for pid, role in (("agent", "agent"), ("agent-noexec", "agent"), ("auditor", "auditor"),
                          ("agent-parked", "agent"), ("approver", "approver")):
            key = "pk_" + secrets.token_hex(24)
            self.keys[pid] = key
            lines += ["  - id: %s" % json.dumps(pid), "    roles: [%s]" % role,
                      "    api_key_sha256: %s" % json.dumps(hashlib.sha256(key.encode()).hexdigest())]
        lines += list(extra_config)
        cfg = os.path.join(self.root, "portcullis.yaml")
        with open(cfg, "w") as f:
            f.write("\n".join(lines) + "\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PORTCULLIS_") or k == "PORTCULLIS_DENO"}
        self.proc = subprocess.Popen([gateway_binary(), "serve", "--config", cfg], cwd=self.root, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.url = None
        self.log = []
        ready = threading.Event()

        def pump():
            for line in self.proc.stderr:
                self.log.append(line)
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg") == "listening" and not ready.is_set():
                    self.url = "http://" + rec["addr"]
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(60) or self.url is None:
            self.stop()
            raise RuntimeError("gateway did not start:\n" + "".join(self.log[-50:]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()
