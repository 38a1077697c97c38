"""Kubernetes quantities and Go's `Quantity.AsInt64()` (docs/compatibility.md, Conventions)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.wire.quantity import QuantityError, canonical_quantity, parse_quantity, quantity_as_int64


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("0", 0),
        ("-0", 0),
        ("+5", 5),
        ("-5", -5),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("5.", 5),
        ("1n", Fraction(1, 10**9)),
        ("1u", Fraction(1, 10**6)),
        ("1m", Fraction(1, 1000)),
        ("2k", 2000),
        ("1M", 10**6),
        ("1G", 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),
        ("1Ki", 1024),
        ("1Mi", 2**20),
        ("1Gi", 2**30),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        ("1.5Gi", 3 * 2**29),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1e+3", 1000),
        ("15e-1", Fraction(3, 2)),
        ("-2.5e2", -250),
        ("0.1n", Fraction(1, 10**9)),  # rounded up to the smallest quantity
        ("-0.1n", Fraction(-1, 10**9)),  # magnitude rounded up
        ("1e-30", Fraction(1, 10**9)),
        ("2.9999999999", 3),
        (" 7 ", 7),  # Quantity.UnmarshalJSON trims spaces
        ("-", 0),  # Go's scanner: no digits reads as zero
        (".", 0),
    ],
    ids=str,  # text-value, e.g. "1.5Gi-1610612736"
)
def test_parse_quantity(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "abc",
        "1K",
        "1ki",
        "1e",
        "1i",
        "1Kib",
        "1.5.5",
        "1 Gi",
        "--1",
        "+-1",
        "1e1.5",
        "1Mi5",
        "0x10",
        "1_000",
    ],
)
def test_parse_quantity_errors(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_absurd_exponent_is_rejected_quickly() -> None:
    with pytest.raises(QuantityError, match="too large"):
        parse_quantity("1e2147483647")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("1e-9223372036854775808", Fraction(1), id="int64's minimum: low 32 bits 0"),
        pytest.param("1e9223372036854775807", Fraction(1, 10), id="int64's maximum: low 32 bits -1"),
        pytest.param("1e4294967296", Fraction(1), id="2^32: low 32 bits 0"),
    ],
)
def test_an_exponent_is_read_as_int64_then_truncated_to_int32_like_go(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


def test_an_exponent_beyond_int64_is_no_quantity() -> None:
    with pytest.raises(QuantityError):
        parse_quantity("1e-9223372036854775809")


def test_a_tiny_exponent_rounds_up_to_one_nano_quickly() -> None:
    assert parse_quantity("1e-2147483647") == Fraction(1, 10**9)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("1e39", Fraction(10**39), id="just below 10^40"),
        pytest.param("0." + "0" * 999, Fraction(0), id="1000 digits"),
    ],
)
def test_the_largest_accepted_quantities(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "quantities must not be empty", id="empty"),
        pytest.param(
            "abc",
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': 'abc'",
            id="not a number",
        ),
        pytest.param("1K", "unable to parse quantity's suffix: '1K'", id="unknown suffix"),
        pytest.param("1e40", "quantity is too large to be represented: '1e40'", id="10^40"),
        pytest.param(
            "0." + "1" * 1000, "quantity has too many digits: '" + "0." + "1" * 38 + "'...",
            id="1001 digits, most of them decimals",
        ),
    ],
)
def test_parse_error_messages(text: str, message: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(text)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        # The examples of docs/compatibility.md.
        ("3", 3),
        ("2k", 2000),
        ("1Ki", 1024),
        ("16Gi", 17179869184),
        ("2000m", 2),
        ("0.5", None),
        ("1500m", None),
        # More of Go's behaviour.
        ("0", 0),
        ("-3", -3),
        ("1", 1),
        ("4096", 4096),
        ("1M", 1_000_000),
        ("1.5G", 1_500_000_000),
        ("1e3", 1000),
        ("100e-2", 1),
        ("1Mi", 1_048_576),
        ("1.5Ki", 1536),
        ("1023", 1023),
        ("512Ki", 524_288),
        ("10Ti", 10 * 2**40),
        ("2.9999999999", 3),  # Go rounds up to nano precision first
        ("1n", None),
        ("0.000000001", None),
        ("1000000000000000000", 10**18),  # canonical "1E"
        ("9E", 9 * 10**18),
        ("123456789012345678", 123456789012345678),  # 18 digits: Go's fast path
        ("1234567890123456789", None),  # 19 digits: kept as inf.Dec, AsInt64 fails
        ("9223372036854775807", None),
        ("9223372036854775808", None),
        ("10E", None),
        ("1e19", None),
        ("1e40", None),
        ("100Ti", None),  # Go keeps large binary quantities as inf.Dec
        ("1Pi", None),
        ("1024Ti", None),
        ("8Ei", None),
        ("abc", None),
        ("", None),
        ("1e2147483647", None),
        # Non-string inputs (YAML workloads in the simulator).
        (3, 3),
        (2**63, None),
        (2.0, 2),
        (0.5, None),
        (1e20, None),
        (float("inf"), None),
        (float("nan"), None),
        (True, None),
    ],
)
def test_quantity_as_int64(quantity: str | int | float, expected: int | None) -> None:
    assert quantity_as_int64(quantity) == expected


@given(st.integers(-(10**18), 10**18))
def test_small_integers_always_convert(n: int) -> None:
    # Whatever the canonical suffix, an integer of at most 18 digits converts exactly.
    assert quantity_as_int64(str(n)) == n


@given(st.integers(-(10**15), 10**15), st.sampled_from(["", "k", "M", "G"]))
def test_decimal_suffixes_convert_when_in_range(n: int, suffix: str) -> None:
    expected = n * {"": 1, "k": 10**3, "M": 10**6, "G": 10**9}[suffix]
    result = quantity_as_int64(f"{n}{suffix}")
    if -(2**63) <= expected < 2**63:
        assert result == expected  # at most 16 significant digits: always Go's fast path
    else:
        assert result is None


@given(st.integers(1, 10**6), st.integers(1, 999))
def test_fractional_values_never_convert(whole: int, millis: int) -> None:
    assert quantity_as_int64(f"{whole}.{millis:03d}".rstrip("0")) is None


@given(st.text(max_size=20))
def test_as_int64_never_raises(text: str) -> None:
    result = quantity_as_int64(text)
    assert result is None or -(2**63) <= result < 2**63


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        # Observed on a kube-apiserver 1.36 (fixtures/kube-1.36/README.md and the pod fixtures).
        ("1000m", "1"),
        ("2000m", "2"),
        ("1024Mi", "1Gi"),
        ("65536Mi", "64Gi"),
        ("3000", "3k"),
        ("1000", "1k"),
        ("100m", "100m"),
        ("128Mi", "128Mi"),
        ("16", "16"),
        ("64Gi", "64Gi"),
        # Go's CanonicalizeBytes rules.
        ("0", "0"),
        ("0.0", "0"),
        ("-1000m", "-1"),
        ("1.5", "1500m"),
        ("0.5", "500m"),
        ("1024", "1024"),
        ("1500000", "1500k"),
        ("0.1n", "1n"),
        ("12e6", "12e6"),
        ("1e3", "1e3"),
        ("1.5e0", "1500e-3"),
        ("1Ki", "1Ki"),
        ("2048Ki", "2Mi"),
        ("1.5Gi", "1536Mi"),
        ("1.5Ki", "1536"),
        ("0.5Ki", "512"),
        ("0.001Ki", "1024m"),  # a binary quantity below 1024 prints as DecimalSI, fraction and all
        ("512Ki", "512Ki"),
        ("100Ei", "9223372036854775807"),  # BinarySI magnitudes are capped at 2^63-1
        ("-100Ei", "-9223372036854775807"),  # the sign is taken off before the cap, put back after
        ("1000E", "1e21"),
        ("1e0", "1"),  # an exponent of 0 is not written
        ("1000e-3", "1"),
    ],
)
def test_canonical_quantity(text: str, canonical: str) -> None:
    assert canonical_quantity(text) == canonical


_quantities = st.builds(
    lambda sign, whole, frac, suffix: f"{sign}{whole}{frac}{suffix}",
    st.sampled_from(["", "-", "+"]),
    st.integers(0, 10**12).map(str),
    st.one_of(st.just(""), st.integers(0, 999_999).map(lambda f: f".{f}")),
    st.sampled_from(
        ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "e-2"]
    ),
)


@given(_quantities)
def test_canonical_form_is_stable(text: str) -> None:
    canonical = canonical_quantity(text)
    assert canonical_quantity(canonical) == canonical
    assert quantity_as_int64(canonical) == quantity_as_int64(text)
    if abs(parse_quantity(text)) <= 2**63 - 1:
        assert parse_quantity(canonical) == parse_quantity(text)
