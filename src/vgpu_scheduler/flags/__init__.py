"""HAMi's scheduler command line (§1.1, §1.2), parsed the way cobra/pflag parse it.

HAMi's flags are pflag flags plus Go `flag` sets merged in (device globals and klog). What users
write against HAMi must keep working here, so the syntax is pflag's:

* `--name=value` and `--name value`; booleans as `--flag` or `--flag=<Go bool>`, never
  `--flag false` (pflag leaves that `false` as a positional argument);
* `-v` is also a shorthand (`-v 4`, `-v=4`, `-v4`), `-h` is help, `--` ends the flags;
* every flag is also accepted with a single dash (`-log_dir=x`), since operators coming from
  Go `flag` binaries write klog and device flags that way;
* values are checked with Go's parsers and errors read like pflag's
  (`invalid argument "x" for "--kube-qps" flag: strconv.ParseFloat: parsing "x": invalid syntax`).

A small table-driven parser does this; argparse cannot reproduce the bool rule or the messages.
Defaults live only in `SchedulerOptions`; the table says how each flag is spelled and parsed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from vgpu_scheduler.devices.registry import REGISTRY
from vgpu_scheduler.devices.spec import VendorFlag, VendorSpec
from vgpu_scheduler.flags.values import (
    format_go_float32,
    format_string_to_string,
    go_flag,
    parse_duration,
    parse_go_float32,
    parse_go_int,
    parse_go_uint,
    parse_level,
    parse_severity,
    parse_string_to_string,
    parse_trace_location,
    parse_vmodule,
)
from vgpu_scheduler.gocompat.durations import format_go_duration
from vgpu_scheduler.gocompat.parsing import go_quote
from vgpu_scheduler.gocompat.parsing import parse_bool as parse_go_bool
from vgpu_scheduler.scheduler.options import SchedulerOptions

__all__ = [
    "FLAGS",
    "PERSISTENT_FLAGS",
    "Flag",
    "FlagError",
    "flag_usages",
    "flag_value_string",
    "format_flags",
    "format_go_float32",
    "format_string_to_string",
    "parse_args",
    "parse_go_float32",
    "parse_go_int",
    "parse_go_uint",
    "parse_string_to_string",
    "usage",
    "vendor_flag_table",
]


class FlagError(ValueError):
    """A command line pflag would reject; the message is pflag's. The CLI prints usage and exits 2."""


# --- the flag table -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Kind:
    type_name: str  # pflag Value.Type() (shown in usage)
    parse: Callable[[str], Any]
    show: Callable[[Any], str]  # pflag Value.String()
    is_bool: bool = False


_STRING = _Kind("string", str, str)
_BOOL = _Kind("bool", parse_go_bool, lambda b: "true" if b else "false", is_bool=True)
_GO_BOOL = _Kind("bool", go_flag(parse_go_bool), _BOOL.show, is_bool=True)
_INT = _Kind("int", parse_go_int, str)
_FLOAT32 = _Kind("float32", parse_go_float32, format_go_float32)
_DURATION = _Kind("duration", parse_duration, format_go_duration)
_MAP = _Kind("stringToString", parse_string_to_string, format_string_to_string)
_UINT64 = _Kind("uint64", go_flag(parse_go_uint), str)
_LEVEL = _Kind("Level", parse_level, str)
_SEVERITY = _Kind("severity", parse_severity, str)
_VMODULE = _Kind("moduleSpec", parse_vmodule, str)
_TRACE = _Kind("traceLocation", parse_trace_location, lambda t: t or ":0")


@dataclass(frozen=True, slots=True)
class Flag:
    name: str
    attr: str
    kind: _Kind
    usage: str
    shorthand: str = ""

    @property
    def type_name(self) -> str:
        return self.kind.type_name

    @property
    def is_bool(self) -> bool:
        return self.kind.is_bool


def _f(name: str, kind: _Kind, usage: str, *, attr: str = "", shorthand: str = "") -> Flag:
    return Flag(name, attr or name.replace("-", "_"), kind, usage, shorthand)


_ROOT_FLAGS: tuple[Flag, ...] = (
    _f("http_bind", _STRING, "http server bind address"),
    _f("cert_file", _STRING, "tls cert file"),
    _f("key_file", _STRING, "tls key file"),
    _f("scheduler-name", _STRING, "the name to be added to pod.spec.schedulerName if not empty"),
    _f("node-scheduler-policy", _STRING, "node scheduler policy"),
    _f("gpu-scheduler-policy", _STRING, "GPU scheduler policy"),
    _f(
        "metrics-bind-address",
        _STRING,
        "The TCP address that the scheduler should bind to for serving "
        "prometheus metrics(e.g. 127.0.0.1:9395, :9395)",
    ),
    _f("node-label-selector", _MAP, "key=value pairs separated by commas"),
    _f(
        "kube-qps",
        _FLOAT32,
        "QPS to use while talking with kube-apiserver. "
        "(HAMi defaults to client-go's 5; we default to 200 for cluster-wide filter/bind traffic)",
    ),
    _f(
        "kube-burst",
        _INT,
        "Burst to use while talking with kube-apiserver. "
        "(HAMi defaults to client-go's 10; we default to 400)",
    ),
    _f("kube-timeout", _INT, "Timeout to use while talking with kube-apiserver."),
    _f("profiling", _BOOL, "Enable pprof profiling via HTTP server"),
    _f("node-lock-timeout", _DURATION, "timeout for node locks"),
    _f(
        "node-lock-retry-timeout",
        _DURATION,
        "timeout for retrying LockNode when contended by another "
        "PodGroup member (0 disables retry). Align the Extender's httpTimeout in "
        "KubeSchedulerConfiguration with this value.",
    ),
    _f(
        "force-overwrite-default-scheduler",
        _BOOL,
        "Overwrite schedulerName in Pod Spec when set to the const "
        "DefaultSchedulerName in https://k8s.io/api/core/v1 package",
    ),
    _f("leader-elect", _BOOL, "The pod of hami-scheduler enable leader select"),
    _f("leader-elect-resource-name", _STRING, "The name of resource object that is used for leader election"),
    _f(
        "leader-elect-resource-namespace",
        _STRING,
        "The namespace of resource object that is used for leader election",
    ),
    _f("legacy-metrics", _BOOL, "Emit legacy metric names alongside new ones for backward compatibility"),
    _f(
        "kubeconfig",
        _STRING,
        "Path to a kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, "
        "else the in-cluster configuration)",
    ),
    _f(
        "cluster-snapshot",
        _STRING,
        "Run on an embedded in-memory cluster seeded from this snapshot file "
        "instead of a Kubernetes API server",
    ),
    _f(
        "embedded-api-bind",
        _STRING,
        "With --cluster-snapshot: also serve the embedded cluster's Kubernetes API, unauthenticated, "
        "on this address (e.g. 127.0.0.1:6443), to create pods in it",
    ),
    _f(
        "bind-timeout",
        _DURATION,
        "Upper bound of one /bind call, lock wait included; a bind still running then stops and "
        "releases its node lock. Keep it well under the extender's httpTimeout (30s)",
    ),
    _f(
        "lock-aware-placement",
        _BOOL,
        "Rank nodes whose node lock is held (or about to be taken by a bind in flight) after "
        "every free node that fits, so a burst spreads over nodes instead of queueing on one",
    ),
    _f(
        "requeue-nudges",
        _BOOL,
        "When devices are freed, annotate (vgpu-scheduler.io/requeue) each pod the filter refused in "
        "the last 5s, so kube-scheduler retries it at once instead of after its 5-minute flush",
    ),
    _f(
        "explain-on-main-port",
        _BOOL,
        "Also serve GET /explain/{namespace}/{pod} on --http_bind (always served on "
        "--metrics-bind-address); the main port may be a NodePort, and explain names every node",
    ),
    _f("add_dir_header", _GO_BOOL, "If true, adds the file directory to the header of the log messages"),
    _f(
        "alsologtostderr",
        _GO_BOOL,
        "log to standard error as well as files (no effect when -logtostderr=true)",
    ),
    _f("log_backtrace_at", _TRACE, "when logging hits line file:N, emit a stack trace"),
    _f(
        "log_dir",
        _STRING,
        "If non-empty, write log files in this directory (no effect when -logtostderr=true)",
    ),
    _f("log_file", _STRING, "If non-empty, use this log file (no effect when -logtostderr=true)"),
    _f(
        "log_file_max_size",
        _UINT64,
        "Defines the maximum size a log file can grow to (no effect when "
        "-logtostderr=true). Unit is megabytes. If the value is 0, the maximum file size is unlimited.",
    ),
    _f("logtostderr", _GO_BOOL, "log to standard error instead of files"),
    _f(
        "one_output",
        _GO_BOOL,
        "If true, only write logs to their native severity level (vs also writing to "
        "each lower severity level; no effect when -logtostderr=true)",
    ),
    _f("skip_headers", _GO_BOOL, "If true, avoid header prefixes in the log messages"),
    _f(
        "skip_log_headers",
        _GO_BOOL,
        "If true, avoid headers when opening log files (no effect when -logtostderr=true)",
    ),
    _f(
        "stderrthreshold",
        _SEVERITY,
        "logs at or above this threshold go to stderr when writing to files and "
        "stderr (no effect when -logtostderr=true or -alsologtostderr=true)",
    ),
    _f("v", _LEVEL, "number for the log level verbosity", shorthand="v"),
    _f("vmodule", _VMODULE, "comma-separated list of pattern=N settings for file-filtered logging"),
    _f("help", _BOOL, "help for scheduler", shorthand="h"),
)
"""The root command's own flags: HAMi's root flags, ours, klog's and help (usage order)."""

_GLOBAL_FLAGS: tuple[Flag, ...] = (
    _f("debug", _GO_BOOL, "Enable debug mode"),
    _f("device-config-file", _STRING, "Path to the device config file"),
)
"""The global flags no vendor owns."""


def vendor_flag_table(registry: Sequence[VendorSpec] = REGISTRY) -> tuple[Flag, ...]:
    """The vendors' global flags (their gates and legacy flags, `VendorSpec`), as table rows."""
    return tuple(_vendor_flag(flag) for spec in registry for flag in spec.all_flags)


def _vendor_flag(flag: VendorFlag) -> Flag:
    kind = _GO_BOOL if isinstance(flag.default, bool) else _STRING
    return Flag(flag.name, flag.option, kind, flag.help)


def global_flags(registry: Sequence[VendorSpec] = REGISTRY) -> tuple[Flag, ...]:
    """The global (device) flags HAMi adds from Go `flag` sets as *persistent* flags, in name order
    as Go's flag package lists them: the only ones its `version` subcommand accepts (root flags,
    klog flags and -h belong to the root command alone)."""
    return tuple(sorted((*_GLOBAL_FLAGS, *vendor_flag_table(registry)), key=lambda f: f.name))


PERSISTENT_FLAGS: tuple[Flag, ...] = global_flags()

# Registration order follows HAMi's (root flags, klog flags, help, global flags); usage lists
# flags in this order, like HAMi's cobra command (SortFlags = false).
FLAGS: tuple[Flag, ...] = (*_ROOT_FLAGS, *PERSISTENT_FLAGS)




def _flag_label(flag: Flag) -> str:
    return f"-{flag.shorthand}, --{flag.name}" if flag.shorthand else f"--{flag.name}"


class _Parser:
    def __init__(self, flags: Sequence[Flag] = FLAGS) -> None:
        self.values: dict[str, Any] = {}
        self.by_name = {f.name: f for f in flags}
        self.by_shorthand = {f.shorthand: f for f in flags if f.shorthand}

    def set(self, flag: Flag, value: str) -> None:
        try:
            parsed = flag.kind.parse(value)
        except ValueError as err:
            raise FlagError(
                f"invalid argument {go_quote(value)} for {go_quote(_flag_label(flag))} flag: {err}"
            ) from None
        if flag.kind is _MAP and flag.attr in self.values:
            parsed = {**self.values[flag.attr], **parsed}  # later occurrences add to the map
        self.values[flag.attr] = parsed

    def long(self, arg: str, body: str, rest: list[str]) -> None:
        """`--name[=value]` (or `-name[=value]`); `body` is the text after the dashes."""
        if not body or body[0] in "-=":
            raise FlagError(f"bad flag syntax: {arg}")
        name, has_value, value = body.partition("=")
        flag = self.by_name.get(name)
        if flag is None:
            raise FlagError(f"unknown flag: --{name}")
        if has_value:
            self.set(flag, value)
        elif flag.is_bool:
            self.set(flag, "true")
        elif rest:
            self.set(flag, rest.pop(0))
        else:
            raise FlagError(f"flag needs an argument: {arg}")

    def shorthands(self, arg: str, rest: list[str]) -> None:
        """pflag's `-abc` cluster handling (only `-v` and `-h` exist)."""
        chars = arg[1:]
        while chars:
            c = chars[0]
            flag = self.by_shorthand.get(c)
            if flag is None:
                raise FlagError(f"unknown shorthand flag: {c!r} in {arg}")
            if len(chars) > 2 and chars[1] == "=":
                self.set(flag, chars[2:])
                return
            if flag.is_bool:
                self.set(flag, "true")
                chars = chars[1:]
            elif len(chars) > 1:
                self.set(flag, chars[1:])
                return
            elif rest:
                self.set(flag, rest.pop(0))
                return
            else:
                raise FlagError(f"flag needs an argument: {c!r} in {arg}")


def parse_args(
    argv: Sequence[str], flags: Sequence[Flag] = FLAGS, *, options: type[SchedulerOptions] = SchedulerOptions
) -> tuple[SchedulerOptions, list[str]]:
    """Parse the command line (without the program name) into options and positional arguments;
    `flags` restricts the accepted flags (a subcommand sees only the persistent ones); `options` is
    the type filled (`scheduler.options.options_type` of a registry with vendors of its own)."""
    parser = _Parser(flags)
    positional: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            positional.extend(rest)
            break
        if len(arg) < 2 or arg[0] != "-":
            positional.append(arg)  # pflag intersperses positionals with flags
        elif arg[1] == "-":
            parser.long(arg, arg[2:], rest)
        elif len(name := arg[1:].partition("=")[0]) > 1 and name in parser.by_name:
            parser.long(arg, arg[1:], rest)  # single-dash long name, as Go's flag package allows
        else:
            parser.shorthands(arg, rest)
    return options(**parser.values), positional


def flag_value_string(opts: SchedulerOptions, flag: Flag) -> str:
    """pflag `Value.String()` of a flag's current value."""
    return flag.kind.show(getattr(opts, flag.attr))


def format_flags(opts: SchedulerOptions) -> list[str]:
    """`FLAG: --name="value"` for every flag in flag-name order, as logged at start (§1)."""
    return [
        f"FLAG: --{f.name}={go_quote(flag_value_string(opts, f))}"
        for f in sorted(FLAGS, key=lambda f: f.name)
    ]


def _default_is_zero(flag: Flag, default: str) -> bool:
    if flag.kind in (_STRING, _BOOL, _GO_BOOL):
        return default in ("", "false")
    if flag.kind is _DURATION:
        return default in ("0", "0s")
    if flag.kind in (_INT, _FLOAT32):
        return default == "0"
    return default in ("", "0", "false", "<nil>")


_USAGE_TYPE_NAMES = {"bool": "", "uint64": "uint", "float64": "float", "int64": "int"}


def flag_usages() -> str:
    """The `Flags:` block of `--help`, laid out like pflag's FlagUsages."""
    defaults = SchedulerOptions()
    rows: list[tuple[str, str]] = []
    for flag in FLAGS:
        head = f"  -{flag.shorthand}, --{flag.name}" if flag.shorthand else f"      --{flag.name}"
        type_name = _USAGE_TYPE_NAMES.get(flag.type_name, flag.type_name)
        if type_name:
            head += f" {type_name}"
        usage = flag.usage
        default = flag_value_string(defaults, flag)
        if not _default_is_zero(flag, default):
            usage += (
                f" (default {go_quote(default)})" if flag.type_name == "string" else f" (default {default})"
            )
        rows.append((head, usage))
    width = max(len(head) for head, _ in rows)
    return "".join(f"{head}{' ' * (width - len(head) + 3)}{usage}\n" for head, usage in rows)


DEFAULT_COMMANDS: tuple[tuple[str, str], ...] = (("version", "print version"),)


def usage(prog: str = "scheduler", commands: Sequence[tuple[str, str]] = DEFAULT_COMMANDS) -> str:
    """cobra-style usage text of the root command; `commands` lists (name, short help)."""
    width = max([11, *(len(name) for name, _ in commands)])  # cobra pads names to at least 11
    listing = "".join(f"  {name:<{width}} {short}\n" for name, short in commands)
    return (
        f"Usage:\n  {prog} [flags]\n  {prog} [command]\n\n"
        f"Available Commands:\n{listing}\n"
        f"Flags:\n{flag_usages()}\n"
        f'Use "{prog} [command] --help" for more information about a command.\n'
    )


def _check_table() -> None:
    """Every option has a flag and every flag an option (fails at import, not at run time)."""
    attrs = {f.name for f in fields(SchedulerOptions)}
    table = {f.attr for f in FLAGS}
    if attrs != table:  # pragma: no cover - a programming error caught by any test run
        raise RuntimeError(f"flag table out of sync with SchedulerOptions: {sorted(attrs ^ table)}")


_check_table()
