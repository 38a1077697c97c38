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

import math
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from vgpu_scheduler.durations import DurationError, format_go_duration, parse_go_duration
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.wire.gocompat import go_quote
from vgpu_scheduler.wire.gocompat import parse_bool as parse_go_bool


class FlagError(ValueError):
    """A command line pflag would reject; the message is pflag's. The CLI prints usage and exits 2."""


# --- Go value parsers (raise ValueError with Go's error text) -----------------------------------


def _num_error(func: str, s: str, what: str) -> ValueError:
    return ValueError(f"strconv.{func}: parsing {go_quote(s)}: {what}")


def _underscore_ok(s: str) -> bool:
    """Go's rule: '_' only between digits or between a base prefix and a digit."""
    saw = "^"
    if s[:1] in ("+", "-"):
        s = s[1:]
    i = 0
    hexa = False
    if len(s) >= 2 and s[0] == "0" and s[1].lower() in "box":
        i, saw, hexa = 2, "0", s[1].lower() == "x"
    for ch in s[i:]:
        if ch.isascii() and (ch.isdigit() or (hexa and ch.lower() in "abcdef")):
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def parse_go_int(s: str, base: int = 0, bits: int = 64, func: str = "ParseInt") -> int:
    """`strconv.ParseInt(s, base, bits)` (base 0 or 10)."""
    body = s[1:] if s[:1] in ("+", "-") else s
    neg = s[:1] == "-"
    value = _parse_go_uint_digits(body, base, s, func)
    limit = 1 << (bits - 1)
    if (not neg and value >= limit) or (neg and value > limit):
        raise _num_error(func, s, "value out of range")
    return -value if neg else value


def parse_go_uint(s: str, base: int = 0, bits: int = 64) -> int:
    """`strconv.ParseUint(s, base, bits)` (base 0 or 10)."""
    value = _parse_go_uint_digits(s, base, s, "ParseUint")
    if value >= 1 << bits:
        raise _num_error("ParseUint", s, "value out of range")
    return value


def _parse_go_uint_digits(s: str, base: int, orig: str, func: str) -> int:
    if not s:
        raise _num_error(func, orig, "invalid syntax")
    base0 = base == 0
    if base0:
        low = s[1:2].lower()
        if s[0] == "0" and len(s) >= 3 and low in "box":
            base, s = {"b": 2, "o": 8, "x": 16}[low], s[2:]
        elif s[0] == "0":
            base, s = 8, s[1:]
        else:
            base = 10
    value = 0
    underscores = False
    for ch in s:
        if ch == "_" and base0:
            underscores = True
            continue
        digit = int(ch, 36) if ch.isascii() and ch.isalnum() else 99
        if digit >= base:
            raise _num_error(func, orig, "invalid syntax")
        value = value * base + digit
        if value >= 1 << 64:  # Go stops at the first overflow with a range error
            raise _num_error(func, orig, "value out of range")
    if underscores and not _underscore_ok(orig):
        raise _num_error(func, orig, "invalid syntax")
    return value


_GO_DEC_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_GO_HEX_FLOAT = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+\Z")
_GO_SPECIAL_FLOAT = re.compile(r"[+-]?(?:inf|infinity|nan)\Z", re.IGNORECASE)


def parse_go_float32(s: str) -> float:
    """`strconv.ParseFloat(s, 32)`, rounded to float32 (underscore separators not supported)."""
    if _GO_SPECIAL_FLOAT.match(s):
        return float(s.lower().replace("infinity", "inf"))
    if _GO_HEX_FLOAT.match(s):
        value = float.fromhex(s)
    elif _GO_DEC_FLOAT.match(s):
        value = float(s)
    else:
        raise _num_error("ParseFloat", s, "invalid syntax")
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        raise _num_error("ParseFloat", s, "value out of range") from None


def format_go_float32(value: float) -> str:
    """`strconv.FormatFloat(float64(f), 'g', -1, 32)`: shortest float32 text, Go's %g layout."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    f32 = struct.unpack("<f", struct.pack("<f", value))[0]
    for precision in range(1, 10):  # 9 significant digits always round-trip a float32
        text = f"{f32:.{precision - 1}e}"
        try:
            if struct.unpack("<f", struct.pack("<f", float(text)))[0] == f32:
                break
        except OverflowError:  # a short rounding of a value near FLT_MAX overshoots it
            continue
    mantissa, exp_text = text.split("e")
    exp = int(exp_text)
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    if exp < -4 or exp >= 6:  # shortest formatting uses %e for exponents outside [-4, 6)
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{body}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    whole = digits[: exp + 1].ljust(exp + 1, "0")
    frac = digits[exp + 1 :]
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def _go_flag(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Go's `flag` package turns strconv syntax/range errors into "parse error"/"value out of range"."""

    def wrapped(s: str) -> Any:
        try:
            return parse(s)
        except ValueError as err:
            raise ValueError("value out of range" if "out of range" in str(err) else "parse error") from None

    return wrapped


# --- pflag StringToString (`--node-label-selector`) ---------------------------------------------


_CSV_QUOTE = 'extraneous or missing " in quoted-field'


def _csv_record(line: str) -> list[str]:
    """One record of Go's encoding/csv reader (default settings)."""
    fields_out: list[str] = []
    i = 0
    while True:
        if line[i : i + 1] == '"':
            j, buf = i + 1, []
            while True:
                k = line.find('"', j)
                if k < 0:
                    raise ValueError(f"parse error on line 1, column {len(line) + 1}: {_CSV_QUOTE}")
                buf.append(line[j:k])
                if line[k + 1 : k + 2] == '"':
                    buf.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            if i < len(line) and line[i] != ",":
                raise ValueError(f"parse error on line 1, column {i + 1}: {_CSV_QUOTE}")
            fields_out.append("".join(buf))
        else:
            end = line.find(",", i)
            end = len(line) if end < 0 else end
            quote = line.find('"', i, end)
            if quote >= 0:
                raise ValueError(f'parse error on line 1, column {quote + 1}: bare " in non-quoted field')
            fields_out.append(line[i:end])
            i = end
        if i >= len(line):
            return fields_out
        i += 1  # skip the comma


def parse_string_to_string(s: str) -> dict[str, str]:
    """pflag StringToString.Set: `k=v,k2=v2`; one '=' means one pair (`a=b,c` is {a: "b,c"})."""
    count = s.count("=")
    if count == 0:
        raise ValueError(f"{s} must be formatted as key=value")
    pairs = [s.strip('"')] if count == 1 else _csv_record(s.split("\n", 1)[0])
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"{pair} must be formatted as key=value")
        out[key] = value
    return out


def _csv_field(text: str) -> str:
    if text == "" or not (any(c in text for c in ',"\r\n') or text[0] in " \t" or text == "\\."):
        return text
    return '"' + text.replace('"', '""') + '"'


def format_string_to_string(value: dict[str, str]) -> str:
    """pflag StringToString.String(): `[k=v,k2=v2]` (keys sorted; Go's map order is random)."""
    return "[" + ",".join(_csv_field(f"{k}={v}") for k, v in sorted(value.items())).strip() + "]"


# --- klog value types ---------------------------------------------------------------------------

_SEVERITIES = {"INFO": 0, "WARNING": 1, "ERROR": 2, "FATAL": 3}
_VMODULE_SYNTAX = "syntax error: expect comma-separated list of filename=N"
_TRACE_SYNTAX = "syntax error: expect file.go:234"


def _parse_level(s: str) -> int:
    return parse_go_int(s, base=10, bits=32)


def _parse_severity(s: str) -> int:
    by_name = _SEVERITIES.get(s.upper())
    return by_name if by_name is not None else parse_go_int(s, base=10, bits=32)


def _parse_vmodule(s: str) -> str:
    kept = []
    for pat in s.split(","):
        if not pat:
            continue
        parts = pat.split("=")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ValueError(_VMODULE_SYNTAX)
        try:
            level = parse_go_int(parts[1], base=10, bits=32)
        except ValueError:
            raise ValueError(_VMODULE_SYNTAX) from None
        if level < 0:
            raise ValueError("negative value for vmodule level")
        if level:
            kept.append(f"{parts[0]}={level}")
    return ",".join(kept)


def _parse_trace_location(s: str) -> str:
    if s == "":
        return ""
    parts = s.split(":")
    if len(parts) != 2 or "." not in parts[0]:
        raise ValueError(_TRACE_SYNTAX)
    try:
        line = parse_go_int(parts[1], base=10, bits=64, func="Atoi")
    except ValueError:
        raise ValueError(_TRACE_SYNTAX) from None
    if line <= 0:
        raise ValueError("negative or zero value for level")
    return f"{parts[0]}:{line}"


def _parse_duration(s: str) -> float:
    try:
        return parse_go_duration(s)
    except DurationError as err:
        raise ValueError(str(err)) from None


# --- the flag table -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Kind:
    type_name: str  # pflag Value.Type() (shown in usage)
    parse: Callable[[str], Any]
    show: Callable[[Any], str]  # pflag Value.String()
    is_bool: bool = False


_STRING = _Kind("string", str, str)
_BOOL = _Kind("bool", parse_go_bool, lambda b: "true" if b else "false", is_bool=True)
_GO_BOOL = _Kind("bool", _go_flag(parse_go_bool), _BOOL.show, is_bool=True)
_INT = _Kind("int", parse_go_int, str)
_FLOAT32 = _Kind("float32", parse_go_float32, format_go_float32)
_DURATION = _Kind("duration", _parse_duration, format_go_duration)
_MAP = _Kind("stringToString", parse_string_to_string, format_string_to_string)
_UINT64 = _Kind("uint64", _go_flag(parse_go_uint), str)
_LEVEL = _Kind("Level", _parse_level, str)
_SEVERITY = _Kind("severity", _parse_severity, str)
_VMODULE = _Kind("moduleSpec", _parse_vmodule, str)
_TRACE = _Kind("traceLocation", _parse_trace_location, lambda t: t or ":0")


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


# Registration order follows HAMi's (root flags, klog flags, help, global flags); usage lists
# flags in this order, like HAMi's cobra command (SortFlags = false).
FLAGS: tuple[Flag, ...] = (
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
    _f("cambricon-mlu-cores", _STRING, "cambricon mlu core resource"),
    _f("cambricon-mlu-memory", _STRING, "cambricon mlu memory resource"),
    _f("cambricon-mlu-name", _STRING, "cambricon mlu resource count"),
    _f("dcu-cores", _STRING, "dcu core resource"),
    _f("dcu-memory", _STRING, "dcu memory resource"),
    _f("dcu-name", _STRING, "dcu resource count"),
    _f("debug", _GO_BOOL, "Enable debug mode"),
    _f("device-config-file", _STRING, "Path to the device config file"),
    _f("enable-ascend", _GO_BOOL, "enable ascend device"),
    _f("enable-iluvatar", _GO_BOOL, "enable iluvatar device"),
    _f("enflame-drs-gcu-resource-name", _STRING, "enflame drs gcu resource name"),
    _f("enflame-gcu-core-resource-name", _STRING, "enflame gcu core resource name"),
    _f("enflame-gcu-memory-resource-name", _STRING, "enflame gcu memory resource name"),
    _f("enflame-gcu-resource-name", _STRING, "enflame gcu resource name"),
    _f("enflame-vgcu-legacy-resource-name", _STRING, "enflame legacy vgcu resource name"),
    _f("enflame-vgcu-percentage-resource-name", _STRING, "enflame legacy vgcu percentage resource name"),
    _f(
        "enflame-vgcu-resource-name",
        _STRING,
        "alias of --enflame-drs-gcu-resource-name",
        attr="enflame_drs_gcu_resource_name",
    ),
    _f("kunlun-name", _STRING, "kunlunxin xpu resource count"),
    _f("kunlun-vcount", _STRING, "kunlunxin vxpu resource count"),
    _f("kunlun-vmemory", _STRING, "kunlunxin vxpu memory resource"),
    _f("metax-name", _STRING, "metax gpu resource count"),
    _f("metax-vcore", _STRING, "metax sgpu core resource"),
    _f("metax-vcount", _STRING, "metax sgpu resource count"),
    _f("metax-vmemory", _STRING, "metax sgpu memory resource"),
    _f("mthreads-cores", _STRING, "mthreads core resource"),
    _f("mthreads-memory", _STRING, "mthreads memory resource"),
    _f("mthreads-name", _STRING, "mthreads resource count"),
    _f("sgpu-topology-aware", _GO_BOOL, "metax sgpu topology aware scheduling"),
)

# The global (device) flags HAMi adds as *persistent* flags: the only ones its `version`
# subcommand accepts (root flags, klog flags and -h belong to the root command alone).
PERSISTENT_FLAGS: tuple[Flag, ...] = FLAGS[[f.name for f in FLAGS].index("help") + 1 :]


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


def parse_args(argv: Sequence[str], flags: Sequence[Flag] = FLAGS) -> tuple[SchedulerOptions, list[str]]:
    """Parse the command line (without the program name) into options and positional arguments;
    `flags` restricts the accepted flags (a subcommand sees only the persistent ones)."""
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
    return SchedulerOptions(**parser.values), positional


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
