"""Device config loading (§2): chart defaults, key mapping, every validation error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from vgpu_scheduler.config import DeviceConfig, MigProfileAllowlist, NvidiaConfig
from vgpu_scheduler.configfile import (
    CHART_MIG_PROFILE_ALLOWLIST,
    DeviceConfigError,
    default_device_config,
    load_device_config,
    parse_device_config,
    unknown_keys,
)

MUST_DEFINE = "MIG profile allowlist must define models and profiles"
CHART_NVIDIA = NvidiaConfig(mig_profile_allowlist=CHART_MIG_PROFILE_ALLOWLIST, lib_cuda_log_level=1)


def parse(text: str) -> DeviceConfig:
    return parse_device_config(textwrap.dedent(text), "dc.yaml")


# ---------------------------------------------------------------------------------------------
# Defaults


def test_default_device_config_is_the_chart_one() -> None:
    config = default_device_config()
    assert config.nvidia == CHART_NVIDIA
    assert set(config.other_vendors) == {
        "cambricon",
        "hygon",
        "metax",
        "mthreads",
        "iluvatars",
        "enflame",
        "kunlun",
        "awsneuron",
        "amd",
        "vastai",
        "biren",
        "vnpus",
    }


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("cambricon", "resourceCountName", "cambricon.com/vmlu"),
        ("cambricon", "resourceMemoryName", "cambricon.com/mlu.smlu.vmemory"),
        ("cambricon", "resourceCoreName", "cambricon.com/mlu.smlu.vcore"),
        ("hygon", "resourceCountName", "hygon.com/dcunum"),
        ("hygon", "resourceMemoryName", "hygon.com/dcumem"),
        ("hygon", "resourceCoreName", "hygon.com/dcucores"),
        ("metax", "resourceCountName", "metax-tech.com/gpu"),
        ("metax", "resourceVCountName", "metax-tech.com/sgpu"),
        ("metax", "resourceVMemoryName", "metax-tech.com/vmemory"),
        ("metax", "resourceVCoreName", "metax-tech.com/vcore"),
        ("mthreads", "resourceCountName", "mthreads.com/vgpu"),
        ("mthreads", "resourceMemoryName", "mthreads.com/sgpu-memory"),
        ("mthreads", "resourceCoreName", "mthreads.com/sgpu-core"),
        ("enflame", "resourceNameGCU", "enflame.com/gcu"),
        ("enflame", "resourceNameDRSGCU", "enflame.com/drs-gcu"),
        ("enflame", "resourceNameGCUMemory", "enflame.com/gcu-memory"),
        ("enflame", "resourceNameGCUCore", "enflame.com/gcu-core"),
        ("kunlun", "resourceCountName", "kunlunxin.com/xpu"),
        ("kunlun", "resourceVCountName", "kunlunxin.com/vxpu"),
        ("kunlun", "resourceVMemoryName", "kunlunxin.com/vxpu-memory"),
        ("awsneuron", "resourceCountName", "aws.amazon.com/neuron"),
        ("awsneuron", "resourceCoreName", "aws.amazon.com/neuroncore"),
        ("amd", "resourceCountName", "amd.com/gpu"),
        ("amd", "resourceCoreName", "amd.com/gpucores"),
        ("amd", "resourceMemoryName", "amd.com/gpumem"),
        ("vastai", "resourceCountName", "vastaitech.com/va"),
        ("biren", "resourceCountName", "birentech.com/gpu"),
    ],
)
def test_default_vendor_resource_names(section: str, key: str, value: str) -> None:
    assert default_device_config().other_vendors[section][key] == value


def test_default_ascend_and_iluvatar_chips() -> None:
    other = default_device_config().other_vendors
    assert [c["commonWord"] for c in other["vnpus"]["configs"]] == [
        "Ascend910A",
        "Ascend910B2",
        "Ascend910B3",
        "Ascend910B4-1",
        "Ascend910B4",
        "Ascend310P",
        "Ascend910C",
    ]
    assert [c["commonWord"] for c in other["iluvatars"]] == ["MR-V100", "MR-V50", "BI-V150", "BI-V100"]
    ascend310 = other["vnpus"]["configs"][5]
    assert (ascend310["memoryAllocatable"], ascend310["memoryCapacity"], ascend310["aiCore"]) == (
        21527,
        24576,
        8,
    )


def test_chart_allowlist_models() -> None:
    models = [m for entry in CHART_MIG_PROFILE_ALLOWLIST for m in entry.models]
    for wanted in ("A30", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H20", "H200-SXM5", "B200"):
        assert wanted in models
    assert "RTX PRO 6000 Blackwell Server Edition" in models


def test_nvidia_section_missing_keys_take_chart_defaults() -> None:
    assert parse("nvidia:\n  defaultGPUNum: 1\n").nvidia == CHART_NVIDIA


def test_empty_nvidia_mapping_next_to_other_vendors_takes_chart_defaults() -> None:
    assert parse("nvidia: {}\nvastai: {resourceCountName: vastaitech.com/va}\n").nvidia == CHART_NVIDIA


def test_missing_nvidia_section_disables_nvidia() -> None:
    # HAMi registers NVIDIA with empty resource names: it then matches no container.
    config = parse("hygon:\n  resourceCountName: hygon.com/dcunum\n")
    assert config.nvidia.resource_count_name == ""
    assert config.nvidia.resource_memory_name == ""
    assert config.nvidia.resource_core_name == ""
    assert config.other_vendors == {"hygon": {"resourceCountName": "hygon.com/dcunum"}}


# ---------------------------------------------------------------------------------------------
# Key mapping


def test_every_nvidia_key_is_mapped() -> None:
    config = parse(
        """
        nvidia:
          resourceCountName: example.com/gpu
          resourceMemoryName: example.com/mem
          resourceMemoryPercentageName: example.com/pct
          resourceCoreName: example.com/cores
          resourcePriorityName: example.com/prio
          overwriteEnv: true
          defaultMemory: 512
          defaultCores: 20
          defaultGPUNum: 2
          memoryFactor: 4
          disableCoreLimit: true
          gpuCorePolicy: force
          runtimeClassName: nvidia
          migProfileAllowlist:
          - models: ["A30"]
            profiles: ["1g.6gb"]
          deviceSplitCount: 4
          deviceMemoryScaling: 1.5
          deviceCoreScaling: 2
          preConfiguredDeviceMemory: 131072
          libCudaLogLevel: 4
          enableNumaTopology: true
        """
    )
    assert config.nvidia == NvidiaConfig(
        resource_count_name="example.com/gpu",
        resource_memory_name="example.com/mem",
        resource_memory_percentage_name="example.com/pct",
        resource_core_name="example.com/cores",
        resource_priority_name="example.com/prio",
        overwrite_env=True,
        default_memory=512,
        default_cores=20,
        default_gpu_num=2,
        memory_factor=4,
        disable_core_limit=True,
        gpu_core_policy="force",
        runtime_class_name="nvidia",
        mig_profile_allowlist=(MigProfileAllowlist(("A30",), ("1g.6gb",)),),
        device_split_count=4,
        device_memory_scaling=1.5,
        device_core_scaling=2.0,
        pre_configured_device_memory=131072,
        lib_cuda_log_level=4,
        enable_numa_topology=True,
    )


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        pytest.param("gpuCorePolicy: disable", "gpu_core_policy", "disable", id="gpuCorePolicy: disable"),
        pytest.param("gpuCorePolicy: default", "gpu_core_policy", "default", id="gpuCorePolicy: default"),
        pytest.param('gpuCorePolicy: ""', "gpu_core_policy", "default", id="gpuCorePolicy: \"\""),
        pytest.param("gpuCorePolicy:", "gpu_core_policy", "default", id="gpuCorePolicy:"),
        pytest.param('libCudaLogLevel: "3"', "lib_cuda_log_level", 3, id="libCudaLogLevel: \"3\""),
        pytest.param("libCudaLogLevel: 0", "lib_cuda_log_level", 0, id="libCudaLogLevel: 0"),
        # chart with the value unset renders an empty key
        pytest.param("libCudaLogLevel:", "lib_cuda_log_level", None, id="libCudaLogLevel:"),
        pytest.param("migProfileAllowlist: []", "mig_profile_allowlist", (), id="migProfileAllowlist: []"),
        pytest.param("migProfileAllowlist:", "mig_profile_allowlist", CHART_MIG_PROFILE_ALLOWLIST,
                     id="migProfileAllowlist:"),
        pytest.param("runtimeClassName:", "runtime_class_name", "", id="runtimeClassName:"),
        # YAML 1.1 booleans, as Go's yaml.v2
        pytest.param("overwriteEnv: yes", "overwrite_env", True, id="overwriteEnv: yes"),
        pytest.param("defaultMemory: -1", "default_memory", -1, id="defaultMemory: -1"),
        pytest.param("memoryFactor: 2147483647", "memory_factor", 2**31 - 1, id="memoryFactor: 2147483647"),
        pytest.param("deviceMemoryScaling: 3", "device_memory_scaling", 3.0, id="deviceMemoryScaling: 3"),
        pytest.param(
            "knownMigGeometries: [{models: [A30], allowedGeometries: []}]",
            "resource_count_name",
            "nvidia.com/gpu",
            id="knownMigGeometries: [{models: [A30], allowedGeometries: []}]",
        ),
        pytest.param("someFutureKey: 1", "default_gpu_num", 1, id="someFutureKey: 1"),
    ],
)
def test_nvidia_values(line: str, field: str, value: object) -> None:
    config = parse(f"nvidia:\n  resourceCountName: nvidia.com/gpu\n  {line}\n")
    assert getattr(config.nvidia, field) == value


def test_other_vendor_sections_are_kept_raw() -> None:
    config = parse(
        """
        nvidia:
          resourceCountName: nvidia.com/gpu
        vastai:
          resourceCountName: vastaitech.com/va
          extra: [1, 2]
        iluvatars:
        - chipName: BI-V150
          commonWord: BI-V150
        """
    )
    assert config.other_vendors == {
        "vastai": {"resourceCountName": "vastaitech.com/va", "extra": [1, 2]},
        "iluvatars": [{"chipName": "BI-V150", "commonWord": "BI-V150"}],
    }


# ---------------------------------------------------------------------------------------------
# Errors: every message names the file, the key path and the problem


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "dc.yaml: the device config is empty", id="empty"),
        pytest.param("# only a comment\n", "dc.yaml: the device config is empty", id="only a comment"),
        pytest.param("- nvidia\n", "dc.yaml: expected a mapping of vendor sections, got list", id="a list"),
        pytest.param("just text\n", "dc.yaml: expected a mapping of vendor sections, got str", id="a string"),
        pytest.param("nvidia: [\n", "dc.yaml: invalid YAML", id="broken YAML"),
        pytest.param("a: 1\n---\nb: 2\n", "dc.yaml: invalid YAML", id="two documents"),
        # An unknown top-level key is ignored (a warning, as Go's decoder ignores it): a file of
        # nothing else is then empty.
        pytest.param(
            "nvdia:\n  resourceCountName: nvidia.com/gpu\n", "dc.yaml: all configurations are empty",
            id="only a misspelt vendor",
        ),
        pytest.param("1: x\n", "dc.yaml: all configurations are empty", id="only a numeric top-level key"),
        pytest.param("nvidia:\n", "dc.yaml: all configurations are empty", id="nvidia null"),
        pytest.param("nvidia: {}\nhygon: {}\niluvatars: []\n", "dc.yaml: all configurations are empty",
                     id="every section empty"),
        pytest.param(
            "nvidia:\n  resourceCountName: ''\n  defaultGPUNum: 0\n", "dc.yaml: all configurations are empty",
            id="nvidia without count name or GPUs",
        ),
        pytest.param("nvidia: [a]\n", "dc.yaml: nvidia: expected a mapping, got list", id="nvidia a list"),
        pytest.param("nvidia: {}\nhygon: [a]\n", "dc.yaml: hygon: expected a mapping, got list",
                     id="hygon a list"),
        pytest.param(
            "nvidia: {}\niluvatars: {chipName: x}\n", "dc.yaml: iluvatars: expected a list, got dict",
            id="iluvatars a mapping",
        ),
        pytest.param(
            "nvidia:\n  resourceCountName: 5\n",
            "dc.yaml: nvidia.resourceCountName: expected a string, got int 5",
            id="resourceCountName an int",
        ),
        pytest.param(
            "nvidia:\n  resourceMemoryName: [a]\n", "dc.yaml: nvidia.resourceMemoryName: expected a string",
            id="resourceMemoryName a list",
        ),
        pytest.param(
            "nvidia:\n  resourceMemoryPercentageName: {}\n", "dc.yaml: nvidia.resourceMemoryPercentageName:",
            id="resourceMemoryPercentageName a mapping",
        ),
        pytest.param(
            "nvidia:\n  resourceCoreName: true\n",
            "dc.yaml: nvidia.resourceCoreName: expected a string, got bool",
            id="resourceCoreName a bool",
        ),
        pytest.param(
            "nvidia:\n  resourcePriorityName: 1.5\n",
            "dc.yaml: nvidia.resourcePriorityName: expected a string",
            id="resourcePriorityName a float",
        ),
        pytest.param(
            "nvidia:\n  overwriteEnv: 'false'\n",
            "dc.yaml: nvidia.overwriteEnv: expected true or false, got str",
            id="overwriteEnv a string",
        ),
        pytest.param(
            "nvidia:\n  overwriteEnv: 1\n", "dc.yaml: nvidia.overwriteEnv: expected true or false, got int 1",
            id="overwriteEnv an int",
        ),
        pytest.param(
            "nvidia:\n  defaultMemory: abc\n",
            "dc.yaml: nvidia.defaultMemory: expected an integer, got str 'abc'",
            id="defaultMemory a string",
        ),
        pytest.param(
            "nvidia:\n  defaultMemory: 1.5\n",
            "dc.yaml: nvidia.defaultMemory: expected an integer, got float 1.5",
            id="defaultMemory a float",
        ),
        pytest.param(
            "nvidia:\n  defaultCores: true\n",
            "dc.yaml: nvidia.defaultCores: expected an integer, got bool True",
            id="defaultCores a bool",
        ),
        pytest.param(
            "nvidia:\n  defaultGPUNum: 2147483648\n",
            "dc.yaml: nvidia.defaultGPUNum: 2147483648 is out of range",
            id="defaultGPUNum over int32",
        ),
        pytest.param(
            "nvidia:\n  memoryFactor: '2'\n",
            "dc.yaml: nvidia.memoryFactor: expected an integer, got str '2'",
            id="memoryFactor a string",
        ),
        pytest.param(
            "nvidia:\n  disableCoreLimit: 0\n", "dc.yaml: nvidia.disableCoreLimit: expected true or false",
            id="disableCoreLimit an int",
        ),
        pytest.param(
            "nvidia:\n  gpuCorePolicy: strict\n",
            "dc.yaml: nvidia.gpuCorePolicy: must be one of default, force",
            id="gpuCorePolicy unknown",
        ),
        pytest.param(
            "nvidia:\n  gpuCorePolicy: 1\n", "dc.yaml: nvidia.gpuCorePolicy: expected a string, got int 1",
            id="gpuCorePolicy an int",
        ),
        pytest.param(
            "nvidia:\n  runtimeClassName: [x]\n",
            "dc.yaml: nvidia.runtimeClassName: expected a string, got list",
            id="runtimeClassName a list",
        ),
        pytest.param(
            "nvidia:\n  deviceSplitCount: -1\n", "dc.yaml: nvidia.deviceSplitCount: -1 is out of range",
            id="deviceSplitCount negative",
        ),
        pytest.param(
            "nvidia:\n  deviceMemoryScaling: x\n", "dc.yaml: nvidia.deviceMemoryScaling: expected a number",
            id="deviceMemoryScaling a string",
        ),
        pytest.param(
            "nvidia:\n  deviceCoreScaling: .nan\n", "dc.yaml: nvidia.deviceCoreScaling: expected a number",
            id="deviceCoreScaling NaN",
        ),
        pytest.param(
            "nvidia:\n  preConfiguredDeviceMemory: 1e3\n",
            "dc.yaml: nvidia.preConfiguredDeviceMemory: expected an",
            id="preConfiguredDeviceMemory a float",
        ),
        pytest.param(
            "nvidia:\n  libCudaLogLevel: debug\n",
            "dc.yaml: nvidia.libCudaLogLevel: expected a non-negative integer",
            id="libCudaLogLevel a word",
        ),
        pytest.param(
            "nvidia:\n  libCudaLogLevel: -1\n",
            "dc.yaml: nvidia.libCudaLogLevel: expected a non-negative integer",
            id="libCudaLogLevel negative",
        ),
        pytest.param(
            "nvidia:\n  enableNumaTopology: on-ish\n",
            "dc.yaml: nvidia.enableNumaTopology: expected true or false",
            id="enableNumaTopology not a bool",
        ),
        pytest.param(
            "nvidia:\n  migProfileAllowlist: A30\n", "dc.yaml: nvidia.migProfileAllowlist: expected a list",
            id="migProfileAllowlist a string",
        ),
        pytest.param(
            "nvidia:\n  migProfileAllowlist: [A30]\n",
            "dc.yaml: nvidia.migProfileAllowlist[0]: expected a mapping",
            id="allowlist entry a string",
        ),
        pytest.param(
            "nvidia:\n  migProfileAllowlist:\n  - profiles: [1g.5gb]\n",
            "dc.yaml: nvidia.migProfileAllowlist[0].models: " + MUST_DEFINE,
            id="allowlist entry without models",
        ),
        pytest.param(
            "nvidia:\n  migProfileAllowlist:\n  - {models: [A30], profiles: []}\n",
            "dc.yaml: nvidia.migProfileAllowlist[0].profiles: " + MUST_DEFINE,
            id="allowlist entry without profiles",
        ),
        pytest.param(
            "nvidia:\n  migProfileAllowlist:\n  - {models: A30, profiles: [1g.6gb]}\n",
            "dc.yaml: nvidia.migProfileAllowlist[0].models: expected a list of strings, got str",
            id="allowlist models a string",
        ),
        pytest.param(
            "nvidia:\n  migProfileAllowlist:\n  - {models: [A30, 7], profiles: [1g.6gb]}\n",
            "dc.yaml: nvidia.migProfileAllowlist[0].models[1]: expected a string, got int 7",
            id="allowlist model an int",
        ),
        pytest.param(
            "nvidia:\n  migProfileAllowlist:\n  - {models: [A30], profiles: [1g.6gb, 6gb]}\n",
            'dc.yaml: nvidia.migProfileAllowlist[0].profiles[1]: invalid MIG profile "6gb"',
            id="allowlist profile invalid",
        ),
        pytest.param(
            "nvidia:\n  migProfileAllowlist:\n  - {models: [A30], profiles: [g.6gb]}\n",
            'dc.yaml: nvidia.migProfileAllowlist[0].profiles[0]: invalid MIG profile "g.6gb"',
            id="allowlist profile without slices",
        ),
        pytest.param(
            "nvidia:\n  migProfileAllowlist:\n  - {models: [A], profiles: [1g.5gb]}\n"
            "  - {models: [B], profiles: [1c.2g]}\n",
            'dc.yaml: nvidia.migProfileAllowlist[1].profiles[0]: invalid MIG profile "1c.2g"',
            id="second allowlist entry invalid",
        ),
    ],
)
def test_validation_errors(text: str, message: str) -> None:
    with pytest.raises(DeviceConfigError) as info:
        parse_device_config(text, "dc.yaml")
    assert str(info.value).startswith(message)


def test_error_carries_its_parts() -> None:
    with pytest.raises(DeviceConfigError) as info:
        parse_device_config("nvidia:\n  defaultMemory: x\n", "/etc/dc.yaml")
    err = info.value
    assert (err.source, err.key) == ("/etc/dc.yaml", "nvidia.defaultMemory")
    assert "expected an integer" in err.problem


# ---------------------------------------------------------------------------------------------
# Files


def test_load_device_config_from_file(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("nvidia:\n  resourceCountName: nvidia.com/gpu\n  defaultMemory: 1024\n")
    assert load_device_config(path).nvidia.default_memory == 1024
    assert load_device_config(str(path)).nvidia.default_memory == 1024


def test_load_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("nvidia:\n  defaultCores: many\n")
    with pytest.raises(DeviceConfigError) as info:
        load_device_config(path)
    assert str(info.value).startswith(f"{path}: nvidia.defaultCores: expected an integer")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(DeviceConfigError) as info:
        load_device_config(path)
    assert str(info.value) == f"{path}: cannot read the device config: No such file or directory"


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(DeviceConfigError, match="cannot read the device config"):
        load_device_config(tmp_path)


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_bytes(b"\xff\xfe\x00nvidia")
    with pytest.raises(DeviceConfigError, match="not UTF-8 text"):
        load_device_config(path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("")
    with pytest.raises(DeviceConfigError) as info:
        load_device_config(path)
    assert str(info.value) == f"{path}: the device config is empty"


def test_chart_configmap_payload_round_trips(tmp_path: Path) -> None:
    # The packaged file is exactly what the chart mounts at /device-config.yaml.
    import importlib.resources

    text = importlib.resources.files("vgpu_scheduler").joinpath("data/device-config.yaml").read_text()
    path = tmp_path / "device-config.yaml"
    path.write_text(text)
    assert load_device_config(path) == default_device_config()


# ---------------------------------------------------------------------------------------------
# Unknown keys: ignored, as Go's decoder ignores them, with one warning per key path per process

WARNED = "vgpu_scheduler.configfile"


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the key paths other tests already warned about (the set is per process)."""
    monkeypatch.setattr("vgpu_scheduler.configfile._warned_keys", set())


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == WARNED and r.levelname == "WARNING"]


TYPOS = """
nvidia:
  resourceCountNmae: nvidia.com/gpu
  migProfileAllowlist:
  - models: [A30]
    profiles: [1g.6gb]
    geometries: []
nvdia:
  resourceCountName: nvidia.com/gpu
hygon:
  resourceCountName: hygon.com/dcunum
  memoryFactr: 2
iluvatars:
- chipName: BI-V150
  commonWord: BI-V150
  resourceCountName: iluvatar.ai/BI-V150-vgpu
- chipName: MR-V100
  commonWord: MR-V100
  resourceCoreNmae: iluvatar.ai/MR-V100.vCore
vnpus:
  hamiVnpuCore: false
  config: []
  configs:
  - chipName: 910B3
    commonWord: Ascend910B3
    resourceName: huawei.com/Ascend910B3
    aiCores: 20
    templates:
    - {name: vir05_1c_16g, memory: 16384, aiCore: 5, aicpu: 1}
"""

TYPO_WARNINGS = [
    f"device config dc.yaml: unknown key {key} (ignored{hint})"
    for key, hint in [
        ("nvidia.resourceCountNmae", "; did you mean resourceCountName?"),
        ("nvidia.migProfileAllowlist[0].geometries", ""),
        ("nvdia", "; did you mean nvidia?"),
        ("hygon.memoryFactr", "; did you mean memoryFactor?"),
        ("iluvatars[1].resourceCoreNmae", "; did you mean resourceCoreName?"),
        ("vnpus.config", "; did you mean configs?"),
        ("vnpus.configs[0].aiCores", "; did you mean aiCore?"),
        ("vnpus.configs[0].templates[0].aicpu", "; did you mean aiCPU?"),
    ]
]


@pytest.mark.usefixtures("fresh_warnings")
def test_unknown_keys_warn_once_per_key_path_at_every_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger=WARNED)
    config = parse(TYPOS)
    assert _warnings(caplog) == TYPO_WARNINGS
    # Ignored, not an error: the misspelt count name takes the chart default, the misspelt section
    # is dropped, the rest is read as written.
    assert config.nvidia.resource_count_name == "nvidia.com/gpu"
    assert "nvdia" not in config.other_vendors
    assert config.other_vendors["hygon"] == {"resourceCountName": "hygon.com/dcunum", "memoryFactr": 2}


@pytest.mark.usefixtures("fresh_warnings")
def test_a_reloaded_config_does_not_warn_again(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    caplog.set_level("WARNING", logger=WARNED)
    path = tmp_path / "dc.yaml"
    path.write_text("nvidia:\n  resourceCountNmae: x\n  resourceCountName: nvidia.com/gpu\n")
    load_device_config(path)
    load_device_config(path)
    parse("nvidia:\n  resourceCountNmae: y\n  resourceCountName: nvidia.com/gpu\n")
    assert _warnings(caplog) == [
        f"device config {path}: unknown key nvidia.resourceCountNmae "
        "(ignored; did you mean resourceCountName?)"
    ]


@pytest.mark.usefixtures("fresh_warnings")
def test_known_keys_do_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger=WARNED)
    default_device_config()  # every section of the chart, ascend and iluvatar chips included
    parse(
        """
        nvidia:
          resourceCountName: nvidia.com/gpu
          migProfileAllowlist: [{models: [A30], profiles: [1g.6gb]}]
        metax: {resourceVCountName: metax-tech.com/sgpu, sgpuTopologyAware: true}
        enflame: {resourceNameVGCU: enflame.com/vgcu, resourceNameVGCUPercentage: enflame.com/vgcu-percentage}
        kunlun: {resourceVMemoryName: kunlunxin.com/vxpu-memory}
        awsneuron: {resourceCoreName: aws.amazon.com/neuroncore}
        vnpus: {configs: [{memoryAllocatable: 1, memoryCapacity: 2, memoryFactor: 1, aiCPU: 1,
                           runtimeClassName: x, overwriteEnv: true, superPod: true, resourceMemoryName: m,
                           resourceCoreName: c}]}
        """
    )
    assert _warnings(caplog) == []


def test_unknown_keys_of_wrong_typed_values_are_left_to_the_readers() -> None:
    # A section that is not a mapping is the typed reader's error, not a key to warn about.
    data = {"nvidia": [1], "iluvatars": {"x": 1}, "vnpus": {"configs": [1, {"y": 2}]}}
    assert list(unknown_keys(data)) == ["vnpus.configs[1].y"]
