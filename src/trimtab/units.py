"""Quantities and durations as Kubernetes manifests and trimtab's own files and options write them.

Owns the one grammar for both: `parse_quantity` ("4Gi", "500m", "1.5", "2e3") and `parse_duration_s` ("2h",
"1h30m", "7d", "90s", plain seconds). Errors are plain ValueErrors; callers add the file, document and field."""

from __future__ import annotations

import math
import re
from fractions import Fraction

# A number, an optional decimal exponent, then an optional suffix. Kubernetes writes one of exponent or suffix;
# cluster files also wrote both ("1e3m") and a space before the suffix ("512 Gi"), so both are read.
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))([eE][+-]?\d+)?\s*(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|K|M|G|T|P|E)?")
_SUFFIX = {"": Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
           "k": Fraction(10**3), "K": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9),
           "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18), "Ki": Fraction(2**10),
           "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50),
           "Ei": Fraction(2**60)}
MAX_QUANTITY = 2**63 - 1  # Kubernetes caps every quantity at this magnitude (apimachinery resource.Quantity)
_MAX_EXPONENT = 40  # beyond it no quantity fits MAX_QUANTITY (or is non-zero at nano precision); checked first
_MAX_DIGITS = 64  # the same for the digits written: checked before Fraction() converts them (slow, then refused)

# One or more `<number><unit>` parts ("1h30m", "2 h"), or a bare number of seconds ("3600", "1e3").
_DURATION_PART = re.compile(r"\s*(\+?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*(ms|min|s|m|h|d|w)?")
_DURATION_UNIT_S = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0,
                    "w": 7 * 86400.0}
_FOREVER = ("inf", "never", "off")
_DURATION_EXAMPLES = "expected e.g. 90s, 15m, 2h, 1h30m, 7d, 3600 or never"


def shown(value: object, max_chars: int = 40) -> str:
    """The value as an error message quotes it: its repr, cut to `max_chars` (400 nines stay readable, and an
    answer never echoes a large input back)."""
    text = repr(value)
    return text if len(text) <= max_chars else f"{text[:max_chars - 3]}..."


def parse_quantity(value: object) -> Fraction:
    """A Kubernetes quantity (`4Gi`, `500m`, `1.5`, `2e3`, `8`, or a YAML number) as an exact fraction.

    Suffixes: n u m (10^-9, 10^-6, 10^-3), k/K M G T P E (powers of 1000), Ki Mi Gi Ti Pi Ei (powers of 1024).
    Raises ValueError for anything else, for a negative amount (no resource trimtab reads can be negative) and
    for a magnitude over 2^63 - 1."""
    if isinstance(value, str) and (known := _PARSED.get(value)) is not None:
        return known
    text = str(value).strip() if isinstance(value, int | float | str) and not isinstance(value, bool) else "?"
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"quantity {shown(value)} does not parse (expected e.g. 4Gi, 500m, 2)")
    number, exponent, suffix = match.groups()
    if len(number) > _MAX_DIGITS:
        raise ValueError(f"quantity {shown(value)} is out of range (more than {_MAX_DIGITS} digits)")
    power = int(exponent[1:]) if exponent else 0
    if abs(power) > _MAX_EXPONENT:
        raise ValueError(f"quantity {shown(value)} is out of range (exponent beyond +-{_MAX_EXPONENT})")
    quantity = Fraction(number) * Fraction(10) ** power * _SUFFIX[suffix or ""]
    if quantity < 0:
        raise ValueError(f"expected a non-negative quantity, got {shown(value)}")
    if quantity > MAX_QUANTITY:
        raise ValueError(f"quantity {shown(value)} is out of range (at most {MAX_QUANTITY})")
    if isinstance(value, str) and len(_PARSED) < PARSED_MAX:
        _PARSED[value] = quantity
    return quantity


PARSED_MAX = 4096  # distinct quantity strings remembered: a cluster's pods ask for a few amounts, each parsed once
_PARSED: dict[str, Fraction] = {}


def parse_duration_s(value: object, what: str = "") -> float:
    """Seconds in a duration: a number of seconds (`3600`, `1.5e3`, a YAML number), one or more parts with a
    unit (`90s`, `15m`, `2h`, `1h30m`, `7d`, `1w`, `500ms`; `min` = `m`; any case, spaces allowed between parts),
    or `inf` / `never` / `off` for infinity.

    Never negative. `what` names the value at the start of an error message (a key, an option); callers that
    know a file, document or field wrap the ValueError with it. A finite text too large for a float is an error."""
    prefix = f"{what}: " if what else ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:
            raise ValueError(f"{prefix}duration {shown(value)} is too large") from None
        if math.isnan(seconds) or seconds < 0:
            raise ValueError(f"{prefix}duration {shown(value)} must be a non-negative time")
        return seconds
    text = str(value).strip().lower() if isinstance(value, str) else ""
    if text in _FOREVER:
        return math.inf
    seconds, end = 0.0, 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != end or (match[2] is None and (end or match.end() != len(text))):
            break  # a gap, or a bare number among parts with units
        seconds += float(match[1]) * _DURATION_UNIT_S[match[2] or ""]
        end = match.end()
    if not text or end != len(text):
        raise ValueError(f"{prefix}duration {shown(value)} does not parse ({_DURATION_EXAMPLES})")
    if not math.isfinite(seconds):
        raise ValueError(f"{prefix}duration {shown(value)} is too large")
    return seconds


__all__ = ["MAX_QUANTITY", "parse_duration_s", "parse_quantity", "shown"]
