"""The exact failure Statuses kube-apiserver 1.36 answers, built in one place.

Clients branch on code, reason and sometimes message (client-go's conflict retry, the reflector's
410 relist), so every text here is copied from a recorded answer (fixtures/kube-1.36/api/) rather
than paraphrased.
"""

from __future__ import annotations

from vgpu_scheduler.cluster.api import ResourceType
from vgpu_scheduler.cluster.errors import ApiError, details, status_body

MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"
EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)


def not_found(rt: ResourceType, name: str) -> ApiError:
    """404 for a named object."""
    return ApiError.make(
        404, f'{rt.qualified} "{name}" not found', details=details(name, rt.plural, rt.group)
    )


def no_such_resource() -> ApiError:
    """404 for a path the server does not serve (the body has empty details, unlike `not_found`)."""
    return ApiError.make(404, "the server could not find the requested resource", details={})


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    """409 Conflict on a named object."""
    return ApiError.make(
        409,
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
        details=details(name, rt.plural, rt.group),
    )


def storage_error(rt: ResourceType, key: str, msg: str) -> str:
    """The etcd3 storage layer's text for a failed precondition (wrapped into a 409 by `conflict`)."""
    return (
        f"StorageError: invalid object, Code: 4, Key: /registry/{rt.etcd_prefix}/{key}, ResourceVersion: 0, "
        f"AdditionalErrorMsg: {msg}"
    )


def too_large_rv(rv: int, current: int) -> ApiError:
    """504 for a resourceVersion from the future (the client should retry after a second)."""
    return ApiError(
        504,
        status_body(
            504,
            "Timeout",
            f"Too large resource version: {rv}, current: {current}",
            {
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1,
            },
        ),
    )


def parse_int(value: str, what: str) -> int:
    """An integer query parameter; 400 if it is not one."""
    try:
        return int(value)
    except ValueError:
        raise ApiError.make(400, f"invalid {what}: {value!r}") from None


def parse_float(value: str, what: str) -> float:
    """A number query parameter (watch timeouts: fractions let tests use short ones); 400 if not one."""
    try:
        return float(value)
    except ValueError:
        raise ApiError.make(400, f"invalid {what}: {value!r}") from None
