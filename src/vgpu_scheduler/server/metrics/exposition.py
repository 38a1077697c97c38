"""The Prometheus text format (0.0.4) exactly as client_golang's expfmt writes it: families and
labels sorted by name, a bucket's `le` last, values in Go's shortest float formatting."""

from __future__ import annotations

import gzip
import math
import operator

from prometheus_client import CollectorRegistry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"
"""What client_golang's promhttp answers for the classic text format."""


def go_float(value: float) -> str:
    """A sample value as client_golang's text format writes it: Go's `%g`-shortest float64
    (`2`, `0.25`, `8.589934592e+09`, `1e+06`), `+Inf`/`-Inf`/`NaN`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    digits, exp = _shortest_digits(abs(value))
    sign = "-" if value < 0 else ""
    if exp < -4 or exp >= 6:  # shortest %g switches to the exponent form at 1e+06 (eprec 6)
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    whole = digits[: exp + 1].ljust(exp + 1, "0")
    frac = digits[exp + 1 :]
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def _shortest_digits(value: float) -> tuple[str, int]:
    """(significant digits, decimal exponent) of the shortest repr that round-trips (Python's
    repr is shortest-round-trip, as Go's strconv with precision -1)."""
    mantissa, _, exp = f"{value!r}".partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    lead_zeros = len(whole + frac) - len((whole + frac).lstrip("0"))
    exponent = len(whole) - 1 - lead_zeros + (int(exp) if exp else 0)
    return digits.rstrip("0") or "0", exponent


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_order(item: tuple[str, str]) -> tuple[bool, str]:
    return item[0] == "le", item[0]  # a bucket's `le` comes after the series' own labels, as in Go


def exposition(registry: CollectorRegistry) -> bytes:
    """The text format (0.0.4) as client_golang's expfmt writes it: families sorted by name, labels
    sorted by name (a histogram bucket's `le` last), values in Go's float formatting (`2`, not
    `2.0`)."""
    lines: list[str] = []
    for family in sorted(registry.collect(), key=operator.attrgetter("name")):
        # prometheus_client keeps a counter's name without `_total`; Go writes the full name.
        name = f"{family.name}_total" if family.type == "counter" else family.name
        lines.append(f"# HELP {name} {_escape_help(family.documentation)}")
        lines.append(f"# TYPE {name} {family.type}")
        for sample in family.samples:
            labels = ",".join(
                f'{k}="{_escape_label(v)}"' for k, v in sorted(sample.labels.items(), key=_label_order)
            )
            lines.append(
                f"{sample.name}{{{labels}}} {go_float(sample.value)}"
                if labels
                else f"{sample.name} {go_float(sample.value)}"
            )
    return ("\n".join(lines) + "\n").encode() if lines else b""


def render(registry: CollectorRegistry, compress: bool = False) -> bytes:
    """The text exposition of `registry`, gzip-compressed when asked."""
    body = exposition(registry)
    return gzip.compress(body, compresslevel=6) if compress else body
