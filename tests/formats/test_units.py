"""The one grammar of quantities and durations: every form Kubernetes, cluster files and our options write reads to
the same value it always did, and bad input is a clean ValueError; table-driven."""

import math
from fractions import Fraction

import pytest

from trimtab.units import MAX_QUANTITY, parse_duration_s, parse_quantity

QUANTITIES = [
    # as Kubernetes writes them
    ("4Gi", 4 * 2**30), ("500m", Fraction(1, 2)), ("1.5", Fraction(3, 2)), ("2", 2), (3, 3), ("2e3", 2000),
    ("1E", 10**18), ("1k", 1000), ("128974848", 128974848), ("129M", 129 * 10**6), ("123Mi", 123 * 2**20),
    ("0.1", Fraction(1, 10)), ("100u", Fraction(1, 10**4)), ("5n", Fraction(5, 10**9)), ("1Ei", 2**60),
    ("+8", 8), (".5", Fraction(1, 2)), ("5.", 5), ("1.5e-3", Fraction(3, 2000)), (0.25, Fraction(1, 4)),
    (1e-07, Fraction(1, 10**7)), (" 8 ", 8), ("0", 0), ("-0", 0),
    # as cluster files and submissions wrote them too
    ("512 Gi", 512 * 2**30), ("1e3m", 1), ("4K", 4000), (str(MAX_QUANTITY), MAX_QUANTITY),
]


@pytest.mark.parametrize(("text", "value"), QUANTITIES, ids=[repr(q[0]) for q in QUANTITIES])
def test_quantities_read_as_they_are_written(text, value):
    assert parse_quantity(text) == value


BAD_QUANTITIES = [
    ("4GiB", "does not parse"), ("abc", "does not parse"), ("", "does not parse"), ("1.2.3", "does not parse"),
    (True, "does not parse"), (None, "does not parse"), ([1], "does not parse"), ("inf", "does not parse"),
    (float("nan"), "does not parse"), ("Gi", "does not parse"), ("1 e3", "does not parse"),
    ("-1", "non-negative"), (-1, "got -1"), ("-500m", "non-negative"),
    ("9" * 400, "out of range"), (str(MAX_QUANTITY + 1), "out of range"), ("1e99", "out of range"),
    ("1e999999999", "out of range"), ("8Ei", "out of range"),
]


@pytest.mark.parametrize(("text", "words"), BAD_QUANTITIES, ids=[repr(q[0])[:20] for q in BAD_QUANTITIES])
def test_bad_quantities_are_a_clean_value_error(text, words):
    with pytest.raises(ValueError, match=words) as err:
        parse_quantity(text)
    assert type(err.value) is ValueError and len(str(err.value)) < 200


DURATIONS = [
    # as Kubernetes annotations and reservations wrote them
    ("2h", 7200), ("1h30m", 5400), ("90s", 90), ("3600", 3600), (45, 45), ("1.5h", 5400), ("1d", 86400),
    ("500ms", 0.5), ("1d2h3m4s", 93784), ("1e3", 1000), ("+5", 5), ("5.", 5), (2.5, 2.5), (0, 0),
    # as --faults and --burst wrote them
    ("15m", 900), ("7d", 604800), ("1w", 604800), ("2min", 120), ("2H", 7200), (" 2 h ", 7200), ("1.5e3s", 1500),
    (".5h", 1800), ("never", math.inf), ("inf", math.inf), ("OFF", math.inf), (math.inf, math.inf),
    # both at once
    ("1h 30m", 5400),
]


@pytest.mark.parametrize(("text", "seconds"), DURATIONS, ids=[repr(d[0]) for d in DURATIONS])
def test_durations_read_as_they_are_written(text, seconds):
    assert parse_duration_s(text) == seconds


BAD_DURATIONS = [
    ("", "does not parse"), ("soon", "does not parse"), ("-5", "does not parse"), (-5, "non-negative"),
    ("1h30", "does not parse"), ("30 1h", "does not parse"), ("2y", "does not parse"), ("h", "does not parse"),
    (True, "does not parse"), (None, "does not parse"), (float("nan"), "non-negative"), ("nan", "does not parse"),
    ("9" * 400, "too large"), (10**400, "too large"), ("1e999s", "too large"), ("1e308d", "too large"),
]


@pytest.mark.parametrize(("text", "words"), BAD_DURATIONS, ids=[repr(d[0])[:20] for d in BAD_DURATIONS])
def test_bad_durations_are_a_clean_value_error(text, words):
    with pytest.raises(ValueError, match=words) as err:
        parse_duration_s(text)
    assert type(err.value) is ValueError and len(str(err.value)) < 200


def test_a_duration_error_names_what_it_is_about():
    with pytest.raises(ValueError, match=r"^node-mtbf: duration 'soon' does not parse"):
        parse_duration_s("soon", "node-mtbf")
