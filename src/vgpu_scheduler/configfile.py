"""Reading the device configuration (§2) into the typed shapes of `vgpu_scheduler.config`.

`load_device_config` reads and validates the YAML file named by `--device-config-file` and
`default_device_config` loads the Helm chart's default one shipped in `data/device-config.yaml`.

Loading rules: the `nvidia` section is typed (keys it omits take the chart defaults); other vendor
sections are kept raw for their backends; a key HAMi's config structs do not have (a top-level
section, a key of a section or of a list entry, such as `knownMigGeometries` of older charts or a
misspelt `resourceCountNmae`) is ignored, as Go's decoder ignores it, with one warning per key path
per process; "all configurations are empty" when every section is Go-zero (nulls, zeros, falses,
empties).
"""

from __future__ import annotations

import difflib
import importlib.resources
import logging
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from vgpu_scheduler.config import DeviceConfig, MigProfileAllowlist, NvidiaConfig
from vgpu_scheduler.devices.protocol import VendorConfigError
from vgpu_scheduler.devices.registry import REGISTRY, build
from vgpu_scheduler.devices.spec import ConfigShape, Each, VendorSpec

# ---------------------------------------------------------------------------------------------
# Loading and validation of the device config file (`--device-config-file`, §2).

def vendor_sections(registry: Sequence[VendorSpec] = REGISTRY) -> tuple[str, ...]:
    """Top-level keys HAMi's config struct knows (the registry's sections); anything else is ignored
    with a warning."""
    return tuple(spec.section for spec in registry)


VENDOR_SECTIONS: tuple[str, ...] = vendor_sections()

GPU_CORE_POLICIES = ("default", "force", "disable")

# The chart's MIG allowlist (charts/hami/templates/scheduler/device-configmap.yaml, v2.10).
CHART_MIG_PROFILE_ALLOWLIST: tuple[MigProfileAllowlist, ...] = (
    MigProfileAllowlist(("A30",), ("1g.6gb", "2g.12gb", "4g.24gb")),
    MigProfileAllowlist(
        ("A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"), ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")
    ),
    MigProfileAllowlist(
        ("A100-SXM4-80GB", "A100-80GB-PCIe", "A100-PCIE-80GB"), ("1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb")
    ),
    MigProfileAllowlist(("H100-PCIE-80GB", "H100-SXM5-80GB"), ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")),
    MigProfileAllowlist(("H100-PCIE-94GB", "H100-SXM5-94GB"), ("1g.12gb", "2g.24gb", "3g.47gb", "7g.94gb")),
    MigProfileAllowlist(("H20", "H100 on GH200"), ("1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb")),
    MigProfileAllowlist(("H200 NVL", "H200-SXM5"), ("1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb")),
    MigProfileAllowlist(("B200",), ("1g.23gb", "2g.45gb", "3g.90gb", "7g.180gb")),
    MigProfileAllowlist(("RTX PRO 6000 Blackwell Server Edition",), ("1g.24gb", "2g.48gb", "4g.96gb")),
)

CHART_LIB_CUDA_LOG_LEVEL = 1
"""`devices.nvidia.libCudaLogLevel` in the chart's values."""

_MIG_PROFILE = re.compile(r"[0-9]+g\..+\Z")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

log = logging.getLogger(__name__)


class DeviceConfigError(Exception):
    """The device config cannot be used; the message names the file, the key path and the problem."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {problem}")


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


class _Reader:
    """Typed access to one YAML mapping, with errors that carry the key path."""

    def __init__(self, source: str, path: str, data: Mapping[Any, Any]) -> None:
        self.source = source
        self.path = path
        self.data = data

    def error(self, key: str, problem: str) -> DeviceConfigError:
        return DeviceConfigError(self.source, f"{self.path}.{key}" if self.path else key, problem)

    def get(self, key: str) -> Any:
        # A key written without a value (`key:`) is YAML null: treated as absent, i.e. the default.
        return self.data.get(key)

    def get_str(self, key: str, default: str) -> str:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {_describe(value)}")
        return value

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {_describe(value)}")
        return value

    def get_int(self, key: str, default: int, lo: int, hi: int) -> int:
        value = self.get(key)
        if value is None:
            return default
        if type(value) is not int:
            raise self.error(key, f"expected an integer, got {_describe(value)}")
        if not lo <= value <= hi:
            raise self.error(key, f"{value} is out of range [{lo}, {hi}]")
        return value

    def get_number(self, key: str, default: float) -> float:
        value = self.get(key)
        if value is None:
            return default
        if type(value) not in (int, float) or not math.isfinite(value):
            raise self.error(key, f"expected a number, got {_describe(value)}")
        return float(value)


def _parse_allowlist(r: _Reader, key: str) -> tuple[MigProfileAllowlist, ...]:
    raw = r.get(key)
    if raw is None:
        return CHART_MIG_PROFILE_ALLOWLIST
    if not isinstance(raw, list):
        raise r.error(key, f"expected a list of {{models, profiles}}, got {_describe(raw)}")
    out: list[MigProfileAllowlist] = []
    for i, entry in enumerate(raw):
        where = f"{key}[{i}]"
        if not isinstance(entry, dict):
            raise r.error(where, f"expected a mapping with models and profiles, got {_describe(entry)}")
        lists: dict[str, tuple[str, ...]] = {}
        for field_name in ("models", "profiles"):
            items = entry.get(field_name)
            if items is None or items == []:
                raise r.error(
                    f"{where}.{field_name}", "MIG profile allowlist must define models and profiles"
                )
            if not isinstance(items, list):
                raise r.error(f"{where}.{field_name}", f"expected a list of strings, got {_describe(items)}")
            for j, item in enumerate(items):
                if not isinstance(item, str):
                    raise r.error(f"{where}.{field_name}[{j}]", f"expected a string, got {_describe(item)}")
            lists[field_name] = tuple(items)
        for j, profile in enumerate(lists["profiles"]):
            if _MIG_PROFILE.match(profile) is None:
                raise r.error(
                    f"{where}.profiles[{j}]", f'invalid MIG profile "{profile}" (want <n>g.<memory>)'
                )
        out.append(MigProfileAllowlist(models=lists["models"], profiles=lists["profiles"]))
    return tuple(out)


def _parse_log_level(r: _Reader, key: str) -> int | None:
    raw = r.get(key)
    if raw is None:
        return None if key in r.data else CHART_LIB_CUDA_LOG_LEVEL
    # HAMi's field is a string type; the chart writes a bare number. Accept both spellings.
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw)
    if type(raw) is int and raw >= 0:
        return raw
    raise r.error(key, f"expected a non-negative integer log level, got {_describe(raw)}")


def _parse_nvidia(source: str, raw: Any) -> NvidiaConfig:
    """The `nvidia` section; keys it leaves out take the chart defaults.

    Without the section HAMi still registers NVIDIA, with empty resource names, so it matches no
    container: an absent (or null) section gives exactly that.
    """
    if raw is None:
        return NvidiaConfig(
            resource_count_name="",
            resource_memory_name="",
            resource_memory_percentage_name="",
            resource_core_name="",
            resource_priority_name="",
            mig_profile_allowlist=(),
        )
    if not isinstance(raw, dict):
        raise DeviceConfigError(source, "nvidia", f"expected a mapping, got {_describe(raw)}")
    r = _Reader(source, "nvidia", raw)
    d = NvidiaConfig()
    policy = r.get_str("gpuCorePolicy", d.gpu_core_policy) or "default"
    if policy not in GPU_CORE_POLICIES:
        raise r.error("gpuCorePolicy", f"must be one of default, force, disable; got {policy!r}")
    return NvidiaConfig(
        resource_count_name=r.get_str("resourceCountName", d.resource_count_name),
        resource_memory_name=r.get_str("resourceMemoryName", d.resource_memory_name),
        resource_memory_percentage_name=r.get_str(
            "resourceMemoryPercentageName", d.resource_memory_percentage_name
        ),
        resource_core_name=r.get_str("resourceCoreName", d.resource_core_name),
        resource_priority_name=r.get_str("resourcePriorityName", d.resource_priority_name),
        overwrite_env=r.get_bool("overwriteEnv", d.overwrite_env),
        default_memory=r.get_int("defaultMemory", d.default_memory, *_INT32),
        default_cores=r.get_int("defaultCores", d.default_cores, *_INT32),
        default_gpu_num=r.get_int("defaultGPUNum", d.default_gpu_num, *_INT32),
        memory_factor=r.get_int("memoryFactor", d.memory_factor, *_INT32),
        disable_core_limit=r.get_bool("disableCoreLimit", d.disable_core_limit),
        gpu_core_policy=policy,
        runtime_class_name=r.get_str("runtimeClassName", d.runtime_class_name),
        mig_profile_allowlist=_parse_allowlist(r, "migProfileAllowlist"),
        device_split_count=r.get_int("deviceSplitCount", d.device_split_count, 0, _INT64[1]),
        device_memory_scaling=r.get_number("deviceMemoryScaling", d.device_memory_scaling),
        device_core_scaling=r.get_number("deviceCoreScaling", d.device_core_scaling),
        pre_configured_device_memory=r.get_int(
            "preConfiguredDeviceMemory", d.pre_configured_device_memory, *_INT64
        ),
        lib_cuda_log_level=_parse_log_level(r, "libCudaLogLevel"),
        enable_numa_topology=r.get_bool("enableNumaTopology", d.enable_numa_topology),
    )


def config_shape(registry: Sequence[VendorSpec] = REGISTRY) -> ConfigShape:
    """The yaml tags of HAMi v2.10.0's config structs (pkg/scheduler/config.Config and each
    vendor's, as each vendor declares them): what Go's decoder fills. Keys the scheduler itself never
    reads (device-plugin ones) are known too."""
    return {spec.section: spec.keys for spec in registry}


CONFIG_SHAPE: ConfigShape = config_shape()


_warned_keys: set[str] = set()
"""Unknown key paths already warned about: once per process, however often a config is loaded."""


def unknown_keys(
    data: Mapping[Any, Any], shape: ConfigShape = CONFIG_SHAPE, path: str = ""
) -> Iterator[str]:
    """The paths (`nvidia.resourceCountNmae`, `iluvatars[1].chipNmae`) of the keys of `data` that
    `shape` does not have, in file order. Values of the wrong type are left to the typed readers."""
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in shape:
            yield where
            continue
        inner = shape[key]
        if isinstance(inner, Each) and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    yield from unknown_keys(item, inner.shape, f"{where}[{i}]")
        elif isinstance(inner, Mapping) and isinstance(value, dict):
            yield from unknown_keys(value, inner, where)


def _warn_unknown_keys(source: str, data: Mapping[Any, Any], shape: ConfigShape) -> None:
    """A warning per unknown key, not an error: HAMi's decoder ignores such keys, so a config that
    works with HAMi must start here; but a misspelt key silently taking the default is a trap."""
    for path in unknown_keys(data, shape):
        if path in _warned_keys:
            continue
        _warned_keys.add(path)
        parent, _, key = path.rpartition(".")
        close = _closest(key, _shape_at(shape, parent))
        hint = f"; did you mean {close}?" if close else ""
        log.warning("device config %s: unknown key %s (ignored%s)", source, path, hint)


def _shape_at(top: ConfigShape, path: str) -> ConfigShape | None:
    """The shape of the mapping at `path` (`vnpus.configs[0]`) in `top`, None when there is none."""
    shape: ConfigShape | Each | None = top
    for part in path.split(".") if path else ():
        if not isinstance(shape, Mapping):
            return None
        shape = shape.get(part.partition("[")[0])
        if isinstance(shape, Each):
            shape = shape.shape
    return shape if isinstance(shape, Mapping) else None


def _closest(key: str, shape: ConfigShape | None) -> str:
    """The known key `key` most likely misspells (case aside: `aicpu` is `aiCPU`), or ""."""
    known = {k.lower(): k for k in shape or ()}
    close = difflib.get_close_matches(key.lower(), list(known), n=1)
    return known[close[0]] if close else ""


def _is_empty(value: Any) -> bool:
    """Go's "equal to the zero value": nothing but nulls, zeros, falses and empty containers."""
    if value is None or value is False or value == 0 or value == "":
        return True
    if isinstance(value, dict):
        return all(_is_empty(v) for v in value.values())
    if isinstance(value, list):
        return not value
    return False


# libyaml's C loader when PyYAML was built with it (about 10x faster), else the pure-Python one.
_YamlLoader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_device_config(
    text: str, source: str = "<string>", *, registry: Sequence[VendorSpec] = REGISTRY
) -> DeviceConfig:
    """Parse and validate device config YAML; `source` names it in error messages. The sections are
    the `registry`'s (each vendor declares its own)."""
    try:
        data = yaml.load(text, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        raise DeviceConfigError(source, "", f"invalid YAML: {exc}") from None
    if data is None:
        raise DeviceConfigError(source, "", "the device config is empty")
    if not isinstance(data, dict):
        raise DeviceConfigError(source, "", f"expected a mapping of vendor sections, got {_describe(data)}")
    _warn_unknown_keys(source, data, CONFIG_SHAPE if registry is REGISTRY else config_shape(registry))
    listed = {spec.section: spec.listed for spec in registry}
    data = {key: value for key, value in data.items() if key in listed}
    # Types first, so a mistyped key is reported as such rather than as "empty".
    nvidia = _parse_nvidia(source, data.get("nvidia"))
    for key, value in data.items():
        if key == "nvidia" or value is None:
            continue
        wanted = list if listed[key] else dict
        if not isinstance(value, wanted):
            raise DeviceConfigError(source, key, f"expected a {_KIND[wanted]}, got {_describe(value)}")
    if all(_is_empty(v) for v in data.values()):
        raise DeviceConfigError(source, "", "all configurations are empty")
    config = DeviceConfig(nvidia=nvidia, other_vendors={k: v for k, v in data.items() if k != "nvidia"})
    try:  # each registered vendor reads its own section
        build(config, registry=registry)
    except VendorConfigError as exc:
        raise DeviceConfigError(source, exc.key, exc.problem) from None
    return config


_KIND = {list: "list", dict: "mapping"}


def load_device_config(path: str | os.PathLike[str]) -> DeviceConfig:
    """Read and validate the file named by `--device-config-file`."""
    source = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise DeviceConfigError(source, "", f"cannot read the device config: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DeviceConfigError(source, "", f"the device config is not UTF-8 text: {exc}") from None
    return parse_device_config(text, source)


DEFAULT_DEVICE_CONFIG_RESOURCE = "data/device-config.yaml"


def default_device_config() -> DeviceConfig:
    """The Helm chart's default device config, shipped with the package (simulator default)."""
    ref = importlib.resources.files("vgpu_scheduler").joinpath(DEFAULT_DEVICE_CONFIG_RESOURCE)
    return parse_device_config(ref.read_text(encoding="utf-8"), f"<package>/{DEFAULT_DEVICE_CONFIG_RESOURCE}")
