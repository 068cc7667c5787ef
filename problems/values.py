"""Tagged JSON: the one encoding for test data on disk and for values crossing the sandbox pipe.

Plain JSON loses tuples, sets, None-vs-missing, bytes, complex and non-finite floats; comparing a
candidate's output with the expected value needs all of them. Decoding builds only plain builtins, so
nothing a candidate sends can run code or override ``==`` in the parent.
"""
from __future__ import annotations

import json
import math
TYPE_CHECKING = False  # the sandbox worker imports this module: not even `typing` at run time
if TYPE_CHECKING:
    from typing import Any

from .errors import VevoError

MAX_DEPTH = 200
MAX_INT_HEX_DIGITS = 1 << 20  # a 4-Mbit int: far above any test value, small enough to decode in milliseconds


class ValueCodecError(VevoError, ValueError):
    pass


def encode(value: Any, _depth: int = 0) -> Any:
    """Builtin value → JSON-able structure. Exact types only: subclasses (a str that lies about
    ``__eq__``, a bool posing as int) are rejected rather than trusted."""
    if _depth > MAX_DEPTH:
        raise ValueCodecError("value nested too deeply")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        return value if abs(value) < 2**53 else {"__int__": hex(value)}
    if t is float:
        return value if math.isfinite(value) else {"__float__": repr(value)}
    d = _depth + 1
    if t is list:
        return [encode(v, d) for v in value]
    if t is tuple:
        return {"__tuple__": [encode(v, d) for v in value]}
    if t is set or t is frozenset:
        items = [encode(v, d) for v in value]
        items.sort(key=lambda x: json.dumps(x, sort_keys=True))
        return {"__set__" if t is set else "__frozenset__": items}
    if t is dict:
        if all(type(k) is str for k in value) and not any(k.startswith("__") and k.endswith("__") for k in value):
            return {k: encode(v, d) for k, v in value.items()}
        return {"__dict__": [[encode(k, d), encode(v, d)] for k, v in value.items()]}
    if t is bytes:
        return {"__bytes__": value.hex()}
    if t is complex:
        return {"__complex__": [encode(value.real, d), encode(value.imag, d)]}
    return _encode_subclass(value, t, d)


def _encode_subclass(value: Any, t: type, d: int) -> Any:
    """Subclasses of builtins (Counter, defaultdict, OrderedDict, namedtuple, IntEnum, numpy floats) and numpy
    scalars/arrays travel as their builtin base, read through the base type's own methods. Safe: the parent
    compares the plain copy, so an overridden ``__eq__`` or ``__iter__`` can only change which value is sent."""
    for base in (bool, int, float, str, bytes, complex):
        if isinstance(value, base):
            return encode(base(value) if base is not int else int.__index__(value), d)
    if isinstance(value, dict):
        return encode(dict(dict.items(value)), d)
    if isinstance(value, tuple):
        return encode(tuple(tuple.__iter__(value)), d)
    if isinstance(value, list):
        return encode(list(list.__iter__(value)), d)
    if isinstance(value, frozenset):
        return encode(frozenset(frozenset.__iter__(value)), d)
    if isinstance(value, set):
        return encode(set(set.__iter__(value)), d)
    if t.__module__ == "numpy" and hasattr(value, "tolist"):
        return encode(value.tolist(), d)
    raise ValueCodecError(f"unsupported type {t.__name__}")


class Opaque:
    """A value that could not cross the pipe (a regex match, a custom object): truthy, like most objects,
    and equal to nothing."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __eq__(self, other: Any) -> bool:
        return False

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


def opaque(value: Any) -> dict:
    return {"__opaque__": type(value).__name__[:80]}


def decode(obj: Any, _depth: int = 0) -> Any:
    """JSON structure → builtin value. Bounded like ``encode`` (depth, big-int size), so a forged record costs
    the parent at most a ValueCodecError, never a RecursionError or a minutes-long int parse."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if _depth > MAX_DEPTH:
        raise ValueCodecError("value nested too deeply")
    d = _depth + 1
    if isinstance(obj, list):
        return [decode(v, d) for v in obj]
    if isinstance(obj, dict):
        if len(obj) == 1:
            (k, v), = obj.items()
            if k == "__tuple__":
                return tuple(decode(x, d) for x in v)
            if k == "__set__":
                return {_hashable(decode(x, d)) for x in v}
            if k == "__frozenset__":
                return frozenset(_hashable(decode(x, d)) for x in v)
            if k == "__dict__":
                return {_hashable(decode(a, d)): decode(b, d) for a, b in v}
            if k == "__bytes__":
                return bytes.fromhex(v)
            if k == "__complex__":
                return complex(decode(v[0], d), decode(v[1], d))
            if k == "__float__":
                return float(v)
            if k == "__int__":
                return _decode_int(v)
            if k == "__opaque__":
                return Opaque(str(v)[:80])
        return {k: decode(v, d) for k, v in obj.items()}
    raise ValueCodecError(f"cannot decode {type(obj).__name__}")


def _decode_int(text: Any) -> int:
    """Big ints travel as hex (linear to parse, unlike decimal); anything longer than the bound is refused."""
    if not isinstance(text, str) or len(text.lstrip("+-")) > MAX_INT_HEX_DIGITS + 2:  # + 2: the "0x"
        raise ValueCodecError("big int too large or not a string")
    return int(text, 0)


def _hashable(v: Any) -> Any:
    return tuple(_hashable(x) for x in v) if isinstance(v, list) else v


def safe_repr(value: Any, limit: int = 80) -> str:
    """repr for messages about untrusted values: at most `limit` characters and never raises (huge ints,
    deep nesting, a repr that raises or lies). Builds only as much text as it shows."""
    try:
        text = _bounded_repr(value, limit + 1, 0)
    except Exception:
        text = f"<unprintable {type(value).__name__}>"
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


_REPR_DEPTH = 6


def _bounded_repr(value: Any, budget: int, depth: int) -> str:
    """A repr cut off after about `budget` characters; containers deeper than _REPR_DEPTH show as '...'."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        bits = int.bit_length(value)
        if bits > 4 * budget + 64:  # decimal text would exceed the budget (or the int max-str-digits limit)
            return f"<{'negative ' if value < 0 else ''}int of {bits} bits>"
        return int.__repr__(value)
    if isinstance(value, (str, bytes)):
        return repr(value[:budget])
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return _container_repr(value, budget, depth)
    try:
        return repr(value)[:budget]
    except Exception:
        return f"<{type(value).__name__} object>"


def _container_repr(value: Any, budget: int, depth: int) -> str:
    open_, close = ("[", "]") if isinstance(value, list) else ("(", ")") if isinstance(value, tuple) else ("{", "}")
    if depth >= _REPR_DEPTH:
        return open_ + "..." + close
    parts: list[str] = []
    used = 0
    items = dict.items(value) if isinstance(value, dict) else value
    for item in items:
        if used >= budget:
            parts.append("...")
            break
        if isinstance(value, dict):
            k = _bounded_repr(item[0], budget - used, depth + 1)
            text = k + ": " + _bounded_repr(item[1], budget - used - len(k), depth + 1)
        else:
            text = _bounded_repr(item, budget - used, depth + 1)
        parts.append(text)
        used += len(text) + 2
    if isinstance(value, tuple) and len(parts) == 1:
        return "(" + parts[0] + ",)"
    if isinstance(value, (set, frozenset)) and not parts:
        return type(value).__name__ + "()"
    return open_ + ", ".join(parts) + close


def dumps(value: Any) -> str:
    return json.dumps(encode(value), separators=(",", ":"))


def loads(text: str) -> Any:
    return decode(json.loads(text))


def values_equal(got: Any, expected: Any, rel_tol: float = 1e-9, abs_tol: float = 0.0, strict_bool: bool = False) -> bool:
    """Structural equality computed in the parent on decoded builtins. Floats use a tolerance; an int
    equals an equal float and a bool equals 0/1 (as Python's == does, so ``assert f(x) == False`` passes on 0);
    ``strict_bool`` (a problem's choice) makes a bool equal only a bool."""
    if isinstance(expected, bool) or isinstance(got, bool):
        if strict_bool or not isinstance(got, (bool, int, float)) or not isinstance(expected, (bool, int, float)):
            return type(got) is type(expected) and got == expected
        return got == expected
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        if isinstance(expected, float) or isinstance(got, float):
            if math.isnan(expected) and math.isnan(got):
                return True
            return math.isclose(got, expected, rel_tol=rel_tol, abs_tol=abs_tol)
        return got == expected
    if isinstance(expected, complex) and isinstance(got, complex):
        return cmath_close(got, expected, rel_tol, abs_tol)
    if type(got) is not type(expected):
        # Python's == treats a list and a tuple as different; keep that.
        return False
    if isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(values_equal(a, b, rel_tol, abs_tol, strict_bool)
                                                 for a, b in zip(got, expected))
    if isinstance(expected, dict):
        return got.keys() == expected.keys() and all(values_equal(got[k], expected[k], rel_tol, abs_tol, strict_bool)
                                                     for k in expected)
    return got == expected


def cmath_close(a: complex, b: complex, rel_tol: float, abs_tol: float) -> bool:
    return math.isclose(a.real, b.real, rel_tol=rel_tol, abs_tol=abs_tol) and \
        math.isclose(a.imag, b.imag, rel_tol=rel_tol, abs_tol=abs_tol)


def machine(value: Any, digits: int = 12) -> Any:
    """A JSON-able structure with every finite float rounded to `digits` significant digits, for what vevo
    writes for machines (`check --json`, `eval-program --json`, `vevo export`): 0.1 + 0.2 is written 0.3, not
    0.30000000000000004, and -0.0 (an OpenEvolve "lower is better" metric of 0, negated) is written 0.0; the
    archive keeps the exact values."""
    t = type(value)
    if t is float:
        return float(f"{value:.{digits}g}") + 0.0 if math.isfinite(value) else value
    if t is list or t is tuple:
        return [machine(v, digits) for v in value]
    if t is dict:
        return {k: machine(v, digits) for k, v in value.items()}
    return value
