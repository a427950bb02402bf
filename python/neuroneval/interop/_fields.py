"""The checks that the interop readers apply to the values they read from other tools' JSON.

Each accepts exactly the JSON types the peer writes (a JSON integer where it writes an int, a
JSON number where it writes a float, true/false where it writes a bool, a string where it
writes a str) and raises a `SourceError` naming the place (a file, a line, an entry) and the
field otherwise: Python's own conversions (`bool("false")`, `int(3.7)`, `float("2")`) are
never used on what a file holds, so a wrong type is an error, not a silently different value.

Examples
--------
>>> json_int(3, "f.json", "neuron_index")
3
>>> json_int(3.7, "f.json", "neuron_index")
Traceback (most recent call last):
...
neuroneval.errors.SourceError: f.json: neuron_index must be a JSON integer; got 3.7 (float)
>>> json_bool("false", "f.txt, example 0", "activating")
Traceback (most recent call last):
...
neuroneval.errors.SourceError: f.txt, example 0: activating must be true or false; got 'false' (str)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import SourceError
from ..files import parse_json

__all__ = [
    "json_bool",
    "json_float_list",
    "json_int",
    "json_lines",
    "json_number",
    "json_string",
    "json_string_list",
]


def _got(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def json_int(value: Any, where: str, field: str, *, minimum: int | None = None) -> int:
    """A JSON integer (not a bool, not a float however whole), at least `minimum` when given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SourceError(f"{where}: {field} must be a JSON integer; got {_got(value)}")
    if minimum is not None and value < minimum:
        raise SourceError(f"{where}: {field} must be an integer >= {minimum}; got {value}")
    return value


def json_number(value: Any, where: str, field: str, *, null: bool = False, finite: bool = True) -> float | None:
    """A JSON number (an integer or a float, not a bool, not a string) as a float; None for
    null when `null`. NaN and infinity are refused when `finite`."""
    if value is None and null:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        allowed = "a number or null" if null else "a number"
        raise SourceError(f"{where}: {field} must be {allowed}; got {_got(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the float range
        raise SourceError(f"{where}: {field} is {value}, beyond the range of a float") from None
    if finite and not np.isfinite(number):
        raise SourceError(f"{where}: {field} must be finite; got {number}")
    return number


def json_bool(value: Any, where: str, field: str, *, null: bool = False) -> bool | None:
    """JSON true or false (None for null when `null`); never a string or a number."""
    if value is None and null:
        return None
    if not isinstance(value, bool):
        allowed = "true, false or null" if null else "true or false"
        raise SourceError(f"{where}: {field} must be {allowed}; got {_got(value)}")
    return value


def json_string(value: Any, where: str, field: str, *, null: bool = False) -> str | None:
    """A JSON string (None for null when `null`)."""
    if value is None and null:
        return None
    if not isinstance(value, str):
        allowed = "a string or null" if null else "a string"
        raise SourceError(f"{where}: {field} must be {allowed}; got {_got(value)}")
    return value


def json_string_list(value: Any, where: str, field: str) -> list[str]:
    """A JSON list of strings."""
    if not isinstance(value, list):
        raise SourceError(f"{where}: {field} must be a list of strings; got {_got(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise SourceError(f"{where}: {field}[{i}] must be a string; got {_got(item)}")
    return value


def json_float_list(value: Any, where: str, field: str) -> npt.NDArray[np.float64]:
    """A JSON list of finite numbers (integers or floats; no bool, string or null) as float64."""
    if not isinstance(value, list):
        raise SourceError(f"{where}: {field} must be a list of numbers; got {_got(value)}")
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise SourceError(f"{where}: {field}[{i}] must be a number; got {_got(item)}")
    try:
        arr = np.array(value, dtype=np.float64)
    except OverflowError:
        raise SourceError(f"{where}: {field} holds an integer beyond the range of a float") from None
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SourceError(f"{where}: {field}[{i}] is {arr[i]}; the values must be finite")
    return arr


def json_lines(data: bytes, path: Path) -> Iterator[tuple[str, Any]]:
    """(where, value) of each non-blank line of a JSON-lines file, `where` naming the line."""
    for number, line in enumerate(data.split(b"\n"), 1):
        if line.strip():
            where = f"{path}, line {number}"
            yield where, parse_json(line, where)
