// Starts the real gateway binary, configured like the Go end-to-end suite:
// tests/testdata/policy/e2e.rego with per-run data, random keys stored
// hashed, the embedded store, the process backend. PORTCULLIS_TEST_GATEWAY_BIN
// names the binary (scripts/test.sh builds it); without it the gateway is
// built with `go build`. No binary is an error, never a skip.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

// dist/test/gateway.js -> the repository root.
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

let built: string | undefined;
function binary(): string {
  const env = process.env["PORTCULLIS_TEST_GATEWAY_BIN"];
  if (env) return env;
  if (!built) {
    const out = mkdtempSync(join(tmpdir(), "portcullis-ts-bin-"));
    execFileSync("go", ["build", "-o", out + "/", "./cmd/gateway", "./cmd/portcullis-exec-helper"], { cwd: REPO, stdio: "inherit" });
    built = join(out, "gateway");
  }
  return built;
}

export interface Gateway {
  url: string;
  keys: Record<"agent" | "agent-noexec" | "auditor" | "agent-parked" | "approver" | "admin", string>;
  scratch: string;
  /** The policy bundle directory (e2e.rego, data.json); POST /v1/policy/reload reads it again. */
  bundle: string;
  stop(): Promise<void>;
}

/** Options of startGateway: more tools for "agent", more config lines. */
export interface GatewayOptions {
  agentTools?: string[];
  extraConfig?: string[];
}

export async function startGateway(opts: GatewayOptions = {}): Promise<Gateway> {
  const root = realpathSync(mkdtempSync(join(tmpdir(), "portcullis-ts-")));
  const scratch = join(root, "scratch");
  const bundle = join(root, "bundle");
  for (const d of [bundle, scratch, join(root, "data")]) mkdirSync(d, { recursive: true });
  writeFileSync(join(bundle, "e2e.rego"), readFileSync(join(REPO, "tests", "testdata", "policy", "e2e.rego")));
  writeFileSync(join(bundle, "data.json"), JSON.stringify({ e2e: { principals: {
    agent: { tools: ["Exec", "fs.read", "fs.write", "fs.list", "fs.search", ...(opts.agentTools ?? [])],
      fs_grants: [{ path: "/usr", mode: "r" }, { path: scratch, mode: "rw" }] },
    "agent-noexec": { tools: [] },
    // Its calls wait for a person (client.test.ts, approvals).
    "agent-parked": {
      tools: ["Exec"], fs_grants: [{ path: "/usr", mode: "r" }],
      approval: { required: true, reason: "sdk test", ttl_s: 300 },
    },
  } } }));
  const keys = {} as Gateway["keys"];
  const lines = ['listen: "127.0.0.1:0"', `data_dir: ${JSON.stringify(join(root, "data"))}`, "policy:",
    `  bundle: ${JSON.stringify(bundle)}`, "sandbox:", "  backend: process", "principals:"];
  for (const [id, role] of [["agent", "agent"], ["agent-noexec", "agent"], ["auditor", "auditor"], ["agent-parked", "agent"], ["approver", "approver"], ["admin", "admin"]] as const) {
    const key = "pk_" + randomBytes(24).toString("hex");
    keys[id] = key;
    lines.push(`  - id: ${JSON.stringify(id)}`, `    roles: [${role}]`,
      `    api_key_sha256: ${JSON.stringify(createHash("sha256").update(key).digest("hex"))}`);
  }
  lines.push(...(opts.extraConfig ?? []));
  writeFileSync(join(root, "portcullis.yaml"), lines.join("\n") + "\n");
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith("PORTCULLIS_") || k === "PORTCULLIS_DENO") env[k] = v;
  }
  const child: ChildProcess = spawn(binary(), ["serve", "--config", join(root, "portcullis.yaml")], {
    cwd: root, env, stdio: ["ignore", "ignore", "pipe"],
  });
  const log: string[] = [];
  const url = await new Promise<string>((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error("gateway did not start:\n" + log.slice(-40).join("\n"))), 60_000);
    child.on("exit", (code) => reject(new Error(`gateway exited (${code}):\n` + log.slice(-40).join("\n"))));
    createInterface({ input: child.stderr! }).on("line", (line) => {
      log.push(line);
      try {
        const rec = JSON.parse(line) as { msg?: string; addr?: string };
        if (rec.msg === "listening" && rec.addr) {
          clearTimeout(timer);
          resolveUrl("http://" + rec.addr);
        }
      } catch {
        // not a JSON log line
      }
    });
  });
  return {
    url, keys, scratch, bundle,
    stop: () => new Promise<void>((done) => {
      if (child.exitCode !== null) return done();
      const kill = setTimeout(() => child.kill("SIGKILL"), 10_000);
      child.once("exit", () => { clearTimeout(kill); done(); });
      child.kill("SIGTERM");
    }),
  };
}
