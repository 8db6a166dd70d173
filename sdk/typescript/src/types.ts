// The gateway's wire vocabulary (gateway/openapi.json, wire/ in Go). A drift
// test holds every interface here against the document's schema of the same
// name, field for field.

/** A contract error code (output.error.code). */
export type ErrorCode =
  | "unauthenticated" | "forbidden" | "invalid_input" | "unknown_tool" | "permission_denied"
  | "fs_denied" | "network_denied" | "sandbox_violation" | "not_found" | "precondition_failed" | "invalid_frontmatter"
  | "read_limit" | "write_limit" | "too_large" | "timeout"
  | "approval_required" | "approval_rejected" | "approval_expired" | "rate_limited" | "evidence_unavailable"
  | "sandbox_unavailable" | "backend_unavailable" | "internal";

export interface Error {
  code: ErrorCode;
  message: string;
  details: Record<string, unknown>;
}

export interface ErrorBody {
  error: Error;
}

export interface ToolCallRequest {
  tool: string;
  input: Record<string, unknown>;
  call_id?: string;
  session_id?: string;
}

export interface ToolOutput<D = unknown> {
  success: boolean;
  data: D | null;
  error: Error | null;
  metadata: Record<string, unknown>;
}

export interface DecisionResult {
  allow: boolean;
  reasons: string[];
  policy_revision: string;
}

export interface ToolCallResponse<D = unknown> {
  receipt_id?: string;
  call_id?: string;
  decision: DecisionResult | null;
  output: ToolOutput<D>;
  /** Set while the call is parked for a person's approval (HTTP 202 approval_required) and on the final answer of a call that was. */
  approval?: ApprovalRef;
}

export interface ApprovalRef {
  id: string;
  status: "pending" | "approved" | "rejected" | "expired" | "stopped";
  expires_at: string;
}

export interface FSGrant {
  path: string;
  mode: "r" | "rw";
  alias?: string;
  allow_autorun?: boolean;
}

export interface Network {
  posture: "off" | "allowlist" | "full";
  allow: string[] | null;
}

export interface EnvPolicy {
  pass: string[] | null;
  set: Record<string, string> | null;
}

export interface Limits {
  timeout_s?: number;
  cpu_seconds?: number;
  memory_bytes?: number;
  fsize_bytes?: number;
  nofile?: number;
  max_output_bytes?: number;
}

export interface ArgInsert {
  at: number;
  args: string[] | null;
}

export interface PathArg {
  index: number;
  value?: boolean;
}

/** The Exec part of a decision or scope: forced arguments, path arguments and the exec restriction. */
export interface ExecPlan {
  insert?: ArgInsert[] | null;
  path_args?: PathArg[] | null;
  exec_restrict?: boolean;
  exec_allow?: string[] | null;
}

export interface Decision {
  allow: boolean;
  reasons: string[];
  fs_grants: FSGrant[] | null;
  network: Network;
  env: EnvPolicy;
  limits: Limits;
  policy_revision: string;
  fs_deny?: string[];
  rule_ids?: string[];
  exec?: ExecPlan;
  /** Set when a person must approve the call first (docs/approvals.md). */
  approval?: ApprovalRequirement;
  /** The counters the call draws on (docs/approvals.md#quotas). */
  quotas?: Quota[];
}

export interface ApprovalRequirement {
  required: boolean;
  reason: string;
  approvers: string[];
  ttl_s: number;
}

export interface Quota {
  key: string;
  limit: number;
  window_s: number;
  cost?: number;
}

export interface Scope {
  fs_grants: FSGrant[] | null;
  network: Network;
  env_names: string[] | null;
  limits: Limits;
  backend?: string;
  fs_deny?: string[];
  exec?: ExecPlan;
  memory_limit?: string;
}

export interface ReasonSource {
  reason: string;
  rules: string[];
}

export interface DryRunResponse {
  decision: Decision;
  scope: Scope | null;
  error?: Error;
  explanation?: ReasonSource[];
}

export interface NetworkStats {
  connections: number;
  allowed: string[];
  refused: string[];
  denials?: Record<string, string>;
  bytes_out: number;
  bytes_in: number;
}

export interface Outcome {
  status: "pending" | "succeeded" | "failed" | "timed_out" | "error" | "interrupted";
  error_code: string | null;
  exit_code: number | null;
  output_sha256: string;
  duration_ms: number;
  backend: string;
  time?: string;
  network?: NetworkStats;
}

export interface ReceiptChain {
  id: string;
  seq: number;
  hash: string;
}

export interface Receipt {
  id: string;
  time: string;
  principal_id: string;
  session_id: string;
  call_id: string;
  tool: string;
  decision: "allow" | "deny" | "invalid";
  reasons: string[] | null;
  rule_ids: string[] | null;
  policy_revision: string;
  args_sha256: string;
  args: unknown;
  scope: Scope | null;
  outcome: Outcome | null;
  trace_id: string;
  parent_receipt_id: string | null;
  instance_id: string;
  completed_at: string | null;
  duration_ms: number | null;
  chain: ReceiptChain | null;
}

export interface ReceiptList {
  receipts: Receipt[];
  next_cursor: string;
}

export interface FunctionSpec {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}

export interface FunctionTool {
  type: "function";
  function: FunctionSpec;
}

/**
 * GET /v1/tools: each tool named by its model-safe name (`fs.read` is
 * `fs_read`), and `names` mapping each listed model-safe name to the
 * tool's own name. The gateway accepts either form wherever it takes one.
 */
export interface ToolList {
  tools: FunctionTool[];
  names: Record<string, string>;
}

// Tool-specific inputs and data of the built-in tools (section 4).

export interface ExecInput {
  argv: string[];
  cwd?: string;
  env?: Record<string, string>;
  timeout_s?: number;
  max_output_bytes?: number;
}

export interface ExecData {
  exit_code: number;
  stdout: string;
  stderr: string;
  stdout_truncated: boolean;
  stderr_truncated: boolean;
  timed_out: boolean;
  signal: string | null;
  duration_ms: number;
}

export interface FSReadData {
  path: string;
  content: string | null;
  bytes: number;
  sha256: string;
  binary: boolean;
  truncated: boolean;
  startLine: number;
  endLine: number;
  totalLines: number;
  nextStartLine?: number;
}

export interface FSWriteData {
  path: string;
  bytesWritten: number;
  sha256After: string;
  sha256Before?: string;
  created: boolean;
}
