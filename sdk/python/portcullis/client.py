"""HTTP client of the Portcullis gateway (standard library only)."""

from __future__ import annotations

import json
import random
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .types import DryRunResponse, Receipt, ReceiptList, ToolCallResponse, from_dict

DEFAULT_TIMEOUT = 660.0  # the longest Exec (600 s) plus kill grace and slack
MAX_RESPONSE_BYTES = 64 << 20

# Codes of a 503 tool-call answer that prove nothing ran, so a retry is safe.
_NEVER_RAN = frozenset({"evidence_unavailable", "sandbox_unavailable"})


class PortcullisError(Exception):
    """A refusal or failure the gateway reported.

    code is the contract's error code ("permission_denied", "invalid_input",
    ...), status the HTTP status, details the offending field and more. For a
    tool call, response is the full ToolCallResponse and receipt_id names the
    receipt written for the call. A body that is not the gateway's (a proxy's
    502) leaves code empty.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Optional[Dict[str, Any]] = None,
        response: Optional[ToolCallResponse] = None,
    ) -> None:
        super().__init__(f"{code or 'http_' + str(status)} (HTTP {status}): {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.response = response
        self.receipt_id = response.receipt_id if response else None


class ApprovalPending(PortcullisError):
    """wait_for_approval's timeout passed before anyone decided the call;
    it stays parked until its approval TTL. .response is the pending answer."""

    def __init__(self, response: ToolCallResponse) -> None:
        super().__init__(202, "approval_required", "the call is still waiting for approval", {}, response)


class Client:
    """A client for one gateway and one credential.

    The credential is an API key, or token_provider: a callable returning a
    fresh bearer token (a JWT from the identity provider the gateway trusts),
    called before every attempt, so it should cache and renew its token. Over
    HTTPS, ca_file trusts the gateway's CA (beside the system roots),
    client_cert=(cert_file, key_file) presents a certificate for mTLS, and
    ssl_context replaces both.

    Retries happen only when the gateway proves nothing ran: 429, or 503 with
    evidence_unavailable / sandbox_unavailable for tool calls (any 503 for
    side-effect-free reads), with exponential backoff and jitter. A 200 or a
    4xx is never retried.
    """

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        *,
        token_provider: Optional[Callable[[], str]] = None,
        ca_file: Optional[str] = None,
        client_cert: Optional[Tuple[str, str]] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = 3,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        traceparent: Optional[Callable[[], Optional[str]]] = None,
        opener: Optional[urllib.request.OpenerDirector] = None,
    ) -> None:
        parsed = urllib.parse.urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"base_url must be http(s)://host[:port], got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._key = api_key
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        # traceparent returns the W3C traceparent of the caller's current
        # span (e.g. from OpenTelemetry); the receipt then names that trace.
        self._traceparent = traceparent
        self._token_provider = token_provider
        if opener is None:
            ctx = ssl_context
            if ctx is None and (ca_file or client_cert):
                ctx = ssl.create_default_context()  # system roots, TLS >= 1.2, host names checked
                ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                if ca_file:
                    ctx.load_verify_locations(cafile=ca_file)
                if client_cert:
                    ctx.load_cert_chain(certfile=client_cert[0], keyfile=client_cert[1])
            opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx)) if ctx else urllib.request.build_opener()
        self._opener = opener
        self._sleep = time.sleep

    # -- agents ----------------------------------------------------------
    def call(
        self,
        tool: str,
        input: Optional[Mapping[str, Any]] = None,
        *,
        call_id: Optional[str] = None,
        session_id: Optional[str] = None,
        traceparent: Optional[str] = None,
    ) -> ToolCallResponse:
        """Runs tool through the gateway.

        Returns the response on 200, even when the tool failed
        (output.success false): it ran and has a receipt. Raises
        PortcullisError (with .response) for any other status.
        """
        body = _request_body(tool, input, call_id, session_id)
        status, data = self._do("POST", "/v1/tool-calls", body=body, retry=_retry_tool_call, traceparent=traceparent)
        if not isinstance(data, dict) or "output" not in data:
            raise PortcullisError(status, "", _snippet(data))
        resp = from_dict(ToolCallResponse, data)
        if status != 200:
            err = resp.output.error
            raise PortcullisError(
                status, err.code if err else "", err.message if err else "", err.details if err else {}, resp
            )
        return resp

    def decide(
        self, tool: str, input: Optional[Mapping[str, Any]] = None, *, call_id: Optional[str] = None,
        session_id: Optional[str] = None,
    ) -> DryRunResponse:
        """Dry run: what policy and enforcement would say, nothing run, no receipt."""
        body = _request_body(tool, input, call_id, session_id)
        return from_dict(DryRunResponse, self._read("POST", "/v1/decisions", body=body))

    def tools(self) -> List[Dict[str, Any]]:
        """The tools this caller may call, as OpenAI function tools, each
        named by its model-safe name (fs.read is fs_read), which the gateway
        accepts wherever it takes a tool name."""
        return list(self.tool_list()["tools"])

    def tool_list(self) -> Dict[str, Any]:
        """GET /v1/tools in full: {"tools": [...], "names": {model-safe name:
        the tool's own name}}."""
        out = dict(self._read("GET", "/v1/tools"))
        out.setdefault("names", {})
        return out

    # Typed helpers for the built-in tools; they return the response as
    # call does (output.data holds the tool's result).
    def exec(
        self, argv: List[str], *, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
        timeout_s: Optional[int] = None, max_output_bytes: Optional[int] = None, **kw: Any,
    ) -> ToolCallResponse:
        """Runs a program (argv[0] absolute; never a shell)."""
        return self.call("Exec", _drop_none(argv=argv, cwd=cwd, env=env, timeout_s=timeout_s,
                                            max_output_bytes=max_output_bytes), **kw)

    def fs_read(self, path: str, *, startLine: Optional[int] = None, endLine: Optional[int] = None, **kw: Any) -> ToolCallResponse:
        return self.call("fs.read", _drop_none(path=path, startLine=startLine, endLine=endLine), **kw)

    def fs_write(self, path: str, content: str, *, ifMatchSha256: Optional[str] = None, **kw: Any) -> ToolCallResponse:
        return self.call("fs.write", _drop_none(path=path, content=content, ifMatchSha256=ifMatchSha256), **kw)

    def fs_list(self, path: str, **kw: Any) -> ToolCallResponse:
        return self.call("fs.list", {"path": path}, **kw)

    def fs_search(self, path: str, pattern: str, **kw: Any) -> ToolCallResponse:
        return self.call("fs.search", {"path": path, "pattern": pattern}, **kw)

    def http_get(self, url: str, **kw: Any) -> ToolCallResponse:
        return self.call("http.get", {"url": url}, **kw)

    def tool_call(self, receipt_id: str, *, wait: float = 0) -> Tuple[ToolCallResponse, bool]:
        """GET /v1/tool-calls/{receipt_id}?wait=: a parked call's answer and
        whether it is final. A final failure (approval_rejected,
        approval_expired, or the run's own error status) raises
        PortcullisError with .response, as call does."""
        path = "/v1/tool-calls/" + urllib.parse.quote(receipt_id, safe="")
        if wait > 0:
            path += "?wait=%dms" % int(wait * 1000)
        status, data = self._do("GET", path, body=None, retry=_retry_read)
        if not isinstance(data, dict) or "output" not in data:
            err = data.get("error") if isinstance(data, dict) else None
            if isinstance(err, dict):
                raise PortcullisError(status, err.get("code", ""), err.get("message", ""), err.get("details") or {})
            raise PortcullisError(status, "", _snippet(data))
        resp = from_dict(ToolCallResponse, data)
        if status == 200:
            return resp, True
        if status == 202:
            return resp, False
        err = resp.output.error
        raise PortcullisError(status, err.code if err else "", err.message if err else "", err.details if err else {}, resp)

    def wait_for_approval(self, resp: ToolCallResponse, *, timeout: float = 300) -> ToolCallResponse:
        """Waits up to timeout seconds for a parked call (the response of a
        202 approval_required, carried by the PortcullisError call raised)
        to be approved and run, rejected or expired, long-polling the
        gateway. Returns the run's response; raises PortcullisError for
        approval_rejected, approval_expired or a failed run, and
        ApprovalPending (with .response) when timeout passes first."""
        if resp.approval is None or resp.approval.status != "pending" or not resp.receipt_id:
            return resp
        deadline = time.monotonic() + timeout
        last = resp
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ApprovalPending(last)
            wait = min(left, 25.0, max(self.timeout - 5, 1.0)) if self.timeout else min(left, 25.0)
            got, done = self.tool_call(resp.receipt_id, wait=wait)
            if done:
                return got
            last = got

    # -- auditors --------------------------------------------------------
    def receipts(self, **filters: Any) -> ReceiptList:
        """Lists receipts: principal, tool, decision, outcome, error_code,
        rule, session_id, since, until, limit, cursor (pass next_cursor for
        the next page)."""
        q = {k: str(v) for k, v in filters.items() if v is not None and v != ""}
        path = "/v1/receipts" + ("?" + urllib.parse.urlencode(q) if q else "")
        return from_dict(ReceiptList, self._read("GET", path))

    def receipt(self, receipt_id: str) -> Receipt:
        return from_dict(Receipt, self._read("GET", "/v1/receipts/" + urllib.parse.quote(receipt_id, safe="")))

    # -- plumbing --------------------------------------------------------
    def _read(self, method: str, path: str, body: Optional[bytes] = None) -> Dict[str, Any]:
        status, data = self._do(method, path, body=body, retry=_retry_read)
        if status != 200:
            err = data.get("error") if isinstance(data, dict) else None
            if not isinstance(err, dict):
                raise PortcullisError(status, "", _snippet(data))
            raise PortcullisError(status, err.get("code", ""), err.get("message", ""), err.get("details") or {})
        if not isinstance(data, dict):
            raise PortcullisError(status, "", "answer is not a JSON object")
        return data

    def _do(
        self,
        method: str,
        path: str,
        *,
        body: Optional[bytes],
        retry: Callable[[int, Any], bool],
        traceparent: Optional[str] = None,
    ) -> Tuple[int, Any]:
        attempt = 0
        while True:
            status, data, headers = self._once(method, path, body, traceparent)
            if attempt >= self.retries or not retry(status, data):
                return status, data
            self._sleep(self._delay(attempt, headers))
            attempt += 1

    def _once(self, method: str, path: str, body: Optional[bytes], traceparent: Optional[str]) -> Tuple[int, Any, Any]:
        req = urllib.request.Request(self.base_url + path, data=body, method=method)
        if self._token_provider is not None:
            req.add_header("Authorization", "Bearer " + self._token_provider())
        elif self._key:
            req.add_header("Authorization", "Bearer " + self._key)
        req.add_header("Accept", "application/json")
        req.add_header("User-Agent", "portcullis-python-sdk/1")
        if body is not None:
            req.add_header("Content-Type", "application/json")
        tp = traceparent or (self._traceparent() if self._traceparent else None)
        if tp:
            req.add_header("traceparent", tp)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw, status, headers = resp.read(MAX_RESPONSE_BYTES), resp.status, resp.headers
        except urllib.error.HTTPError as e:
            raw, status, headers = e.read(MAX_RESPONSE_BYTES), e.code, e.headers
        try:
            data: Any = json.loads(raw.decode("utf-8")) if raw else None
        except (ValueError, UnicodeDecodeError):
            data = raw.decode("utf-8", "replace")
        return status, data, headers

    def _delay(self, attempt: int, headers: Any) -> float:
        ra = headers.get("Retry-After") if headers is not None else None
        if ra is not None and ra.strip().isdigit():
            return min(float(ra), self.max_backoff)
        window = min(self.backoff * (2 ** attempt), self.max_backoff)
        return window / 2 + random.uniform(0, window / 2)


def _request_body(tool: str, input: Optional[Mapping[str, Any]], call_id: Optional[str], session_id: Optional[str]) -> bytes:
    req: Dict[str, Any] = {"tool": tool, "input": dict(input) if input is not None else {}}
    if call_id:
        req["call_id"] = call_id
    if session_id:
        req["session_id"] = session_id
    return json.dumps(req).encode("utf-8")


def _drop_none(**kw: Any) -> Dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def _retry_tool_call(status: int, data: Any) -> bool:
    if status == 429:
        return True
    if status != 503 or not isinstance(data, dict):
        return False
    err = (data.get("output") or {}).get("error") or {}
    return err.get("code") in _NEVER_RAN


def _retry_read(status: int, _data: Any) -> bool:
    return status in (429, 503)


def _snippet(data: Any) -> str:
    s = data if isinstance(data, str) else json.dumps(data)
    return s[:200] if s else "empty answer"
