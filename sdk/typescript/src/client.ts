import type {
  DryRunResponse, ErrorBody, ErrorCode, ExecData, ExecInput, FSReadData, FSWriteData, FunctionTool, Receipt,
  ReceiptList, ToolCallRequest, ToolCallResponse, ToolList,
} from "./types.js";

/** The longest Exec (600 s) plus the gateway's kill grace and slack. */
export const DEFAULT_TIMEOUT_MS = 660_000;

/**
 * A refusal or failure the gateway reported. `code` is the contract's error
 * code, `status` the HTTP status; for a tool call `response` is the whole
 * answer and `receiptId` names its receipt. A body that is not the gateway's
 * (a proxy's 502) leaves `code` undefined.
 */
export class PortcullisError extends Error {
  override readonly name = "PortcullisError";
  constructor(
    readonly status: number,
    readonly code: ErrorCode | undefined,
    message: string,
    readonly details: Record<string, unknown> = {},
    readonly response?: ToolCallResponse,
  ) {
    super(`${code ?? `http_${status}`} (HTTP ${status}): ${message}`);
  }
  get receiptId(): string | undefined {
    return this.response?.receipt_id;
  }
}

export interface ClientOptions {
  /** Per-attempt timeout in milliseconds (default 660 000). */
  timeoutMs?: number;
  /** Retries of answers that prove nothing ran (default 3). */
  retries?: number;
  /** First backoff and cap in milliseconds (default 250, 8000). */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** The W3C traceparent of the caller's current span, if any. */
  traceparent?: () => string | undefined;
  /** A fetch implementation (default: the global fetch, or a node:https
   * one when `tls` is set). */
  fetch?: typeof fetch;
  /**
   * Returns the bearer token to send, fresh (a JWT from the identity
   * provider the gateway trusts). Called before every attempt, so it
   * should cache its token and renew it before expiry. Replaces the API key.
   */
  tokenProvider?: () => string | Promise<string>;
  /**
   * HTTPS to the gateway (Node): `ca` trusts the gateway's CA (PEM, beside
   * Node's roots), `cert` and `key` present a client certificate (mTLS).
   * Pass PEM contents, e.g. `readFileSync("ca.pem")`.
   */
  tls?: TLSOptions;
}

/** PEM material for HTTPS and mTLS (see ClientOptions.tls). */
export interface TLSOptions {
  ca?: string | Uint8Array | Array<string | Uint8Array>;
  cert?: string | Uint8Array;
  key?: string | Uint8Array;
}

export interface CallOptions {
  callId?: string;
  sessionId?: string;
  traceparent?: string;
  signal?: AbortSignal;
}

// Codes of a 503 tool-call answer that prove nothing ran.
const NEVER_RAN = new Set(["evidence_unavailable", "sandbox_unavailable"]);

type RetryPolicy = (status: number, body: unknown) => boolean;

const retryToolCall: RetryPolicy = (status, body) => {
  if (status === 429) return true;
  if (status !== 503) return false;
  const code = (body as ToolCallResponse | undefined)?.output?.error?.code;
  return code !== undefined && NEVER_RAN.has(code);
};
const retryRead: RetryPolicy = (status) => status === 429 || status === 503;

/**
 * A client for one gateway and one credential: an API key, or a token
 * provider (options.tokenProvider), or a client certificate (options.tls). Every tool call is
 * authenticated, decided by policy, enforced and recorded by the gateway.
 * Retries happen only when the gateway proves nothing ran (429, or 503 with
 * evidence_unavailable/sandbox_unavailable; any 503 for reads), with
 * exponential backoff and jitter; 200 and 4xx are never retried.
 */
/** waitForApproval's timeout passed before anyone decided the call; it stays parked until its approval TTL. */
export class ApprovalPendingError extends PortcullisError {
  constructor(response: ToolCallResponse) {
    super(202, "approval_required", "the call is still waiting for approval", {}, response);
  }
}

export class Client {
  readonly baseUrl: string;
  private readonly opts: Required<Omit<ClientOptions, "traceparent" | "tokenProvider" | "tls">> & Pick<ClientOptions, "traceparent" | "tokenProvider">;

  constructor(baseUrl: string, private readonly apiKey: string, options: ClientOptions = {}) {
    const u = new URL(baseUrl);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`baseUrl must be http(s), got ${baseUrl}`);
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.opts = {
      timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      retries: Math.max(0, options.retries ?? 3),
      backoffMs: options.backoffMs ?? 250,
      maxBackoffMs: options.maxBackoffMs ?? 8000,
      traceparent: options.traceparent,
      tokenProvider: options.tokenProvider,
      fetch: options.fetch ?? (options.tls ? tlsFetch(options.tls) : globalThis.fetch.bind(globalThis)),
    };
  }

  /**
   * Runs `tool` through the gateway. Resolves on 200 even when the tool
   * failed (output.success false): it ran and has a receipt. Rejects with a
   * PortcullisError (carrying the response) on any other status.
   */
  async call<D = unknown>(tool: string, input: Record<string, unknown> = {}, o: CallOptions = {}): Promise<ToolCallResponse<D>> {
    const req: ToolCallRequest = { tool, input };
    if (o.callId) req.call_id = o.callId;
    if (o.sessionId) req.session_id = o.sessionId;
    const { status, body } = await this.request("POST", "/v1/tool-calls", JSON.stringify(req), retryToolCall, o);
    const resp = body as ToolCallResponse<D> | undefined;
    if (!resp || typeof resp !== "object" || !("output" in resp)) {
      throw new PortcullisError(status, undefined, snippet(body));
    }
    if (status !== 200) {
      const e = resp.output.error;
      throw new PortcullisError(status, e?.code, e?.message ?? "", e?.details ?? {}, resp as ToolCallResponse);
    }
    return resp;
  }

  exec(input: ExecInput, o?: CallOptions): Promise<ToolCallResponse<ExecData>> {
    return this.call<ExecData>("Exec", { ...input }, o);
  }
  fsRead(input: { path: string; startLine?: number; endLine?: number }, o?: CallOptions): Promise<ToolCallResponse<FSReadData>> {
    return this.call<FSReadData>("fs.read", { ...input }, o);
  }
  fsWrite(input: { path: string; content: string; ifMatchSha256?: string | null }, o?: CallOptions): Promise<ToolCallResponse<FSWriteData>> {
    return this.call<FSWriteData>("fs.write", { ...input }, o);
  }
  fsList(input: { path: string; maxEntries?: number }, o?: CallOptions): Promise<ToolCallResponse> {
    return this.call("fs.list", { ...input }, o);
  }
  fsSearch(input: { path: string; pattern: string; before?: number; after?: number; maxMatches?: number }, o?: CallOptions): Promise<ToolCallResponse> {
    return this.call("fs.search", { ...input }, o);
  }
  httpGet(input: { url: string; headers?: Record<string, string>; max_bytes?: number; timeout_s?: number }, o?: CallOptions): Promise<ToolCallResponse> {
    return this.call("http.get", { ...input }, o);
  }

  /** Dry run: what policy and enforcement would say; nothing runs, no receipt. */
  async decide(tool: string, input: Record<string, unknown> = {}, o: CallOptions = {}): Promise<DryRunResponse> {
    const req: ToolCallRequest = { tool, input };
    if (o.callId) req.call_id = o.callId;
    if (o.sessionId) req.session_id = o.sessionId;
    return this.read<DryRunResponse>("POST", "/v1/decisions", JSON.stringify(req), o);
  }

  /**
   * The tools this caller may call, as OpenAI function tools, each named by
   * its model-safe name (`fs.read` is `fs_read`), which the gateway accepts
   * wherever it takes a tool name.
   */
  async tools(o: CallOptions = {}): Promise<FunctionTool[]> {
    return (await this.toolList(o)).tools;
  }

  /** GET /v1/tools in full: the tools and `names` (model-safe name -> the tool's own name). */
  async toolList(o: CallOptions = {}): Promise<ToolList> {
    const l = await this.read<ToolList>("GET", "/v1/tools", undefined, o);
    return { tools: l.tools, names: l.names ?? {} };
  }

  /**
   * GET /v1/tool-calls/{receiptId}?wait=: a parked call's answer and whether
   * it is final. A final failure (approval_rejected, approval_expired, or the
   * run's own error status) rejects with a PortcullisError carrying it.
   */
  async toolCall<D = unknown>(receiptId: string, waitMs = 0, o: CallOptions = {}): Promise<{ response: ToolCallResponse<D>; done: boolean }> {
    const qs = waitMs > 0 ? `?wait=${Math.round(waitMs)}ms` : "";
    const { status, body } = await this.request("GET", "/v1/tool-calls/" + encodeURIComponent(receiptId) + qs, undefined, retryRead, o);
    const resp = body as ToolCallResponse<D> | undefined;
    if (!resp || typeof resp !== "object" || !("output" in resp)) {
      const e = (body as ErrorBody | undefined)?.error;
      if (e && typeof e === "object") throw new PortcullisError(status, e.code, e.message, e.details ?? {});
      throw new PortcullisError(status, undefined, snippet(body));
    }
    if (status === 200) return { response: resp, done: true };
    if (status === 202) return { response: resp, done: false };
    const e = resp.output.error;
    throw new PortcullisError(status, e?.code, e?.message ?? "", e?.details ?? {}, resp as ToolCallResponse);
  }

  /**
   * Waits up to `timeoutMs` for a parked call (the response of a 202
   * approval_required, carried by the PortcullisError `call` rejected with)
   * to be approved and run, rejected or expired, long-polling the gateway.
   * Resolves with the run's response; rejects with a PortcullisError for
   * approval_rejected, approval_expired or a failed run, and with an
   * ApprovalPendingError (carrying the pending response) when the timeout
   * passes first.
   */
  async waitForApproval<D = unknown>(resp: ToolCallResponse<D>, o: CallOptions & { timeoutMs?: number } = {}): Promise<ToolCallResponse<D>> {
    if (!resp.approval || resp.approval.status !== "pending" || !resp.receipt_id) return resp;
    const deadline = Date.now() + (o.timeoutMs ?? 300_000);
    let last = resp;
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) throw new ApprovalPendingError(last as ToolCallResponse);
      const wait = Math.min(left, 25_000, Math.max(this.opts.timeoutMs - 5_000, 1_000));
      const { response, done } = await this.toolCall<D>(resp.receipt_id, wait, o);
      if (done) return response;
      last = response;
    }
  }

  /** Lists receipts (auditor role); pass next_cursor as cursor for the next page. */
  async receipts(
    filter: {
      principal?: string;
      tool?: string;
      decision?: string;
      outcome?: string;
      error_code?: string;
      rule?: string;
      session_id?: string;
      since?: string;
      until?: string;
      limit?: number;
      cursor?: string;
    } = {},
    o: CallOptions = {},
  ): Promise<ReceiptList> {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(filter)) if (v !== undefined && v !== "") q.set(k, String(v));
    const qs = q.toString();
    return this.read<ReceiptList>("GET", "/v1/receipts" + (qs ? "?" + qs : ""), undefined, o);
  }

  /** One receipt by id (auditor role). */
  receipt(id: string, o: CallOptions = {}): Promise<Receipt> {
    return this.read<Receipt>("GET", "/v1/receipts/" + encodeURIComponent(id), undefined, o);
  }

  private async read<T>(method: string, path: string, body: string | undefined, o: CallOptions): Promise<T> {
    const { status, body: data } = await this.request(method, path, body, retryRead, o);
    if (status !== 200) {
      const e = (data as ErrorBody | undefined)?.error;
      if (!e || typeof e !== "object") throw new PortcullisError(status, undefined, snippet(data));
      throw new PortcullisError(status, e.code, e.message, e.details ?? {});
    }
    return data as T;
  }

  private async request(method: string, path: string, body: string | undefined, retry: RetryPolicy, o: CallOptions): Promise<{ status: number; body: unknown }> {
    for (let attempt = 0; ; attempt++) {
      const { status, body: data, headers } = await this.once(method, path, body, o);
      if (attempt >= this.opts.retries || !retry(status, data)) return { status, body: data };
      await sleep(this.delay(attempt, headers), o.signal);
    }
  }

  private async once(method: string, path: string, body: string | undefined, o: CallOptions): Promise<{ status: number; body: unknown; headers: Headers }> {
    const headers: Record<string, string> = { Accept: "application/json" };
    const credential = this.opts.tokenProvider ? await this.opts.tokenProvider() : this.apiKey;
    if (credential) headers["Authorization"] = `Bearer ${credential}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const tp = o.traceparent ?? this.opts.traceparent?.();
    if (tp) headers["traceparent"] = tp;
    const signals = [AbortSignal.timeout(this.opts.timeoutMs)];
    if (o.signal) signals.push(o.signal);
    const res = await this.opts.fetch(this.baseUrl + path, { method, headers, body, signal: anySignal(signals) });
    const text = await res.text();
    let data: unknown = text;
    try {
      data = text ? JSON.parse(text) : undefined;
    } catch {
      // not the gateway's JSON: kept as text for the error message
    }
    return { status: res.status, body: data, headers: res.headers };
  }

  private delay(attempt: number, headers: Headers): number {
    const ra = headers.get("Retry-After");
    if (ra && /^\d+$/.test(ra.trim())) return Math.min(Number(ra) * 1000, this.opts.maxBackoffMs);
    const window = Math.min(this.opts.backoffMs * 2 ** attempt, this.opts.maxBackoffMs);
    return window / 2 + Math.random() * (window / 2);
  }
}

/**
 * A fetch over node:https with the given CA and client certificate (the
 * global fetch takes neither without an undici dispatcher, which this SDK
 * does not depend on). Enough of fetch for this client: method, headers, a
 * string body, an abort signal; answers are read whole.
 */
function tlsFetch(tls: TLSOptions): typeof fetch {
  return (async (input: string | URL | Request, init: RequestInit = {}) => {
    const https = await import("node:https");
    const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
    return await new Promise<Response>((resolve, reject) => {
      const req = https.request(url, {
        method: init.method ?? "GET",
        headers: init.headers as Record<string, string>,
        ca: tls.ca as never, cert: tls.cert as never, key: tls.key as never,
        minVersion: "TLSv1.2",
        signal: init.signal ?? undefined,
      }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", reject);
        res.on("end", () => {
          const h = new Headers();
          for (const [k, v] of Object.entries(res.headers)) {
            if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(", ") : v);
          }
          const status = res.statusCode ?? 0;
          const body = status === 204 || status === 304 ? null : Buffer.concat(chunks);
          resolve(new Response(body, { status, headers: h }));
        });
      });
      req.on("error", reject);
      if (typeof init.body === "string") req.write(init.body);
      req.end();
    });
  }) as typeof fetch;
}

/** AbortSignal.any where available (Node >= 20.3), else the same by hand. */
function anySignal(signals: AbortSignal[]): AbortSignal {
  if (signals.length === 1) return signals[0]!;
  const any = (AbortSignal as unknown as { any?: (s: AbortSignal[]) => AbortSignal }).any;
  if (any) return any(signals);
  const ctl = new AbortController();
  for (const s of signals) {
    if (s.aborted) {
      ctl.abort(s.reason);
      break;
    }
    s.addEventListener("abort", () => ctl.abort(s.reason), { once: true });
  }
  return ctl.signal;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function snippet(body: unknown): string {
  const s = typeof body === "string" ? body : JSON.stringify(body ?? "");
  return (s || "empty answer").slice(0, 200);
}
