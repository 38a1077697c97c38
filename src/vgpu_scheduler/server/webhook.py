"""The mutating admission webhook, `POST /webhook` (§7).

The handler puts GPU pods under our scheduler name, fills NVIDIA defaults into the containers and
denies what HAMi denies; the answer is the RFC 6902 patch from the received pod to the mutated copy.
Steps, in HAMi's order:

1. no regular containers ⇒ deny "pod has no containers";
2. a pod bound for another scheduler is allowed unchanged;
3. NVIDIA `MutateAdmission` on every init container, then every container (an invalid
   gpumem-percentage ⇒ error 500);
4. a privileged container in a GPU pod ⇒ deny;
5. GPU pod ⇒ `spec.schedulerName = --scheduler-name`; already bound to a node ⇒ deny;
6. namespace ResourceQuota exceeded ⇒ deny;
7. allow, with the patch.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from vgpu_scheduler.config import NvidiaConfig
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.model import ContainerRequests
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.admission import (
    UNTYPED,
    AdmissionDecodeError,
    AdmissionResponse,
    decode_admission_review,
    encode_admission_review,
)
from vgpu_scheduler.wire.quantity import QuantityError, parse_quantity

log = logging.getLogger(__name__)

DEFAULT_SCHEDULER_NAME = "default-scheduler"
TASK_PRIORITY_ENV = "CUDA_TASK_PRIORITY"
CORE_POLICY_ENV = "GPU_CORE_UTILIZATION_POLICY"
MAX_REQUEST_BYTES = 7 * 1024 * 1024  # controller-runtime's limit for admission bodies

QuotaFits = Callable[[str, Sequence[ContainerRequests], int], bool]
"""(namespace, per-container requests (init first), number of init containers) -> fits?

Shaped like `engine.quota.QuotaManager.admission_fits`, which can be passed as is."""


class PodShapeError(ValueError):
    """A pod whose JSON does not decode as a v1 Pod (Go's decoder would fail): code 400."""


class MutationError(ValueError):
    """A container a backend's MutateAdmission rejects: code 500."""


# --- decoding checks ----------------------------------------------------------------------------


def _quantity(value: Any, where: str) -> Any:
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


# --- NVIDIA MutateAdmission ---------------------------------------------------------------------


def _present(ctr: Mapping[str, Any], section: str, name: str) -> bool:
    values = (ctr.get("resources") or {}).get(section) or {}
    return bool(name) and name in values


def _value(ctr: Mapping[str, Any], name: str) -> int | None:
    """Go's `Quantity.Value()` (rounded up, away from zero) of limits[name], else requests[name]."""
    for section in ("limits", "requests"):
        if _present(ctr, section, name):
            raw = ctr["resources"][section][name]
            if raw is None:
                return 0
            exact = parse_quantity(str(raw))
            return math.ceil(exact) if exact >= 0 else math.floor(exact)
    return None


def _binary_si(n: int) -> str:
    """`resource.NewQuantity(n, BinarySI).String()` for n >= 0: "1", "1023", "1Ki", "1536"."""
    if n < 1024:
        return str(n)
    exponent = 0
    while n % 1024 == 0 and exponent < 6:
        n //= 1024
        exponent += 1
    return f"{n}{('', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei')[exponent]}"


def _set_limit(ctr: dict[str, Any], name: str, value: str) -> None:
    resources = ctr.get("resources")
    if not isinstance(resources, dict):
        resources = ctr["resources"] = {}
    if not isinstance(resources.get("limits"), dict):
        resources["limits"] = {}
    resources["limits"][name] = value


def _append_env(ctr: dict[str, Any], name: str, value: str) -> None:
    if not isinstance(ctr.get("env"), list):
        ctr["env"] = []
    ctr["env"].append({"name": name, "value": value})


def mutate_nvidia_container(ctr: dict[str, Any], pod: dict[str, Any], cfg: NvidiaConfig) -> bool:
    """NVIDIA `MutateAdmission` on one container (mutated in place); True if it asks for NVIDIA GPUs."""
    pct_name = cfg.resource_memory_percentage_name
    pct = _value(ctr, pct_name)
    if pct is not None and not 0 <= pct <= 100:
        name = ctr.get("name") or ""
        raise MutationError(
            f"invalid {pct_name} value {pct} in container {name}: must be an integer between 0 and 100"
        )
    if _present(ctr, "limits", cfg.resource_priority_name):
        _append_env(ctr, TASK_PRIORITY_ENV, str(_value(ctr, cfg.resource_priority_name)))
    if cfg.gpu_core_policy not in ("", "default"):
        _append_env(ctr, CORE_POLICY_ENV, cfg.gpu_core_policy)

    count, cores = cfg.resource_count_name, cfg.resource_core_name
    has_gpu = _present(ctr, "limits", count)
    # Only memory/cores/percentage given: the pod still means one (or defaultGPUNum) GPU.
    implied = any(_present(ctr, "limits", n) for n in (cores, cfg.resource_memory_name, pct_name))
    if not has_gpu and implied and cfg.default_gpu_num > 0:
        _set_limit(ctr, count, _binary_si(cfg.default_gpu_num))
        has_gpu = True
    # Whole-card request (no cores, and 100 % or no memory): reserve all cores so no one shares it.
    # This is also how a count given only in `requests` makes the pod a GPU pod.
    if (
        count
        and cores
        and (_present(ctr, "limits", count) or _present(ctr, "requests", count))
        and not (_present(ctr, "limits", cores) or _present(ctr, "requests", cores))
    ):
        if pct is not None:
            exclusive = pct == 100
        else:
            exclusive = not cfg.resource_memory_name or _value(ctr, cfg.resource_memory_name) is None
        if exclusive:
            _set_limit(ctr, cores, "100")
            has_gpu = True

    spec = pod["spec"]
    if has_gpu and spec.get("runtimeClassName") is None and cfg.runtime_class_name:
        spec["runtimeClassName"] = cfg.runtime_class_name
    if not has_gpu and cfg.overwrite_env:
        _append_env(ctr, "NVIDIA_VISIBLE_DEVICES", "none")
    return has_gpu


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
    cfg: NvidiaConfig,
    *,
    quota_fits: QuotaFits | None = None,
    namespace: str = "",
) -> AdmissionResponse:
    """§7 on a decoded pod: the admission decision and, when allowed, the patch.

    `original` is not modified. Raises PodShapeError for JSON that is not a v1 Pod (answered 400).
    """
    _check_pod(original)
    pod: dict[str, Any] = copy.deepcopy(dict(original))
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
            has_gpu = mutate_nvidia_container(ctr, pod, cfg) or has_gpu
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
    if quota_fits is not None and not quota_fits(ns, pod_requests(pod, cfg), n_init):
        log.info("Processing admission hook for pod %s - Denying admission", ref)
        return AdmissionResponse.deny("exceeding resource quota")
    return AdmissionResponse.patched(original, pod)


def handle_admission_review(
    body: bytes,
    opts: SchedulerOptions,
    cfg: NvidiaConfig,
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
        response = review_pod(request.object, opts, cfg, quota_fits=quota_fits, namespace=request.namespace)
    except PodShapeError as err:
        log.error("Failed to decode request: %s", err)
        response = AdmissionResponse.error(400, str(err))
    return 200, encode_admission_review(request.review_type, request.uid, response)


async def _read_limited(request: web.Request, limit: int) -> bytes | None:
    """The body, or None when it exceeds `limit` (independent of the app's client_max_size)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def webhook_handler(
    opts: SchedulerOptions,
    cfg: NvidiaConfig,
    quota_fits: QuotaFits | None = None,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The aiohttp handler for `POST /webhook` (controller-runtime's transport checks included)."""

    async def handle(request: web.Request) -> web.Response:
        body = await _read_limited(request, MAX_REQUEST_BYTES)
        if body is None:
            error = AdmissionResponse.error(
                413, f"request entity is too large; limit is {MAX_REQUEST_BYTES} bytes"
            )
            return web.json_response(encode_admission_review(UNTYPED, "", error))
        content_type = request.headers.get("Content-Type", "")
        if body and content_type != "application/json":  # an empty body is reported first
            error = AdmissionResponse.error(400, f"contentType={content_type}, expected application/json")
            return web.json_response(encode_admission_review(UNTYPED, "", error))
        status, review = handle_admission_review(body, opts, cfg, quota_fits)
        return web.json_response(review, status=status)

    return handle
