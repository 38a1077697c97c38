"""Errors of the Kubernetes API layer, and builders for `Status` bodies.

`ApiError` carries the `Status` object the API server answered. The in-memory cluster raises the
same errors with the same bodies (see `status_body`), so callers cannot tell the two apart.
"""

from __future__ import annotations

from typing import Any

# Reason strings the API server uses for each HTTP status when it has nothing more specific
# (k8s.io/apimachinery/pkg/api/errors). 410 is "Expired" for too-old resource versions; "Gone" is
# the generic reason.
REASON_FOR_CODE: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(
    code: int,
    reason: str,
    message: str,
    details: dict[str, Any] | None = None,
    *,
    continue_token: str | None = None,
) -> dict[str, Any]:
    """A failure `Status` with the key order kube-apiserver writes (metadata, status, message,
    reason, details, code)."""
    meta: dict[str, Any] = {} if continue_token is None else {"continue": continue_token}
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": meta,
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def success_status(code: int = 201) -> dict[str, Any]:
    """The `Status` that pods/binding answers with (fixtures: pods-binding.response.json)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def details(name: str, kind: str, group: str = "") -> dict[str, Any]:
    """StatusDetails in Go field order: name, group (omitted when empty), kind."""
    out: dict[str, Any] = {"name": name}
    if group:
        out["group"] = group
    out["kind"] = kind
    return out


class ApiError(Exception):
    """A non-success answer of the API server (or of the in-memory cluster)."""

    def __init__(self, status: int, body: dict[str, Any] | None = None) -> None:
        if not isinstance(body, dict) or body.get("kind") != "Status":
            # Not a Status (proxy error page, empty body): synthesise one so callers see one shape.
            text = "" if body is None else str(body.get("message", body) if isinstance(body, dict) else body)
            body = status_body(status, REASON_FOR_CODE.get(status, "Unknown"), text or f"HTTP {status}")
        self.status = status
        self.body = body
        reason = body.get("reason")
        self.reason = reason if isinstance(reason, str) and reason else REASON_FOR_CODE.get(status, "Unknown")
        message = body.get("message")
        self.message = message if isinstance(message, str) else ""
        super().__init__(f"{status} {self.reason}: {self.message}")

    @classmethod
    def make(
        cls, code: int, message: str, *, reason: str | None = None, details: dict[str, Any] | None = None
    ) -> ApiError:
        return cls(code, status_body(code, reason or REASON_FOR_CODE.get(code, "Unknown"), message, details))


class ApiConnectionError(Exception):
    """The request did not get an answer: connection refused/reset, TLS failure, timeout, or a
    watch stream cut in the middle. Always worth retrying with backoff."""


def is_not_found(err: BaseException) -> bool:
    return isinstance(err, ApiError) and err.status == 404


def is_conflict(err: BaseException) -> bool:
    """409 with reason Conflict (stale resourceVersion, UID precondition, already bound)."""
    return isinstance(err, ApiError) and err.status == 409 and err.reason == "Conflict"


def is_already_exists(err: BaseException) -> bool:
    return isinstance(err, ApiError) and err.status == 409 and err.reason == "AlreadyExists"


def is_gone(err: BaseException) -> bool:
    """410: the resourceVersion (or continue token) is older than the server keeps history for."""
    return isinstance(err, ApiError) and (err.status == 410 or err.reason in ("Expired", "Gone"))


def is_invalid(err: BaseException) -> bool:
    return isinstance(err, ApiError) and err.status == 422
