"""CEL device selectors as DRA evaluates them: an expression over `device` (driver, attributes and capacity by
domain, allowMultipleAllocations) that must be true for a device to be chosen.

Owns compile_selector (a compiled expression, or a FormatError-ready message) and Selector.matches. The
Kubernetes quantity and semver functions are provided; a runtime error (a missing attribute) is not a match, and
its message is kept, as the scheduler reports it. See docs/kubernetes.md (DRA) for what is not covered."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import celpy
from celpy import celtypes

from trimtab.units import parse_quantity


@functools.total_ordering
@dataclass(frozen=True, slots=True)
class Quantity:
    """A Kubernetes quantity in CEL (`quantity("40Gi")`, a device's capacity)."""

    value: Fraction

    def __lt__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value < other.value


@functools.total_ordering
@dataclass(frozen=True, slots=True)
class Semver:
    """A semantic version in CEL (`semver("1.2.3")`, a version attribute)."""

    text: str
    parts: tuple[int, int, int]

    def __lt__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.parts < other.parts


def semver(text: Any) -> Semver:
    core = str(text).split("-")[0].split("+")[0].split(".")
    if len(core) != 3 or not all(p.isdigit() for p in core):
        raise ValueError(f"invalid semantic version {text!r}")
    return Semver(str(text), (int(core[0]), int(core[1]), int(core[2])))


def _quantity(text: Any) -> Quantity:
    return Quantity(parse_quantity(str(text)))


def _compare(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType((a > b) - (a < b))


def _number(q: Quantity | int) -> Fraction:
    return q.value if isinstance(q, Quantity) else Fraction(int(q))


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": lambda s: celtypes.BoolType(_valid(_quantity, s)),
    "semver": semver,
    "isSemver": lambda s: celtypes.BoolType(_valid(semver, s)),
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(a > b),
    "isLessThan": lambda a, b: celtypes.BoolType(a < b),
    "asInteger": lambda q: celtypes.IntType(int(q.value)),
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(q.value)),
    "sign": lambda q: celtypes.IntType((q.value > 0) - (q.value < 0)),
    "add": lambda a, b: Quantity(_number(a) + _number(b)),
    "sub": lambda a, b: Quantity(_number(a) - _number(b)),
    "major": lambda v: celtypes.IntType(v.parts[0]),
    "minor": lambda v: celtypes.IntType(v.parts[1]),
    "patch": lambda v: celtypes.IntType(v.parts[2]),
}


def _valid(parse: Callable[[Any], Any], text: Any) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


class _Domains(celtypes.MapType):
    """device.attributes and device.capacity: a domain no attribute has reads as an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()


@dataclass(frozen=True, slots=True)
class Selector:
    """One compiled CEL selector; `matches(activation)` is (matched, runtime error message or "")."""

    expression: str
    program: Any

    def matches(self, activation: Mapping[str, Any]) -> tuple[bool, str]:
        try:
            result = self.program.evaluate(activation)
        except (celpy.CELEvalError, TypeError, ValueError, KeyError, AttributeError) as exc:
            return False, f"CEL runtime error in {self.expression!r}: {exc.args[0] if exc.args else exc}"
        if isinstance(result, celpy.CELEvalError):
            return False, f"CEL runtime error in {self.expression!r}: {result.args[0] if result.args else result}"
        if not isinstance(result, bool | celtypes.BoolType):
            return False, f"CEL expression {self.expression!r} must evaluate to bool, got {type(result).__name__}"
        return bool(result), ""


_ENV = celpy.Environment()


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Selector | str:
    """The compiled selector, or the compile error's message (the API server would have refused it)."""
    try:
        ast = _ENV.compile(expression)
    except celpy.CELParseError as exc:
        return f"CEL expression {expression!r} does not compile: {str(exc).splitlines()[0]}"
    return Selector(expression, _ENV.program(ast, functions=_FUNCTIONS))


def activation(driver: str, attributes: Mapping[str, Any], capacity: Mapping[str, Fraction],
               multiple: bool = False) -> dict[str, Any]:
    """The `device` variable of a device: attribute and capacity names split into domain and id (a name without
    a domain is the driver's), values as CEL sees them (versions as semver, capacities as quantities)."""
    attrs: dict[Any, Any] = {}
    for name, value in attributes.items():
        domain, _, ident = name.rpartition("/")
        attrs.setdefault(celtypes.StringType(domain or driver), celtypes.MapType())[
            celtypes.StringType(ident)] = _cel_value(value)
    caps: dict[Any, Any] = {}
    for name, amount in capacity.items():
        domain, _, ident = name.rpartition("/")
        caps.setdefault(celtypes.StringType(domain or driver), celtypes.MapType())[
            celtypes.StringType(ident)] = Quantity(amount)
    device = celtypes.MapType({
        celtypes.StringType("driver"): celtypes.StringType(driver),
        celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(multiple),
        celtypes.StringType("attributes"): _Domains(attrs),
        celtypes.StringType("capacity"): _Domains(caps)})
    return {"device": device}


def _cel_value(value: Any) -> Any:
    if isinstance(value, Semver):
        return value
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, (list, tuple)):
        return celtypes.ListType([_cel_value(v) for v in value])
    return celtypes.StringType(str(value))
