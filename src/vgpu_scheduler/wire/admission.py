"""AdmissionReview envelopes (`admission.k8s.io/v1` and `v1beta1`) as controller-runtime speaks them.

HAMi's webhook runs inside controller-runtime, so kube-apiserver sees its answers in that shape:
the response carries the request's uid and always `status.code` (200 unless a denial or error
says otherwise), and a mutation is a base64 RFC 6902 patch with `patchType: "JSONPatch"` (no
patch fields when nothing changed). Everything is answered with HTTP 200; failures live inside
the review. Two envelopes, as in controller-runtime:

* once the body decoded as an AdmissionReview, the answer echoes its apiVersion and kind as sent
  (controller-runtime decodes into an unregistered type, so it checks neither; both absent ⇒
  `admission.k8s.io/v1 AdmissionReview`). A missing uid is not an error: it is echoed empty;
  a missing request or object is "there is no content to decode" (code 400);
* a body that never decoded (empty, too large, wrong Content-Type, not JSON) is answered with an
  untyped review: no apiVersion and no kind (Go's omitempty on the zero TypeMeta).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import msgspec

from vgpu_scheduler.wire.jsonpatch import Op, make_patch

_decode = msgspec.json.Decoder().decode

ADMISSION_V1 = "admission.k8s.io/v1"
ADMISSION_V1BETA1 = "admission.k8s.io/v1beta1"
ADMISSION_VERSIONS = (ADMISSION_V1, ADMISSION_V1BETA1)
KIND = "AdmissionReview"
NO_CONTENT = "there is no content to decode"


@dataclass(frozen=True, slots=True)
class ReviewType:
    """apiVersion and kind of the review answered ("" = the field is left out)."""

    api_version: str = ""
    kind: str = ""


UNTYPED = ReviewType()
REVIEW_V1 = ReviewType(ADMISSION_V1, KIND)


class AdmissionDecodeError(ValueError):
    """A body that is not a usable AdmissionReview; answered with code 400."""

    def __init__(self, message: str, *, review_type: ReviewType = UNTYPED, uid: str = "") -> None:
        super().__init__(message)
        self.review_type = review_type
        self.uid = uid


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of `AdmissionReview.request` the webhook uses."""

    review_type: ReviewType
    uid: str
    object: dict[str, Any]
    namespace: str = ""
    name: str = ""
    operation: str = ""


def _review_type(review: dict[str, Any]) -> ReviewType:
    api_version, kind = review.get("apiVersion", ""), review.get("kind", "")
    for key, value in (("apiVersion", api_version), ("kind", kind)):
        if value is not None and not isinstance(value, str):
            raise AdmissionDecodeError(f"couldn't get version/kind; json parse error: {key} must be a string")
    found = ReviewType(api_version or "", kind or "")
    return found if found != UNTYPED else REVIEW_V1


def decode_admission_review(body: bytes) -> AdmissionRequest:
    """Parse an AdmissionReview request body; raises AdmissionDecodeError with a clear message."""
    if not body:
        raise AdmissionDecodeError("request body is empty")
    try:
        review = _decode(body)
    except (ValueError, msgspec.DecodeError) as err:
        raise AdmissionDecodeError(f"couldn't decode AdmissionReview: {err}") from None
    if not isinstance(review, dict):
        raise AdmissionDecodeError("couldn't decode AdmissionReview: body is not a JSON object")
    review_type = _review_type(review)
    request = review.get("request")
    if request is None:
        raise AdmissionDecodeError(NO_CONTENT, review_type=review_type)
    if not isinstance(request, dict):
        raise AdmissionDecodeError("couldn't decode AdmissionReview: request is not a JSON object")
    uid = request.get("uid")
    if uid is not None and not isinstance(uid, str):
        raise AdmissionDecodeError("couldn't decode AdmissionReview: request.uid is not a string")
    uid = uid or ""
    obj = request.get("object")
    if obj is None:
        raise AdmissionDecodeError(NO_CONTENT, review_type=review_type, uid=uid)
    if not isinstance(obj, dict):
        raise AdmissionDecodeError("request.object is not a JSON object", review_type=review_type, uid=uid)

    def text(key: str) -> str:
        value = request.get(key)
        return value if isinstance(value, str) else ""

    return AdmissionRequest(
        review_type=review_type,
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


def encode_admission_review(review_type: ReviewType, uid: str, response: AdmissionResponse) -> dict[str, Any]:
    """The AdmissionReview to send back (`review_type` from the request, or UNTYPED)."""
    status: dict[str, Any] = {"metadata": {}, "code": response.code}
    if response.reason:
        status["reason"] = response.reason
    if response.message:
        status["message"] = response.message
    body: dict[str, Any] = {"uid": uid, "allowed": response.allowed, "status": status}
    if response.patch:
        body["patch"] = encode_patch(response.patch)
        body["patchType"] = "JSONPatch"
    review: dict[str, Any] = {}
    if review_type.kind:
        review["kind"] = review_type.kind
    if review_type.api_version:
        review["apiVersion"] = review_type.api_version
    review["response"] = body
    return review
