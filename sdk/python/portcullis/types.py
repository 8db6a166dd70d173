"""The gateway's wire vocabulary as dataclasses.

Field names are the JSON names, exactly as gateway/openapi.json documents
them (a test holds them against the document so they cannot drift). Parsing
ignores fields this version does not know, so a newer gateway does not break
an older client.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, TypeVar, get_type_hints

T = TypeVar("T")


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = getattr(tp, "__origin__", None)
    args = getattr(tp, "__args__", ())
    if origin is not None and type(None) in args:  # Optional[X]
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value) if len(inner) == 1 else value
    if origin in (list, List) and args and isinstance(value, list):
        return [_convert(args[0], v) for v in value]
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return from_dict(tp, value)
    return value


def json_name(f: "dataclasses.Field[Any]") -> str:
    """The JSON name of a dataclass field (its name unless metadata says)."""
    return f.metadata.get("json", f.name)


def from_dict(cls: Type[T], data: Dict[str, Any]) -> T:
    """Builds dataclass cls from a decoded JSON object, recursively."""
    hints = get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = json_name(f)
        if name in data:
            kwargs[f.name] = _convert(hints[f.name], data[name])
    return cls(**kwargs)  # type: ignore[call-arg]


def to_dict(obj: Any) -> Any:
    """The JSON object of a dataclass, without fields left at None."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            json_name(f): to_dict(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if getattr(obj, f.name) is not None
        }
    if isinstance(obj, list):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


@dataclass
class Error:
    code: str = ""
    message: str = ""
    details: Dict[str, Any] = field(default_factory=dict)


@dataclass
class ErrorBody:
    error: Optional[Error] = None


@dataclass
class ToolCallRequest:
    tool: str = ""
    input: Dict[str, Any] = field(default_factory=dict)
    call_id: Optional[str] = None
    session_id: Optional[str] = None


@dataclass
class ToolOutput:
    success: bool = False
    data: Any = None
    error: Optional[Error] = None
    metadata: Dict[str, Any] = field(default_factory=dict)


@dataclass
class DecisionResult:
    allow: bool = False
    reasons: List[str] = field(default_factory=list)
    policy_revision: str = ""


@dataclass
class ApprovalRef:
    id: str = ""
    status: str = ""
    expires_at: str = ""


@dataclass
class ToolCallResponse:
    receipt_id: Optional[str] = None
    call_id: Optional[str] = None
    decision: Optional[DecisionResult] = None
    output: ToolOutput = field(default_factory=ToolOutput)
    # Set while the call is parked for a person's approval (HTTP 202
    # approval_required) and on the final answer of a call that was.
    approval: Optional[ApprovalRef] = None


@dataclass
class FSGrant:
    path: str = ""
    mode: str = ""
    alias: Optional[str] = None
    allow_autorun: Optional[bool] = None


@dataclass
class Network:
    posture: str = "off"
    allow: List[str] = field(default_factory=list)


@dataclass
class EnvPolicy:
    """Which gateway variables pass through and which are set. "pass" is a
    Python keyword, so that field is pass_ here and "pass" on the wire."""

    pass_: List[str] = field(default_factory=list, metadata={"json": "pass"})
    set: Dict[str, str] = field(default_factory=dict)


@dataclass
class Limits:
    timeout_s: Optional[int] = None
    cpu_seconds: Optional[int] = None
    memory_bytes: Optional[int] = None
    fsize_bytes: Optional[int] = None
    nofile: Optional[int] = None
    max_output_bytes: Optional[int] = None


@dataclass
class ArgInsert:
    """Forced arguments the gateway inserts before the caller's argument at."""

    at: int = 0
    args: List[str] = field(default_factory=list)


@dataclass
class PathArg:
    """A caller argument that names a path (value: the part after "=")."""

    index: int = 0
    value: Optional[bool] = None


@dataclass
class ExecPlan:
    """The Exec part of a decision or scope: forced arguments, path
    arguments and the exec restriction."""

    insert: Optional[List[ArgInsert]] = None
    path_args: Optional[List[PathArg]] = None
    exec_restrict: Optional[bool] = None
    exec_allow: Optional[List[str]] = None


@dataclass
class ApprovalRequirement:
    required: bool = False
    reason: str = ""
    approvers: List[str] = field(default_factory=list)
    ttl_s: int = 0


@dataclass
class Quota:
    key: str = ""
    limit: int = 0
    window_s: int = 0
    cost: int = 1


@dataclass
class Decision:
    allow: bool = False
    reasons: List[str] = field(default_factory=list)
    fs_grants: List[FSGrant] = field(default_factory=list)
    network: Optional[Network] = None
    env: Optional[EnvPolicy] = None
    limits: Optional[Limits] = None
    policy_revision: str = ""
    fs_deny: Optional[List[str]] = None
    rule_ids: Optional[List[str]] = None
    exec: Optional[ExecPlan] = None
    # The human-oversight controls (docs/approvals.md).
    approval: Optional[ApprovalRequirement] = None
    quotas: Optional[List[Quota]] = None


@dataclass
class Scope:
    fs_grants: List[FSGrant] = field(default_factory=list)
    network: Optional[Network] = None
    env_names: List[str] = field(default_factory=list)
    limits: Optional[Limits] = None
    backend: Optional[str] = None
    fs_deny: Optional[List[str]] = None
    exec: Optional[ExecPlan] = None
    memory_limit: Optional[str] = None


@dataclass
class ReasonSource:
    reason: str = ""
    rules: List[str] = field(default_factory=list)


@dataclass
class DryRunResponse:
    decision: Optional[Decision] = None
    scope: Optional[Scope] = None
    error: Optional[Error] = None
    explanation: Optional[List[ReasonSource]] = None


@dataclass
class NetworkStats:
    connections: int = 0
    allowed: List[str] = field(default_factory=list)
    refused: List[str] = field(default_factory=list)
    denials: Optional[Dict[str, str]] = None
    bytes_out: int = 0
    bytes_in: int = 0


@dataclass
class Outcome:
    status: str = ""
    error_code: Optional[str] = None
    exit_code: Optional[int] = None
    output_sha256: str = ""
    duration_ms: int = 0
    backend: str = ""
    time: Optional[str] = None
    network: Optional[NetworkStats] = None


@dataclass
class ReceiptChain:
    """Where a receipt's decision event sits in the evidence hash chain."""

    id: str = ""
    seq: int = 0
    hash: str = ""


@dataclass
class Receipt:
    id: str = ""
    time: str = ""
    principal_id: str = ""
    session_id: str = ""
    call_id: str = ""
    tool: str = ""
    decision: str = ""
    reasons: List[str] = field(default_factory=list)
    rule_ids: List[str] = field(default_factory=list)
    policy_revision: str = ""
    args_sha256: str = ""
    args: Any = None
    scope: Optional[Scope] = None
    outcome: Optional[Outcome] = None
    trace_id: str = ""
    parent_receipt_id: Optional[str] = None
    instance_id: str = ""
    completed_at: Optional[str] = None
    duration_ms: Optional[int] = None
    chain: Optional[ReceiptChain] = None


@dataclass
class ReceiptList:
    receipts: List[Receipt] = field(default_factory=list)
    next_cursor: str = ""


@dataclass
class FunctionSpec:
    name: str = ""
    description: str = ""
    parameters: Dict[str, Any] = field(default_factory=dict)


@dataclass
class FunctionTool:
    type: str = "function"
    function: FunctionSpec = field(default_factory=FunctionSpec)


@dataclass
class ToolList:
    tools: List[FunctionTool] = field(default_factory=list)
    names: Dict[str, str] = field(default_factory=dict)  # model-safe name -> the tool's own name


# WIRE_TYPES maps the OpenAPI schema names to their dataclasses.
WIRE_TYPES: Dict[str, Any] = {
    c.__name__: c
    for c in (
        Error, ErrorBody, ToolCallRequest, ToolOutput, DecisionResult, ToolCallResponse, ApprovalRef, ApprovalRequirement, Quota, FSGrant,
        Network, EnvPolicy, Limits, ArgInsert, PathArg, ExecPlan, Decision, Scope, ReasonSource, DryRunResponse, NetworkStats,
        Outcome, ReceiptChain, Receipt, ReceiptList, FunctionSpec, FunctionTool, ToolList,
    )
}
