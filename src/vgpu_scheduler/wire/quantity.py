"""Kubernetes `resource.Quantity` parsing and HAMi's "Quantity → int" conversion.

HAMi reads container resources with `Quantity.AsInt64()`, which succeeds only for values held in
Go's fast int64 form at a non-negative decimal scale. Which form a quantity has depends on its
text, and the text HAMi sees is the API server's *canonical* one (objects from the API server
are always re-serialised), so `quantity_as_int64` first canonicalises the value the way the API
server does and then applies AsInt64 to the canonical text. Consequences, all as in Go:

* "3" → 3, "2k" → 2000, "1Ki" → 1024, "16Gi" → 17179869184, "2000m" → 2 (canonical "2");
* "0.5" (canonical "500m") and "1500m" → None: a negative scale is never an int;
* values whose canonical form needs more digits than the fast path holds → None, e.g. a
  19-digit integer, "100Ti" or "1Pi" (Go keeps these as inf.Dec), and anything beyond int64.

`canonical_quantity` gives that canonical text ("1000m" → "1", "1024Mi" → "1Gi", "3000" → "3k",
as observed on a 1.36 API server). Not modelled: Go rejects a few degenerate texts on its inf.Dec
path (e.g. "Pi" with no digits) that are read here as zero, and values of 10^40 or more are
rejected here although Go would hold them.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SI_BY_EXP = {e: s for s, e in _DECIMAL_SI.items()}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BINARY_SI_BY_EXP = {e: s for s, e in _BINARY_SI.items()}

# Number part as Go's scanner reads it: sign, digits, optional '.', digits (all may be empty);
# then a run of suffix letters, an optional sign and digits (the decimal exponent).
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)\Z")
_EXPONENT = re.compile(r"[+-]?[0-9]+\Z")

_NANO = Fraction(1, 10**9)
# Values of 10**40 and beyond are rejected instead of being computed exactly: no resource is
# that large, and an exponent such as "1e2147483647" must not make us build a giant integer.
_MAX_DIGITS = 40
_MAX_TEXT_DIGITS = 1000

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity."""


def _suffix(suffix: str, text: str) -> tuple[int, int, str]:
    """(base, exponent, format) of a suffix, as Go's quantitySuffixer.interpret."""
    if suffix in _DECIMAL_SI:
        return 10, _DECIMAL_SI[suffix], DECIMAL_SI
    if suffix in _BINARY_SI:
        return 2, _BINARY_SI[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT.match(suffix[1:]):
        exp = int(suffix[1:])
        if INT64_MIN <= exp <= INT64_MAX:
            # Go truncates the parsed int64 exponent to int32.
            return 10, (exp + 2**31) % 2**32 - 2**31, DECIMAL_EXPONENT
    raise QuantityError(f"unable to parse quantity's suffix: {text!r}")


_PARSED: dict[str, tuple[Fraction, str]] = {}
_AS_INT64: dict[str, int | None] = {}
_MAX_MEMO = 8192
"""Distinct quantity texts remembered: a fleet's pods and nodes repeat a few ("500m", "1Gi")."""


def _memo(memo: dict[str, Any], text: str, value: Any) -> None:
    if len(memo) >= _MAX_MEMO:
        memo.clear()
    memo[text] = value


def _parse(text: str) -> tuple[Fraction, str]:
    """`_parse_text`, parsed once per distinct text (the result is immutable)."""
    parsed = _PARSED.get(text)
    if parsed is None:
        parsed = _parse_text(text)
        _memo(_PARSED, text, parsed)
    return parsed


def _parse_text(text: str) -> tuple[Fraction, str]:
    s = text.strip()  # Quantity.UnmarshalJSON trims spaces before parsing
    if not s:
        raise QuantityError("quantities must not be empty")
    m = _QUANTITY.match(s)
    if m is None:
        raise QuantityError(
            f"quantities must match the regular expression "
            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}"
        )
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    # Go's scanner reads a missing number as 0 ("-", ".", even "Ki"); the API server would
    # canonicalise those to "0", so they are accepted as zero here too.
    base, exponent, fmt = _suffix(suffix, text)
    if len(whole) + len(frac) > _MAX_TEXT_DIGITS:
        raise QuantityError(f"quantity has too many digits: {text[:40]!r}...")
    digits = int(whole + frac or "0")
    if digits == 0:
        return Fraction(0), fmt
    if base == 10:
        exp10 = exponent - len(frac)
        magnitude = len(str(digits)) + exp10  # value < 10**magnitude
        if magnitude > _MAX_DIGITS:
            raise QuantityError(f"quantity is too large to be represented: {text!r}")
        # Below 1e-9 everything rounds up to the smallest quantity, 1n.
        value = _NANO if magnitude < -9 else Fraction(digits) * Fraction(10) ** exp10
    else:
        value = Fraction(digits, 10 ** len(frac)) * 2**exponent
    # Go rounds the magnitude up to a whole number of nano units ("0.1n" → "1n").
    if value.denominator != 1:
        value = Fraction(math.ceil(value / _NANO)) * _NANO
    if sign == "-":
        value = -value
    return value, fmt


def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity (after Kubernetes' round-up to nano precision)."""
    return _parse(text)[0]


def _decimal_canonical(value: Fraction) -> tuple[int, int]:
    """(mantissa, exponent) with exponent a multiple of 3, as AsCanonicalBytes."""
    # value has at most 9 decimals; make it an integer at scale -9, strip factors of ten.
    m = int(value / _NANO)
    e = -9
    while m % 10 == 0:
        m //= 10
        e += 1
    r = e % 3  # Python's modulo is floor-based: lower e to the multiple of 3 below it
    return m * 10**r, e - r


def _canonical_parts(value: Fraction, fmt: str) -> tuple[int, int, str]:
    """(mantissa, exponent, format) of the canonical text, as CanonicalizeBytes.

    The value is mantissa * 1024**exponent for BinarySI and mantissa * 10**exponent otherwise.
    """
    if value == 0:
        return 0, 0, DECIMAL_SI
    if fmt == BINARY_SI:
        if abs(value) > INT64_MAX:
            # ParseQuantity caps BinarySI magnitudes at 2^63-1.
            value = Fraction(INT64_MAX if value > 0 else -INT64_MAX)
        if abs(value) >= 1024 and value.denominator == 1:
            n, k = int(value), 0
            while n % 1024 == 0 and k < 6:
                n //= 1024
                k += 1
            return (n, k, BINARY_SI) if k else (n, 0, DECIMAL_SI)
        fmt = DECIMAL_SI  # small or fractional binary quantities print as DecimalSI
    num, exponent = _decimal_canonical(value)
    if fmt == DECIMAL_SI and exponent not in _DECIMAL_SI_BY_EXP:
        fmt = DECIMAL_EXPONENT  # beyond "E" (>= 10^21); Go has no suffix for it either
    return num, exponent, fmt


def canonical_quantity(text: str) -> str:
    """The text the API server stores for `text` ("1000m" → "1", "1024Mi" → "1Gi", "3000" → "3k")."""
    num, exponent, fmt = _canonical_parts(*_parse(text))
    if fmt == BINARY_SI:
        return f"{num}{_BINARY_SI_BY_EXP[10 * exponent]}"
    if fmt == DECIMAL_SI:
        return f"{num}{_DECIMAL_SI_BY_EXP[exponent]}"
    return f"{num}e{exponent}" if exponent else str(num)


def _as_int64(num: int, exponent: int, fmt: str) -> int | None:
    """AsInt64 of a quantity re-read from its canonical text.

    Go's ParseQuantity keeps the int64 fast form only while the digits fit its precision budget
    (18 decimal digits; fewer for binary suffixes) and otherwise falls back to inf.Dec, for which
    AsInt64 always fails; a negative decimal scale also fails.
    """
    digits = len(str(abs(num)))
    if fmt == BINARY_SI:
        if 15 - digits - 3 * exponent - 1 < 0:
            return None
        result = num * 1024**exponent
    else:
        if digits > 18 or exponent < 0:
            return None
        result = num * 10**exponent
    return result if INT64_MIN <= result <= INT64_MAX else None


def quantity_as_int64(quantity: str | int | float) -> int | None:
    """Go's `Quantity.AsInt64()` on the API server's canonical form of `quantity`, or None."""
    if isinstance(quantity, bool):
        return None
    if isinstance(quantity, float):
        if not math.isfinite(quantity):
            return None
        text = repr(quantity)
    else:
        text = str(quantity)
    if text in _AS_INT64:
        return _AS_INT64[text]
    try:
        value, fmt = _parse(text)
    except QuantityError:
        return None
    result = _as_int64(*_canonical_parts(value, fmt))
    _memo(_AS_INT64, text, result)
    return result


# kube-scheduler's resource accounting, shared by the simulated predicates and the demo fleets.


class ResourceError(ValueError):
    """A resource quantity that is not a valid Kubernetes quantity."""


def quantity_units(resource: str, raw: object) -> int:
    """A quantity as kube-scheduler counts it: millicores for cpu, otherwise the value rounded up
    (bytes for memory and ephemeral-storage, units for extended resources)."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ResourceError(f"{resource}: quantity must be a string or number, got {raw!r}")
    text = repr(raw) if isinstance(raw, float) else str(raw)
    try:
        value = parse_quantity(text)
    except ValueError as exc:
        raise ResourceError(f"{resource}: {exc}") from None
    if resource == "cpu":
        value *= 1000
    return math.ceil(value)
