import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import type { AddressInfo } from "node:net";

import { ApprovalPendingError, Client, PortcullisError, runToolLoop, type ChatCompletionLike, type ChatMessage } from "../src/index.js";
import type { ToolCallResponse, ToolOutput } from "../src/types.js";
import { startGateway, type Gateway } from "./gateway.js";

describe("against the gateway", () => {
  let gw: Gateway;
  let agent: Client, noexec: Client, auditor: Client;
  before(async () => {
    gw = await startGateway();
    agent = new Client(gw.url, gw.keys.agent);
    noexec = new Client(gw.url, gw.keys["agent-noexec"]);
    auditor = new Client(gw.url, gw.keys.auditor);
  });
  after(() => gw.stop());

  test("success, with its receipt", async () => {
    const r = await agent.exec({ argv: ["/bin/echo", "hello"] }, { callId: "c-1", sessionId: "ts-run" });
    assert.equal(r.output.success, true);
    assert.equal(r.output.data?.stdout, "hello\n");
    assert.equal(r.call_id, "c-1");
    const rc = await auditor.receipt(r.receipt_id!);
    assert.deepEqual([rc.principal_id, rc.session_id, rc.call_id, rc.decision, rc.outcome?.status],
      ["agent", "ts-run", "c-1", "allow", "succeeded"]);
    const list = await auditor.receipts({ session_id: "ts-run", limit: 5 });
    assert.deepEqual(list.receipts.map((x) => x.id), [r.receipt_id]);
  });

  test("waitForApproval: pending until an approver approves, then the run's answer", async () => {
    const parked = new Client(gw.url, gw.keys["agent-parked"]);
    let pending: PortcullisError | undefined;
    await assert.rejects(parked.exec({ argv: ["/usr/bin/echo", "approved"] }), (e: unknown) => {
      pending = e as PortcullisError;
      return e instanceof PortcullisError && e.code === "approval_required" && e.status === 202;
    });
    const resp = pending!.response!;
    assert.equal(resp.approval?.status, "pending");
    await assert.rejects(parked.waitForApproval(resp, { timeoutMs: 300 }), (e: unknown) => e instanceof ApprovalPendingError);
    setTimeout(() => {
      void fetch(`${gw.url}/v1/approvals/${resp.approval!.id}`, {
        method: "POST",
        headers: { Authorization: `Bearer ${gw.keys.approver}`, "Content-Type": "application/json" },
        body: JSON.stringify({ decision: "approve", reason: "ts" }),
      });
    }, 500);
    const final = (await parked.waitForApproval(resp, { timeoutMs: 30_000 })) as ToolCallResponse<{ stdout: string }>;
    assert.equal(final.output.success, true);
    assert.equal(final.receipt_id, resp.receipt_id);
    assert.equal(final.output.data?.stdout, "approved\n");
  });

  test("denial is a PortcullisError with the contract code", async () => {
    await assert.rejects(noexec.exec({ argv: ["/bin/echo", "no"] }), (e: unknown) => {
      assert.ok(e instanceof PortcullisError);
      assert.equal(e.code, "permission_denied");
      assert.equal(e.status, 403);
      assert.ok(e.receiptId);
      assert.equal(e.response?.decision?.allow, false);
      return true;
    });
    assert.deepEqual(await noexec.tools(), []);
    await assert.rejects(agent.receipts(), { code: "forbidden", status: 403 });
  });

  test("invalid input, unknown tool, wrong key", async () => {
    await assert.rejects(agent.exec({ argv: ["echo", "relative"] }), { code: "invalid_input", status: 400 });
    await assert.rejects(agent.call("NoSuchTool", {}), { code: "unknown_tool", status: 404 });
    await assert.rejects(new Client(gw.url, "wrong").tools(), { code: "unauthenticated", status: 401 });
  });

  test("an Exec that times out", async () => {
    const t0 = Date.now();
    const r = await agent.exec({ argv: ["/bin/sleep", "30"], timeout_s: 1 });
    assert.ok(Date.now() - t0 < 6000);
    assert.equal(r.output.success, false);
    assert.equal(r.output.error?.code, "timeout");
    assert.equal(r.output.data?.timed_out, true);
    // The client's own timeout bounds a call too.
    const short = new Client(gw.url, gw.keys.agent, { timeoutMs: 300 });
    await assert.rejects(short.exec({ argv: ["/bin/sleep", "5"], timeout_s: 5 }), { name: "TimeoutError" });
  });

  test("fs helpers and decide", async () => {
    const p = join(gw.scratch, "ts.txt");
    const w = await agent.fsWrite({ path: p, content: "a\nb\n" });
    assert.equal(w.output.data?.bytesWritten, 4);
    const r = await agent.fsRead({ path: p, startLine: 2, endLine: 2 });
    assert.equal(r.output.data?.content, "b\n");
    assert.equal(r.output.data?.sha256, w.output.data?.sha256After);
    const d = await agent.decide("Exec", { argv: ["/bin/echo"] });
    assert.equal(d.decision.allow, true);
    assert.ok(d.scope);
  });

  test("traceparent reaches the receipt", async () => {
    const traceId = randomBytes(16).toString("hex");
    const c = new Client(gw.url, gw.keys.agent, { traceparent: () => `00-${traceId}-${randomBytes(8).toString("hex")}-01` });
    const r = await c.exec({ argv: ["/bin/echo", "traced"] });
    assert.equal((await auditor.receipt(r.receipt_id!)).trace_id, traceId);
  });

  test("OpenAI tool loop with a scripted model", async () => {
    const offered: string[][] = [];
    const create = ({ messages, tools }: { messages: ChatMessage[]; tools: unknown[] }): ChatCompletionLike => {
      offered.push((tools as Array<{ function: { name: string } }>).map((t) => t.function.name));
      if (!messages.some((m) => m.role === "assistant")) {
        return { choices: [{ message: { content: null, tool_calls: [
          { id: "call_a", type: "function", function: { name: "Exec", arguments: JSON.stringify({ argv: ["/bin/echo", "from-model"] }) } },
          { id: "call_b", type: "function", function: { name: "fs.read", arguments: JSON.stringify({ path: "/etc/shadow" }) } },
        ] } }] };
      }
      const out: Record<string, ToolOutput<{ stdout?: string }>> = {};
      for (const m of messages) if (m.role === "tool") out[m["tool_call_id"] as string] = JSON.parse(m["content"] as string);
      return { choices: [{ message: { content: `echo=${out["call_a"]!.data?.stdout?.trim()} read=${out["call_b"]!.error?.code}` } }] };
    };
    const res = await runToolLoop(agent, create, [{ role: "user", content: "go" }], { sessionId: "ts-loop" });
    assert.match(res.content!, /^echo=from-model read=[a-z_]+$/);
    assert.doesNotMatch(res.content!, /read=undefined/);
    assert.equal(res.receipts.length, 2);
    assert.deepEqual(offered[0], ["Exec", "fs_list", "fs_read", "fs_search", "fs_write"]); // model-safe names
    const list = await auditor.receipts({ session_id: "ts-loop" });
    assert.deepEqual(list.receipts.map((r) => r.call_id).sort(), ["call_a", "call_b"]);
  });
});

describe("retries", () => {
  async function scripted(answers: Array<[number, string | null]>, fn: (c: Client) => Promise<unknown>): Promise<{ n: number; err?: PortcullisError }> {
    let n = 0;
    const srv: Server = createServer((req, res) => {
      req.resume();
      const [status, code] = answers[n++] ?? [200, null];
      const body = status === 200
        ? { receipt_id: "r", decision: { allow: true, reasons: [], policy_revision: "x" }, output: { success: true, data: {}, error: null, metadata: {} }, tools: [] }
        : { output: { success: false, data: null, metadata: {}, error: { code, message: "scripted", details: {} } }, error: { code, message: "scripted", details: {} } };
      res.writeHead(status, { "Content-Type": "application/json" }).end(JSON.stringify(body));
    });
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    const c = new Client(`http://127.0.0.1:${(srv.address() as AddressInfo).port}`, "k", { backoffMs: 1, maxBackoffMs: 5 });
    try {
      await fn(c);
      return { n };
    } catch (e) {
      if (!(e instanceof PortcullisError)) throw e;
      return { n, err: e };
    } finally {
      srv.close();
    }
  }
  const call = (c: Client) => c.exec({ argv: ["/bin/true"] });
  const cases: Array<[string, Array<[number, string | null]>, (c: Client) => Promise<unknown>, number, string | undefined]> = [
    ["503 evidence_unavailable twice, then 200", [[503, "evidence_unavailable"], [503, "evidence_unavailable"]], call, 3, undefined],
    ["429 then 200", [[429, null]], call, 2, undefined],
    ["503 backend_unavailable may have run: no retry", [[503, "backend_unavailable"]], call, 1, "backend_unavailable"],
    ["400 is final", [[400, "invalid_input"]], call, 1, "invalid_input"],
    ["200 is final", [], call, 1, undefined],
    ["gives up after 3 retries", Array(5).fill([503, "evidence_unavailable"]), call, 4, "evidence_unavailable"],
    ["reads retry any 503", [[503, ""]], (c) => c.tools(), 2, undefined],
  ];
  for (const [name, answers, fn, wantN, wantCode] of cases) {
    test(name, async () => {
      const { n, err } = await scripted(answers, fn);
      assert.equal(n, wantN);
      assert.equal(err?.code, wantCode);
    });
  }
});

describe("token provider and TLS", () => {
  const hasOpenssl = spawnSync("openssl", ["version"]).status === 0;
  test("the provider is asked every attempt; ca, cert and key reach the handshake", { skip: !hasOpenssl && "openssl not installed" }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "pcl-ts-tls-"));
    const p = (n: string) => join(dir, n);
    const ssl = (...args: string[]) => {
      const r = spawnSync("openssl", args, { encoding: "utf8" });
      assert.equal(r.status, 0, r.stderr);
    };
    const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    ssl("req", "-x509", ...ec, "-keyout", p("ca.key"), "-out", p("ca.pem"), "-days", "1", "-subj", "/CN=ts-ca");
    for (const [name, cn, ext] of [["server", "127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"],
      ["client", "agent-7", "extendedKeyUsage=clientAuth\n"]] as const) {
      writeFileSync(p(name + ".ext"), ext);
      ssl("req", ...ec, "-keyout", p(name + ".key"), "-out", p(name + ".csr"), "-subj", "/CN=" + cn);
      ssl("x509", "-req", "-in", p(name + ".csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"), "-CAcreateserial",
        "-out", p(name + ".pem"), "-days", "1", "-extfile", p(name + ".ext"));
    }
    const seen: Array<[string | undefined, string | undefined]> = [];
    const srv = createHttpsServer({
      key: readFileSync(p("server.key")), cert: readFileSync(p("server.pem")), ca: readFileSync(p("ca.pem")),
      requestCert: true, rejectUnauthorized: false,
    }, (req, res) => {
      const sock = req.socket as import("node:tls").TLSSocket;
      const cn = sock.authorized ? (sock.getPeerCertificate().subject?.CN as string | undefined) : undefined;
      seen.push([req.headers.authorization, cn]);
      res.setHeader("Content-Type", "application/json");
      if (seen.length === 1) {
        res.statusCode = 503;
        res.setHeader("Retry-After", "0");
        res.end(JSON.stringify({ error: { code: "backend_unavailable", message: "later", details: {} } }));
        return;
      }
      res.end(JSON.stringify({ tools: [], names: {} }));
    });
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    try {
      const url = `https://127.0.0.1:${(srv.address() as AddressInfo).port}`;
      let n = 0;
      const c = new Client(url, "", {
        tokenProvider: async () => `jwt-${++n}`, backoffMs: 1, maxBackoffMs: 2,
        tls: { ca: readFileSync(p("ca.pem")), cert: readFileSync(p("client.pem")), key: readFileSync(p("client.key")) },
      });
      assert.deepEqual(await c.tools(), []);
      assert.deepEqual(seen, [["Bearer jwt-1", "agent-7"], ["Bearer jwt-2", "agent-7"]]);
      // Without the CA, the gateway's certificate is not trusted.
      await assert.rejects(new Client(url, "k", { tls: {} }).tools());
    } finally {
      srv.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
