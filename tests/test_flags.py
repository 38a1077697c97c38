"""Command line flags (§1.1, §1.2): names, types, defaults, pflag syntax and errors."""

from __future__ import annotations

import dataclasses
import shlex
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.flags import (
    FLAGS,
    FlagError,
    flag_usages,
    format_flags,
    format_go_float32,
    parse_args,
    parse_go_float32,
    parse_go_int,
    parse_string_to_string,
    usage,
)
from vgpu_scheduler.scheduler.options import SchedulerOptions

# (flag name, pflag type, printed default) for every flag HAMi v2.10 has, plus ours.
EXPECTED_FLAGS: list[tuple[str, str, str]] = [
    # §1.1 root flags
    ("http_bind", "string", "127.0.0.1:8080"),
    ("cert_file", "string", ""),
    ("key_file", "string", ""),
    ("scheduler-name", "string", ""),
    ("node-scheduler-policy", "string", "binpack"),
    ("gpu-scheduler-policy", "string", "spread"),
    ("metrics-bind-address", "string", ":9395"),
    ("node-label-selector", "stringToString", "[]"),
    ("kube-qps", "float32", "200"),  # deliberate: HAMi has 5
    ("kube-burst", "int", "400"),  # deliberate: HAMi has 10
    ("kube-timeout", "int", "0"),
    ("profiling", "bool", "false"),
    ("node-lock-timeout", "duration", "5m0s"),
    ("node-lock-retry-timeout", "duration", "28s"),
    ("force-overwrite-default-scheduler", "bool", "true"),
    ("leader-elect", "bool", "false"),
    ("leader-elect-resource-name", "string", ""),
    ("leader-elect-resource-namespace", "string", ""),
    ("legacy-metrics", "bool", "false"),
    # ours
    ("kubeconfig", "string", ""),
    ("cluster-snapshot", "string", ""),
    ("embedded-api-bind", "string", ""),
    ("bind-timeout", "duration", "20s"),
    ("lock-aware-placement", "bool", "true"),
    ("requeue-nudges", "bool", "true"),
    ("explain-on-main-port", "bool", "false"),
    ("help", "bool", "false"),
    # §1.2 global flags
    ("device-config-file", "string", ""),
    ("debug", "bool", "false"),
    ("enable-ascend", "bool", "false"),
    ("enable-iluvatar", "bool", "false"),
    ("cambricon-mlu-name", "string", "cambricon.com/mlu"),
    ("cambricon-mlu-memory", "string", "cambricon.com/mlu.smlu.vmemory"),
    ("cambricon-mlu-cores", "string", "cambricon.com/mlu.smlu.vcore"),
    ("dcu-name", "string", "hygon.com/dcunum"),
    ("dcu-memory", "string", "hygon.com/dcumem"),
    ("dcu-cores", "string", "hygon.com/dcucores"),
    ("mthreads-name", "string", "mthreads.com/vgpu"),
    ("mthreads-memory", "string", "mthreads.com/sgpu-memory"),
    ("mthreads-cores", "string", "mthreads.com/sgpu-core"),
    ("metax-name", "string", "metax-tech.com/gpu"),
    ("metax-vcount", "string", "metax-tech.com/sgpu"),
    ("metax-vcore", "string", "metax-tech.com/vcore"),
    ("metax-vmemory", "string", "metax-tech.com/vmemory"),
    ("sgpu-topology-aware", "bool", "false"),
    ("kunlun-name", "string", "kunlunxin.com/xpu"),
    ("kunlun-vcount", "string", "kunlunxin.com/vxpu"),
    ("kunlun-vmemory", "string", "kunlunxin.com/vxpu-memory"),
    ("enflame-gcu-resource-name", "string", "enflame.com/gcu"),
    ("enflame-drs-gcu-resource-name", "string", "enflame.com/drs-gcu"),
    ("enflame-vgcu-resource-name", "string", "enflame.com/drs-gcu"),
    ("enflame-gcu-memory-resource-name", "string", "enflame.com/gcu-memory"),
    ("enflame-gcu-core-resource-name", "string", "enflame.com/gcu-core"),
    ("enflame-vgcu-legacy-resource-name", "string", "enflame.com/vgcu"),
    ("enflame-vgcu-percentage-resource-name", "string", "enflame.com/vgcu-percentage"),
    # klog
    ("v", "Level", "0"),
    ("logtostderr", "bool", "true"),
    ("alsologtostderr", "bool", "false"),
    ("log_dir", "string", ""),
    ("log_file", "string", ""),
    ("log_file_max_size", "uint64", "1800"),
    ("one_output", "bool", "false"),
    ("skip_headers", "bool", "false"),
    ("skip_log_headers", "bool", "false"),
    ("stderrthreshold", "severity", "2"),
    ("vmodule", "moduleSpec", ""),
    ("log_backtrace_at", "traceLocation", ":0"),
    ("add_dir_header", "bool", "false"),
]


def opts_of(*argv: str) -> SchedulerOptions:
    opts, positional = parse_args(list(argv))
    assert positional == []
    return opts


def test_flag_set_is_exactly_hamis_plus_ours() -> None:
    assert sorted(f.name for f in FLAGS) == sorted(name for name, _, _ in EXPECTED_FLAGS)


@pytest.mark.parametrize(("name", "type_name", "default"), EXPECTED_FLAGS)
def test_flag_type_and_default(name: str, type_name: str, default: str) -> None:
    flag = next(f for f in FLAGS if f.name == name)
    assert flag.type_name == type_name
    assert f'FLAG: --{name}="{default}"' in format_flags(SchedulerOptions())


def test_typed_defaults() -> None:
    o = SchedulerOptions()
    assert (o.kube_qps, o.kube_burst, o.kube_timeout) == (200.0, 400, 0)
    assert (o.node_lock_timeout, o.node_lock_retry_timeout) == (300.0, 28.0)
    assert o.node_label_selector == {}
    assert o.force_overwrite_default_scheduler is True
    assert o.logtostderr is True
    assert (o.v, o.stderrthreshold, o.log_file_max_size) == (0, 2, 1800)


def argv_ids(cases: list[tuple[Any, ...]]) -> list[str]:
    """Each case is named by its command line (the first element), as a shell would show it."""
    return [shlex.join(case[0]) for case in cases]


# Each syntax form a user may write, for each value type.
SYNTAX_FORMS = [
    # strings: =, separate argument, single dash, empty value
    (["--http_bind=0.0.0.0:443"], "http_bind", "0.0.0.0:443"),
    (["--http_bind", "0.0.0.0:443"], "http_bind", "0.0.0.0:443"),
    (["-http_bind=0.0.0.0:443"], "http_bind", "0.0.0.0:443"),
    (["-http_bind", "0.0.0.0:443"], "http_bind", "0.0.0.0:443"),
    (["--scheduler-name="], "scheduler_name", ""),
    (["--scheduler-name", "hami-scheduler"], "scheduler_name", "hami-scheduler"),
    (["--scheduler-name=a=b"], "scheduler_name", "a=b"),
    (["--device-config-file", "/device-config.yaml"], "device_config_file", "/device-config.yaml"),
    (["-device-config-file=/d.yaml"], "device_config_file", "/d.yaml"),
    (["--scheduler-name", "--leader-elect"], "scheduler_name", "--leader-elect"),  # pflag takes it
    # bools: bare, =Go bool values, single dash
    (["--profiling"], "profiling", True),
    (["--profiling=true"], "profiling", True),
    (["--profiling=false"], "profiling", False),
    (["--profiling=1"], "profiling", True),
    (["--profiling=t"], "profiling", True),
    (["--profiling=T"], "profiling", True),
    (["--profiling=TRUE"], "profiling", True),
    (["--profiling=True"], "profiling", True),
    (["--profiling=0"], "profiling", False),
    (["--profiling=f"], "profiling", False),
    (["--profiling=F"], "profiling", False),
    (["--profiling=FALSE"], "profiling", False),
    (["--profiling=False"], "profiling", False),
    (["--force-overwrite-default-scheduler=false"], "force_overwrite_default_scheduler", False),
    (["--leader-elect"], "leader_elect", True),
    (["--legacy-metrics"], "legacy_metrics", True),
    (["--debug"], "debug", True),
    (["-debug"], "debug", True),
    (["-debug=false"], "debug", False),
    (["--enable-ascend"], "enable_ascend", True),
    (["--enable-iluvatar=true"], "enable_iluvatar", True),
    (["--sgpu-topology-aware"], "sgpu_topology_aware", True),
    (["--logtostderr=false"], "logtostderr", False),
    (["--alsologtostderr"], "alsologtostderr", True),
    (["--one_output"], "one_output", True),
    (["--skip_headers"], "skip_headers", True),
    (["--skip_log_headers"], "skip_log_headers", True),
    (["--add_dir_header"], "add_dir_header", True),
    (["-h"], "help", True),
    (["--help"], "help", True),
    # ints: base prefixes as Go's ParseInt(s, 0, 64)
    (["--kube-burst=50"], "kube_burst", 50),
    (["--kube-burst", "50"], "kube_burst", 50),
    (["--kube-burst=0x10"], "kube_burst", 16),
    (["--kube-burst=010"], "kube_burst", 8),
    (["--kube-burst=0o17"], "kube_burst", 15),
    (["--kube-burst=0b101"], "kube_burst", 5),
    (["--kube-burst=1_000"], "kube_burst", 1000),
    (["--kube-burst=-1"], "kube_burst", -1),
    (["--kube-burst=+7"], "kube_burst", 7),
    (["--kube-timeout=30"], "kube_timeout", 30),
    (["-kube-timeout", "30"], "kube_timeout", 30),
    # float32
    (["--kube-qps=5"], "kube_qps", 5.0),
    (["--kube-qps", "50.5"], "kube_qps", 50.5),
    (["--kube-qps=1e3"], "kube_qps", 1000.0),
    (["--kube-qps=.5"], "kube_qps", 0.5),
    (["--kube-qps=0x1p4"], "kube_qps", 16.0),
    (["--kube-qps=0.1"], "kube_qps", struct.unpack("<f", struct.pack("<f", 0.1))[0]),
    # durations
    (["--node-lock-timeout=1m30s"], "node_lock_timeout", 90.0),
    (["--node-lock-timeout", "300ms"], "node_lock_timeout", 0.3),
    (["--node-lock-timeout=1.5h"], "node_lock_timeout", 5400.0),
    (["--node-lock-timeout=0"], "node_lock_timeout", 0.0),
    (["--node-lock-retry-timeout=-1s"], "node_lock_retry_timeout", -1.0),
    (["--node-lock-retry-timeout=0s"], "node_lock_retry_timeout", 0.0),
    # map
    (["--node-label-selector=gpu=on,zone=a"], "node_label_selector", {"gpu": "on", "zone": "a"}),
    (["--node-label-selector", "gpu=on"], "node_label_selector", {"gpu": "on"}),
    (["--node-label-selector=a=b,c"], "node_label_selector", {"a": "b,c"}),  # one '=' => one pair
    (['--node-label-selector="a=b"'], "node_label_selector", {"a": "b"}),
    (['--node-label-selector=a=1,"b=x,y"'], "node_label_selector", {"a": "1", "b": "x,y"}),
    (
        ["--node-label-selector=a=", "--node-label-selector=b=2"],
        "node_label_selector",
        {"a": "", "b": "2"},
    ),
    (["--node-label-selector=a=1", "--node-label-selector=a=2"], "node_label_selector", {"a": "2"}),
    # klog -v in every pflag/Go form
    (["-v=4"], "v", 4),
    (["-v", "4"], "v", 4),
    (["-v4"], "v", 4),
    (["--v=4"], "v", 4),
    (["--v", "5"], "v", 5),
    (["-v=-1"], "v", -1),
    (["--stderrthreshold=INFO"], "stderrthreshold", 0),
    (["--stderrthreshold=warning"], "stderrthreshold", 1),
    (["--stderrthreshold=3"], "stderrthreshold", 3),
    (["--vmodule=webhook=5,filter*=3,x=0"], "vmodule", "webhook=5,filter*=3"),
    (["--vmodule="], "vmodule", ""),
    (["--log_backtrace_at=webhook.py:12"], "log_backtrace_at", "webhook.py:12"),
    (["--log_dir=/var/log"], "log_dir", "/var/log"),
    (["-log_file", "/tmp/s.log"], "log_file", "/tmp/s.log"),
    (["--log_file_max_size=0x10"], "log_file_max_size", 16),
    # alias writes the same option
    (["--enflame-vgcu-resource-name=x.com/v"], "enflame_drs_gcu_resource_name", "x.com/v"),
    (["--enflame-drs-gcu-resource-name=y.com/d"], "enflame_drs_gcu_resource_name", "y.com/d"),
    # ours
    (["--kubeconfig=/root/.kube/config"], "kubeconfig", "/root/.kube/config"),
    (["--cluster-snapshot", "snap.yaml"], "cluster_snapshot", "snap.yaml"),
    # last occurrence wins
    (["--scheduler-name=a", "--scheduler-name=b"], "scheduler_name", "b"),
]


@pytest.mark.parametrize(
    ("argv", "attr", "value"),
    SYNTAX_FORMS,
    ids=argv_ids(SYNTAX_FORMS),
)
def test_syntax_forms(argv: list[str], attr: str, value: Any) -> None:
    assert getattr(opts_of(*argv), attr) == value


def test_chart_command_line() -> None:
    opts, positional = parse_args(
        [
            "--http_bind=0.0.0.0:443",
            "--cert_file=/tls/tls.crt",
            "--key_file=/tls/tls.key",
            "--scheduler-name=hami-scheduler",
            "--metrics-bind-address=:9395",
            "--node-scheduler-policy=binpack",
            "--gpu-scheduler-policy=spread",
            "--device-config-file=/device-config.yaml",
            "--leader-elect=true",
            "--leader-elect-resource-name=hami-scheduler",
            "--leader-elect-resource-namespace=kube-system",
            "--debug",
            "-v=4",
        ]
    )
    assert positional == []
    assert opts == dataclasses.replace(
        SchedulerOptions(),
        http_bind="0.0.0.0:443",
        cert_file="/tls/tls.crt",
        key_file="/tls/tls.key",
        scheduler_name="hami-scheduler",
        device_config_file="/device-config.yaml",
        leader_elect=True,
        leader_elect_resource_name="hami-scheduler",
        leader_elect_resource_namespace="kube-system",
        debug=True,
        v=4,
    )


POSITIONALS = [
    # pflag never reads a separate word as a bool value: it stays positional.
    (["--debug", "false"], ["false"], "debug", True),
    (["--profiling", "false"], ["false"], "profiling", True),
    (["version"], ["version"], "debug", False),
    (["version", "-v=2"], ["version"], "v", 2),  # flags and positionals interleave
    (["-", "--debug"], ["-"], "debug", True),
    (["--", "--debug", "-v=3"], ["--debug", "-v=3"], "debug", False),
    (["--debug", "--", "x"], ["x"], "debug", True),
    (["-hv", "3"], [], "v", 3),  # shorthand cluster: -h then -v 3
    (["", "--debug"], [""], "debug", True),
]


@pytest.mark.parametrize(
    ("argv", "positional", "attr", "value"),
    POSITIONALS,
    ids=argv_ids(POSITIONALS),
)
def test_positionals(argv: list[str], positional: list[str], attr: str, value: Any) -> None:
    opts, rest = parse_args(argv)
    assert rest == positional
    assert getattr(opts, attr) == value


ERRORS = [
    (["--foo"], "unknown flag: --foo"),
    (["--foo=bar"], "unknown flag: --foo"),
    (["--h"], "unknown flag: --h"),
    (["-x"], "unknown shorthand flag: 'x' in -x"),
    (["-foo"], "unknown shorthand flag: 'f' in -foo"),
    (["-hx"], "unknown shorthand flag: 'x' in -hx"),
    (["---debug"], "bad flag syntax: ---debug"),
    (["--=x"], "bad flag syntax: --=x"),
    (["--http_bind"], "flag needs an argument: --http_bind"),
    (["-log_dir"], "flag needs an argument: -log_dir"),
    (["-v"], "flag needs an argument: 'v' in -v"),
    (
        ["--kube-qps=x"],
        'invalid argument "x" for "--kube-qps" flag: strconv.ParseFloat: parsing "x": invalid syntax',
    ),
    (
        ["--kube-qps="],
        'invalid argument "" for "--kube-qps" flag: strconv.ParseFloat: parsing "": invalid syntax',
    ),
    (
        ["--kube-qps=1e39"],
        'invalid argument "1e39" for "--kube-qps" flag: '
        'strconv.ParseFloat: parsing "1e39": value out of range',
    ),
    (
        ["--kube-qps", "1_0"],
        'invalid argument "1_0" for "--kube-qps" flag: strconv.ParseFloat: parsing "1_0": invalid syntax',
    ),
    (
        ["--kube-burst=1.5"],
        'invalid argument "1.5" for "--kube-burst" flag: strconv.ParseInt: parsing "1.5": invalid syntax',
    ),
    (
        ["--kube-burst=9223372036854775808"],
        'invalid argument "9223372036854775808" for "--kube-burst" flag: '
        'strconv.ParseInt: parsing "9223372036854775808": value out of range',
    ),
    (
        ["--kube-burst=_1"],
        'invalid argument "_1" for "--kube-burst" flag: strconv.ParseInt: parsing "_1": invalid syntax',
    ),
    (
        ["--kube-timeout", "0x"],
        'invalid argument "0x" for "--kube-timeout" flag: strconv.ParseInt: parsing "0x": invalid syntax',
    ),
    (
        ["--profiling=yes"],
        'invalid argument "yes" for "--profiling" flag: strconv.ParseBool: parsing "yes": invalid syntax',
    ),
    (["--debug=yes"], 'invalid argument "yes" for "--debug" flag: parse error'),  # Go flag wrapped
    (["-logtostderr=2"], 'invalid argument "2" for "--logtostderr" flag: parse error'),
    (["--log_file_max_size=-1"], 'invalid argument "-1" for "--log_file_max_size" flag: parse error'),
    (
        ["--log_file_max_size=18446744073709551616"],
        'invalid argument "18446744073709551616" for "--log_file_max_size" flag: value out of range',
    ),
    (
        ["--node-lock-timeout=5"],
        'invalid argument "5" for "--node-lock-timeout" flag: time: missing unit in duration "5"',
    ),
    (
        ["--node-lock-timeout", "5d"],
        'invalid argument "5d" for "--node-lock-timeout" flag: time: unknown unit "d" in duration "5d"',
    ),
    (
        ["--node-lock-retry-timeout=x"],
        'invalid argument "x" for "--node-lock-retry-timeout" flag: time: invalid duration "x"',
    ),
    (
        ["--node-label-selector=gpu"],
        'invalid argument "gpu" for "--node-label-selector" flag: gpu must be formatted as key=value',
    ),
    (
        ["--node-label-selector=a=1,b=2,c"],
        'invalid argument "a=1,b=2,c" for "--node-label-selector" flag: c must be formatted as key=value',
    ),
    (
        ['--node-label-selector=a="1,b=2'],
        'invalid argument "a=\\"1,b=2" for "--node-label-selector" flag: '
        'parse error on line 1, column 3: bare " in non-quoted field',
    ),
    (
        ["-v=x"],
        'invalid argument "x" for "-v, --v" flag: strconv.ParseInt: parsing "x": invalid syntax',
    ),
    (
        ["-v", "0x1"],
        'invalid argument "0x1" for "-v, --v" flag: strconv.ParseInt: parsing "0x1": invalid syntax',
    ),
    (
        ["--stderrthreshold=LOUD"],
        'invalid argument "LOUD" for "--stderrthreshold" flag: '
        'strconv.ParseInt: parsing "LOUD": invalid syntax',
    ),
    (
        ["--vmodule=a"],
        'invalid argument "a" for "--vmodule" flag: '
        "syntax error: expect comma-separated list of filename=N",
    ),
    (
        ["--vmodule=a=-1"],
        'invalid argument "a=-1" for "--vmodule" flag: negative value for vmodule level',
    ),
    (
        ["--log_backtrace_at=main:1"],
        'invalid argument "main:1" for "--log_backtrace_at" flag: syntax error: expect file.go:234',
    ),
    (
        ["--log_backtrace_at=a.go:0"],
        'invalid argument "a.go:0" for "--log_backtrace_at" flag: negative or zero value for level',
    ),
    (
        ["--help=maybe"],
        'invalid argument "maybe" for "-h, --help" flag: strconv.ParseBool: parsing "maybe": '
        "invalid syntax",
    ),
]


@pytest.mark.parametrize(
    ("argv", "message"),
    ERRORS,
    ids=argv_ids(ERRORS),
)
def test_errors(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as info:
        parse_args(argv)
    assert str(info.value) == message


def test_format_flags_sorted_with_go_values() -> None:
    opts = opts_of(
        "--node-label-selector=zone=a,gpu=on",
        "--node-lock-timeout=90s",
        "--kube-qps=0.5",
        '--scheduler-name=say "hi"',
        "--log_backtrace_at=a.go:3",
        "-v=4",
    )
    lines = format_flags(opts)
    names = [line.split("=", 1)[0] for line in lines]
    assert names == sorted(names)
    assert len(lines) == len(FLAGS)
    assert 'FLAG: --node-label-selector="[gpu=on,zone=a]"' in lines
    assert 'FLAG: --node-lock-timeout="1m30s"' in lines
    assert 'FLAG: --kube-qps="0.5"' in lines
    assert 'FLAG: --scheduler-name="say \\"hi\\""' in lines
    assert 'FLAG: --log_backtrace_at="a.go:3"' in lines
    assert 'FLAG: --v="4"' in lines
    assert 'FLAG: --force-overwrite-default-scheduler="true"' in lines


def test_map_value_with_comma_is_csv_quoted() -> None:
    opts = opts_of('--node-label-selector=a=1,"b=x,y"')
    assert 'FLAG: --node-label-selector="[\\"b=x,y\\",a=1]"' not in format_flags(opts)
    assert 'FLAG: --node-label-selector="[a=1,\\"b=x,y\\"]"' in format_flags(opts)
    assert parse_string_to_string('a=1,"b=x,y"') == {"a": "1", "b": "x,y"}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (200.0, "200"),
        (5.0, "5"),
        (0.5, "0.5"),
        (1e6, "1e+06"),
        (123456.0, "123456"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (0.1, "0.1"),
        (-2.5, "-2.5"),
        (0.0, "0"),
        (float("inf"), "+Inf"),
    ],
)
def test_float32_format(value: float, text: str) -> None:
    assert format_go_float32(value) == text


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float32_format_round_trips(value: float) -> None:
    assert parse_go_float32(format_go_float32(value)) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("-0x_1F", -31), ("0_7", 7), ("0b1_0", 2), ("9223372036854775807", 2**63 - 1)],
)
def test_go_int_base0(text: str, value: int) -> None:
    assert parse_go_int(text) == value


@pytest.mark.parametrize("text", ["1__0", "1_", "0x", "08", "0b2", "+-1", "٣", " 1"])
def test_go_int_base0_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid syntax"):
        parse_go_int(text)


def test_usage_lists_every_flag_pflag_style() -> None:
    text = flag_usages()
    lines = text.splitlines()
    assert len(lines) == len(FLAGS)
    assert "  -v, --v Level" in text
    assert "  -h, --help" in text
    # One usage column for all flags, like pflag's FlagUsages.
    assert len({line.index(flag.usage) for line, flag in zip(lines, FLAGS, strict=True)}) == 1
    http = next(line for line in lines if "--http_bind" in line)
    assert http.endswith('http server bind address (default "127.0.0.1:8080")')
    assert next(line for line in lines if "--kube-qps" in line).endswith("(default 200)")
    assert "--profiling " in text and "--profiling bool" not in text
    assert "--log_file_max_size uint " in text
    assert "(default 5m0s)" in text and "(default [])" in text
    assert "Usage:\n  vgpu-scheduler [flags]" in usage("vgpu-scheduler")
    assert "Available Commands:\n  version     print version\n\n" in usage()
    listed = usage("s", [("simulate", "run the simulator"), ("version", "print version")])
    assert "  simulate    run the simulator\n  version     print version\n" in listed
