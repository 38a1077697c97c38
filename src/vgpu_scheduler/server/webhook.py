"""The mutating admission webhook, `POST /webhook` (§7).

The handler puts device pods under our scheduler name, lets every vendor fill its defaults into
the containers and denies what HAMi denies; the answer is the RFC 6902 patch from the received pod
to the mutated copy. Steps, in HAMi's order:

1. no regular containers ⇒ deny "pod has no containers";
2. a pod bound for another scheduler is allowed unchanged;
3. every vendor's `MutateAdmission` (`Vendor.mutate`) on every init container, then every
   container (a vendor's MutationError, e.g. an invalid gpumem-percentage ⇒ error 500);
4. a privileged container in a GPU pod ⇒ deny;
5. GPU pod ⇒ `spec.schedulerName = --scheduler-name`; already bound to a node ⇒ deny;
6. namespace ResourceQuota exceeded ⇒ deny;
7. allow, with the patch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vgpu_scheduler.devices.protocol import MutationError, Vendors
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.model import ContainerRequests
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.server.plainroute import PlainAnswer, PlainHandler, PlainRoute
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.admission import (
    UNTYPED,
    AdmissionDecodeError,
    AdmissionResponse,
    decode_admission_review,
    encode_admission_review,
)
from vgpu_scheduler.wire.jsonpatch import json_copy
from vgpu_scheduler.wire.quantity import QuantityError, parse_quantity

log = logging.getLogger(__name__)

DEFAULT_SCHEDULER_NAME = "default-scheduler"
MAX_REQUEST_BYTES = 7 * 1024 * 1024  # controller-runtime's limit for admission bodies

QuotaFits = Callable[[str, Sequence[ContainerRequests], int], bool]
"""(namespace, per-container requests (init first), number of init containers) -> fits?

Shaped like `engine.quota.QuotaManager.admission_fits`, which can be passed as is."""


class PodShapeError(ValueError):
    """A pod whose JSON does not decode as a v1 Pod (Go's decoder would fail): code 400."""


# --- decoding checks ----------------------------------------------------------------------------


def _quantity(value: Any, where: str) -> Any:
    # A device quantity that does not parse (`nvidia.com/gpumem: 12Gx`) is denied here with 400, as
    # Go's decoder fails on it; passing the pod would only move the refusal to the filter.
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PodShapeError(f"{where}: a quantity must be a string or a number, not {type(value).__name__}")
    try:
        parse_quantity(str(value))
    except QuantityError as err:
        raise PodShapeError(f"{where}: {err}") from None
    return value


def _check_map(container: Mapping[str, Any], key: str, where: str) -> None:
    values = container.get(key)
    if values is None:
        return
    if not isinstance(values, dict):
        raise PodShapeError(f"{where}.{key} must be an object")
    for name, value in values.items():
        if value is not None:
            _quantity(value, f"{where}.{key}[{name}]")


def _check_pod(pod: Mapping[str, Any]) -> None:
    """Reject what Go could not decode into a v1.Pod, for the fields this webhook reads or writes."""
    if pod.get("kind") not in (None, "Pod") or pod.get("apiVersion") not in (None, "v1"):
        raise PodShapeError(
            f"expected a v1 Pod, got apiVersion={pod.get('apiVersion')!r} kind={pod.get('kind')!r}"
        )
    for key in ("metadata", "spec"):
        if pod.get(key) is not None and not isinstance(pod[key], dict):
            raise PodShapeError(f"pod.{key} must be an object")
    spec = pod.get("spec") or {}
    for key in ("schedulerName", "nodeName", "runtimeClassName"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            raise PodShapeError(f"spec.{key} must be a string")
    for list_key in ("initContainers", "containers"):
        items = spec.get(list_key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise PodShapeError(f"spec.{list_key} must be an array")
        for i, ctr in enumerate(items):
            where = f"spec.{list_key}[{i}]"
            if not isinstance(ctr, dict):
                raise PodShapeError(f"{where} must be an object")
            if ctr.get("name") is not None and not isinstance(ctr["name"], str):
                raise PodShapeError(f"{where}.name must be a string")
            resources = ctr.get("resources")
            if resources is not None:
                if not isinstance(resources, dict):
                    raise PodShapeError(f"{where}.resources must be an object")
                _check_map(resources, "limits", f"{where}.resources")
                _check_map(resources, "requests", f"{where}.resources")
            env = ctr.get("env")
            if env is not None and not (isinstance(env, list) and all(isinstance(e, dict) for e in env)):
                raise PodShapeError(f"{where}.env must be an array of objects")
            sc = ctr.get("securityContext")
            if sc is not None and (
                not isinstance(sc, dict) or not isinstance(sc.get("privileged", False), bool | None)
            ):
                raise PodShapeError(f"{where}.securityContext.privileged must be a boolean")


# --- the handler --------------------------------------------------------------------------------


def _containers(spec: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    return list(spec.get(key) or [])


def _first_privileged(spec: Mapping[str, Any]) -> str | None:
    for ctr in _containers(spec, "initContainers") + _containers(spec, "containers"):
        if (ctr.get("securityContext") or {}).get("privileged") is True:
            return str(ctr.get("name") or "")
    return None


def review_pod(
    original: Mapping[str, Any],
    opts: SchedulerOptions,
    vendors: Vendors,
    *,
    quota_fits: QuotaFits | None = None,
    namespace: str = "",
) -> AdmissionResponse:
    """§7 on a decoded pod: the admission decision and, when allowed, the patch.

    `original` is not modified. Raises PodShapeError for JSON that is not a v1 Pod (answered 400).
    """
    _check_pod(original)
    pod: dict[str, Any] = json_copy(dict(original))
    if not isinstance(pod.get("spec"), dict):
        pod["spec"] = {}
    spec = pod["spec"]
    ns = objects.namespace(pod) or namespace
    ref = f"{ns}/{objects.name(pod) or objects.metadata(pod).get('generateName') or ''}"

    if not _containers(spec, "containers"):
        log.warning("Processing admission hook for pod %s - Denying admission as pod has no containers", ref)
        return AdmissionResponse.deny("pod has no containers")

    current, ours = spec.get("schedulerName") or "", opts.scheduler_name
    if not (
        current == ""
        or (ours and current == ours)
        or (current == DEFAULT_SCHEDULER_NAME and opts.force_overwrite_default_scheduler)
    ):
        log.debug("Processing admission hook for pod %s - Pod already has different scheduler assigned", ref)
        return AdmissionResponse.allow("pod already has different scheduler assigned")

    has_gpu = False
    try:
        for ctr in _containers(spec, "initContainers") + _containers(spec, "containers"):
            for vendor in vendors:
                has_gpu = vendor.mutate(ctr, pod) or has_gpu
    except MutationError as err:
        log.error("validating pod failed:%s", err)
        return AdmissionResponse.error(500, str(err))

    privileged = _first_privileged(spec)
    if privileged is not None and has_gpu:
        log.warning(
            "Processing admission hook for pod %s - Denying admission as container %s is privileged",
            ref,
            privileged,
        )
        return AdmissionResponse.deny(f"container {privileged} is privileged")

    if not has_gpu:
        log.debug("Processing admission hook for pod %s - Allowing admission: no GPU resource found", ref)
    elif ours:
        spec["schedulerName"] = ours
        if spec.get("nodeName"):
            log.info("Processing admission hook for pod %s - Pod already has node assigned", ref)
            return AdmissionResponse.deny("pod has node assigned")

    n_init = objects.init_container_count(pod)
    if quota_fits is not None and not quota_fits(ns, pod_requests(pod, vendors), n_init):
        log.info("Processing admission hook for pod %s - Denying admission", ref)
        return AdmissionResponse.deny("exceeding resource quota")
    return AdmissionResponse.patched(original, pod)


def handle_admission_review(
    body: bytes,
    opts: SchedulerOptions,
    vendors: Vendors,
    quota_fits: QuotaFits | None = None,
) -> tuple[int, dict[str, Any]]:
    """An AdmissionReview request body -> (HTTP status, AdmissionReview response).

    The HTTP status is always 200, as with controller-runtime: failures are reported inside the
    review (`allowed: false` with `status.code` 400/403/500).
    """
    try:
        request = decode_admission_review(body)
    except AdmissionDecodeError as err:
        log.error("unable to decode the request: %s", err)
        return 200, encode_admission_review(err.review_type, err.uid, AdmissionResponse.error(400, str(err)))
    try:
        response = review_pod(
            request.object, opts, vendors, quota_fits=quota_fits, namespace=request.namespace
        )
    except PodShapeError as err:
        log.error("Failed to decode request: %s", err)
        response = AdmissionResponse.error(400, str(err))
    return 200, encode_admission_review(request.review_type, request.uid, response)


def webhook_handler(
    opts: SchedulerOptions,
    vendors: Vendors,
    quota_fits: QuotaFits | None = None,
) -> PlainHandler:
    """The handler for `POST /webhook` (controller-runtime's transport checks included); a plain
    route, so HTTP/2 calls it without aiohttp's request machinery (plainroute.py)."""

    async def answer(body: bytes, content_type: str) -> PlainAnswer:
        if len(body) > MAX_REQUEST_BYTES:
            error = AdmissionResponse.error(
                413, f"request entity is too large; limit is {MAX_REQUEST_BYTES} bytes"
            )
            return _json_answer(200, encode_admission_review(UNTYPED, "", error))
        if body and content_type != "application/json":  # an empty body is reported first
            error = AdmissionResponse.error(400, f"contentType={content_type}, expected application/json")
            return _json_answer(200, encode_admission_review(UNTYPED, "", error))
        status, review = handle_admission_review(body, opts, vendors, quota_fits)
        return _json_answer(status, review)

    return PlainHandler(PlainRoute(MAX_REQUEST_BYTES, answer))


def _json_answer(status: int, review: Mapping[str, Any]) -> PlainAnswer:
    # What aiohttp's json_response wrote: json.dumps with its defaults, and this content type.
    return PlainAnswer(status, "application/json; charset=utf-8", json.dumps(review).encode())
