"""AdmissionReview envelopes (`admission.k8s.io/v1` and `v1beta1`) as controller-runtime speaks them.

HAMi's webhook runs inside controller-runtime, so kube-apiserver sees its answers in that shape:
the response echoes the request's apiVersion and uid, always carries `status.code` (200 unless a
denial or error says otherwise), and a mutation is a base64 RFC 6902 patch with
`patchType: "JSONPatch"` (no patch fields when nothing changed). Transport-level problems
(undecodable body, missing request or uid) are answered as `allowed: false` with code 400,
still with HTTP 200 — the status lives inside the review, as in controller-runtime.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.wire.jsonpatch import Op, make_patch

ADMISSION_V1 = "admission.k8s.io/v1"
ADMISSION_V1BETA1 = "admission.k8s.io/v1beta1"
ADMISSION_VERSIONS = (ADMISSION_V1, ADMISSION_V1BETA1)
KIND = "AdmissionReview"


class AdmissionDecodeError(ValueError):
    """A body that is not a usable AdmissionReview; answered with code 400."""

    def __init__(self, message: str, *, api_version: str = ADMISSION_V1, uid: str = "") -> None:
        super().__init__(message)
        self.api_version = api_version
        self.uid = uid


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of `AdmissionReview.request` the webhook uses."""

    api_version: str
    uid: str
    object: dict[str, Any]
    namespace: str = ""
    name: str = ""
    operation: str = ""


def decode_admission_review(body: bytes) -> AdmissionRequest:
    """Parse an AdmissionReview request body; raises AdmissionDecodeError with a clear message."""
    if not body:
        raise AdmissionDecodeError("request body is empty")
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise AdmissionDecodeError(f"couldn't decode AdmissionReview: {err}") from None
    if not isinstance(review, dict):
        raise AdmissionDecodeError("couldn't decode AdmissionReview: body is not a JSON object")
    api_version = review.get("apiVersion")
    kind = review.get("kind")
    if api_version is None and kind is None:
        api_version = ADMISSION_V1  # controller-runtime assumes v1 for an untyped review
    if api_version not in ADMISSION_VERSIONS or kind not in (KIND, None):
        raise AdmissionDecodeError(
            f"unsupported AdmissionReview type: apiVersion={api_version!r} kind={kind!r}; "
            f"expected kind {KIND} in {' or '.join(ADMISSION_VERSIONS)}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise AdmissionDecodeError("AdmissionReview has no request", api_version=api_version)
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise AdmissionDecodeError("AdmissionReview request has no uid", api_version=api_version)
    obj = request.get("object")
    if obj is None:
        raise AdmissionDecodeError("there is no content to decode", api_version=api_version, uid=uid)
    if not isinstance(obj, dict):
        raise AdmissionDecodeError("request.object is not a JSON object", api_version=api_version, uid=uid)

    def text(key: str) -> str:
        value = request.get(key)
        return value if isinstance(value, str) else ""

    return AdmissionRequest(
        api_version=api_version,
        uid=uid,
        object=obj,
        namespace=text("namespace"),
        name=text("name"),
        operation=text("operation"),
    )


@dataclass(frozen=True, slots=True)
class AdmissionResponse:
    """`AdmissionReview.response` without the uid (added when encoding)."""

    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    patch: list[Op] = field(default_factory=list)

    @classmethod
    def allow(cls, message: str = "") -> AdmissionResponse:
        return cls(allowed=True, message=message)

    @classmethod
    def deny(cls, message: str) -> AdmissionResponse:
        """controller-runtime's `Denied`: code 403, reason Forbidden."""
        return cls(allowed=False, code=403, reason="Forbidden", message=message)

    @classmethod
    def error(cls, code: int, message: str) -> AdmissionResponse:
        """controller-runtime's `Errored`: the code and the error text, no reason."""
        return cls(allowed=False, code=code, message=message)

    @classmethod
    def patched(cls, original: Any, mutated: Any) -> AdmissionResponse:
        """Allowed, with the RFC 6902 diff from `original` to `mutated` (possibly empty)."""
        return cls(allowed=True, patch=make_patch(original, mutated))


def encode_patch(ops: list[Op]) -> str:
    """The `patch` field: base64 of the compact JSON array of operations."""
    raw = json.dumps(ops, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.b64encode(raw).decode("ascii")


def encode_admission_review(api_version: str, uid: str, response: AdmissionResponse) -> dict[str, Any]:
    """The AdmissionReview to send back (same apiVersion as the request)."""
    status: dict[str, Any] = {"metadata": {}, "code": response.code}
    if response.reason:
        status["reason"] = response.reason
    if response.message:
        status["message"] = response.message
    body: dict[str, Any] = {"uid": uid, "allowed": response.allowed, "status": status}
    if response.patch:
        body["patch"] = encode_patch(response.patch)
        body["patchType"] = "JSONPatch"
    version = api_version if api_version in ADMISSION_VERSIONS else ADMISSION_V1
    return {"kind": KIND, "apiVersion": version, "response": body}
