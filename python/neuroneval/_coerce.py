"""Turning what users pass (numpy arrays, torch tensors, lists, scalars) into what the library
reads, by type: the one home of the rules that integers are integers (no float is truncated,
no bool counts as a number), that values are real (complex is refused, never cut to its real
part) and that arrays are rectangular."""

from __future__ import annotations

import numbers
import os
import reprlib
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from . import _core
from .errors import (
    ConceptRangeError,
    DTypeError,
    EmptyInputError,
    InvalidInputError,
    LabelError,
    NonFiniteError,
    PairIndexError,
    ParameterError,
    ShapeError,
)
from .params import ScoreParams

__all__ = [
    "as_counts",
    "as_index_array",
    "as_matrix",
    "as_pairs",
    "as_probabilities",
    "as_real_array",
    "as_reals",
    "as_table",
    "as_vector",
    "check_between",
    "check_columns",
    "check_flag",
    "check_integer",
    "check_names",
    "check_pairs",
    "check_parameter",
    "check_path",
    "check_real",
    "check_seed",
    "check_sequence",
    "is_torch_tensor",
]

_FLOATS = (np.float16, np.float32, np.float64)


def is_torch_tensor(x: object) -> bool:
    """True for a torch.Tensor, without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _from_torch(x: Any, name: str) -> np.ndarray:
    import torch  # already loaded: x is a tensor

    t = x.detach()
    if t.is_complex():
        raise DTypeError(f"{name} has dtype {t.dtype}; complex values are not accepted (pass .real or .abs())")
    # Integers and bools keep their dtype (indices stay indices; `_real` widens values).
    # bfloat16, float8 and the other floats numpy cannot hold widen exactly to float32.
    if t.is_floating_point() and t.dtype not in (torch.float16, torch.float32, torch.float64):
        t = t.float()
    return np.asarray(t.cpu().numpy())


def _as_array(x: Any, name: str) -> np.ndarray:
    """`x` as a numpy array (a view where possible): tensors converted, ragged sequences refused."""
    if is_torch_tensor(x):
        return _from_torch(x, name)
    try:
        arr = np.asarray(x)
    except ValueError as e:  # numpy's "inhomogeneous shape" for ragged nested lists
        raise ShapeError(f"{name} is not a rectangular array (rows of different lengths?): {e}") from e
    except TypeError as e:
        raise DTypeError(f"{name} cannot be read as an array of numbers: {e}") from e
    return arr


def _real(arr: np.ndarray, name: str) -> np.ndarray:
    """`arr` in native byte order, integers and bools widened exactly to float64; a
    `DTypeError` for complex, strings, objects and dates."""
    if arr.dtype.byteorder not in "=|":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype.kind in "biu":
        return arr.astype(np.float64)
    if arr.dtype.type not in _FLOATS:
        what = (
            "complex values are not accepted"
            if arr.dtype.kind == "c"
            else "expected a real floating, integer or bool dtype"
        )
        raise DTypeError(f"{name} has dtype {arr.dtype}; {what}")
    return arr


def as_matrix(x: Any, name: str) -> npt.NDArray[np.floating[Any]]:
    """A 2-D float16, float32 or float64 array with non-negative strides, copying only when
    needed. Integers and bools widen exactly to float64.

    Examples
    --------
    >>> as_matrix([[1, 2]], "activations").dtype
    dtype('float64')
    >>> as_matrix(np.ones((2, 1), np.complex64), "activations")
    Traceback (most recent call last):
    ...
    neuroneval.errors.DTypeError: activations has dtype complex64; complex values are not accepted
    """
    arr = _as_array(x, name)
    if arr.ndim != 2:
        raise ShapeError(
            f"{name} must be 2-D (inputs x columns); got shape {arr.shape}"
            + ("; use x[:, None] for a single column" if arr.ndim == 1 else "")
        )
    arr = _real(arr, name)
    if any(s < 0 for s in arr.strides) or any(s % arr.itemsize for s in arr.strides):
        arr = np.ascontiguousarray(arr)
    return arr


def as_real_array(x: Any, name: str, *, ndim: int | tuple[int, ...] | None = None) -> npt.NDArray[np.float64]:
    """`x` (a sequence, array or tensor of real numbers) as a float64 array, of `ndim`
    dimensions when given.

    Examples
    --------
    >>> as_real_array([1, 0.5], "scores", ndim=1)
    array([1. , 0.5])
    >>> as_real_array(["a"], "scores")
    Traceback (most recent call last):
    ...
    neuroneval.errors.DTypeError: scores has dtype <U1; expected a real floating, integer or bool dtype
    """
    arr = _as_array(x, name)
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if dims is not None and arr.ndim not in dims:
        wanted = " or ".join(f"{d}-D" for d in dims)
        raise ShapeError(f"{name} must be {wanted}; got shape {arr.shape}")
    return np.asarray(_real(arr, name), dtype=np.float64)


def check_integer(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """`value` as a Python int: a Python or numpy integer (not a bool, not a float, however
    whole), within [minimum, maximum] when given; else a `ParameterError` naming it.

    Examples
    --------
    >>> check_integer(np.int32(3), "budget", minimum=1)
    3
    >>> check_integer(True, "budget")
    Traceback (most recent call last):
    ...
    neuroneval.errors.ParameterError: budget must be an integer; got True (a bool)
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        kind = "a bool" if isinstance(value, (bool, np.bool_)) else type(value).__name__
        raise ParameterError(f"{name} must be an integer; got {value!r} ({kind})")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ParameterError(f"{name} must be an integer >= {minimum}; got {v}")
    if maximum is not None and v > maximum:
        raise ParameterError(f"{name} must be an integer <= {maximum}; got {v}")
    return v


def check_real(value: Any, name: str, *, finite: bool = True) -> float:
    """`value` as a Python float: a Python or numpy real number (not a bool, not complex,
    not a string), finite unless `finite=False`; else a `ParameterError` naming it.

    Examples
    --------
    >>> check_real(np.float32(0.5), "eta")
    0.5
    >>> check_real(1j, "eta")
    Traceback (most recent call last):
    ...
    neuroneval.errors.ParameterError: eta must be a real number; got 1j (complex)
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        kind = "a bool" if isinstance(value, (bool, np.bool_)) else type(value).__name__
        raise ParameterError(f"{name} must be a real number; got {value!r} ({kind})")
    v = float(value)
    if finite and not np.isfinite(v):
        raise ParameterError(f"{name} must be finite; got {v}")
    return v


def as_pairs(pairs: Any) -> npt.NDArray[np.int64]:
    """An (M, 2) int64 array of (unit, concept) indices: integer dtypes only (a float index
    is refused, not truncated), every index within int64."""
    arr = _as_array(pairs, "pairs")
    if arr.size == 0:
        arr = arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ShapeError(f"pairs must have shape (M, 2) of (unit, concept); got shape {arr.shape}")
    return as_index_array(arr, "pairs", PairIndexError)


def as_index_array(arr: np.ndarray, name: str, beyond: type[InvalidInputError] = ShapeError) -> npt.NDArray[np.int64]:
    """An integer array as int64. Floats are accepted only when every value is whole (never
    truncated); bools, complex and strings are refused. A value beyond int64 (a uint64 of
    2^64 - 1 is not silently -1) is an index outside any matrix: the error `beyond`
    (`PairIndexError` for pairs)."""
    limit = np.iinfo(np.int64).max
    if arr.dtype.kind == "f":
        arr = arr.astype(np.float64, copy=False)  # exact; 2^63 has no float16
        whole = np.isfinite(arr) & (arr == np.round(arr))
        if not whole.all():
            bad = arr.reshape(-1)[np.flatnonzero(~whole.reshape(-1))[0]]
            raise DTypeError(f"{name} must hold integer indices; found {bad}")
        if arr.size and np.abs(arr).max() >= 2.0**63:
            raise beyond(f"{name} holds the index {arr.reshape(-1)[np.abs(arr).argmax()]:.0f}, beyond any matrix")
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise DTypeError(f"{name} must hold integer indices; got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) > limit:
        raise beyond(f"{name} holds the index {int(arr.max())}, beyond any matrix")
    return np.ascontiguousarray(arr, dtype=np.int64)


# --------------------------------------------------------------------------- arguments of meta, sanity, crowd


def check_seed(seed: Any) -> int:
    """The one seed rule (`ScoreParams`: an integer in [0, 2^64), not a bool or a float), and
    no None: unlike the scoring functions, these draws have no default stream to fall back on."""
    if seed is None:
        raise ParameterError("seed must be an integer in [0, 2^64); got None")
    return int(ScoreParams(seed=seed).seed)


def check_flag(value: Any, name: str) -> bool:
    """A yes/no option: True or False (a string such as "no" is not read as true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name} must be True or False; got {value!r}")
    return bool(value)


def check_between(value: Any, name: str, low: float, high: float, *, closed: str = "neither") -> float:
    """A finite real number (`check_real`) in the interval from `low` to `high`, whose ends are
    included as `closed` says: "neither", "left", "right" or "both"."""
    v = check_real(value, name)
    left, right = closed in ("left", "both"), closed in ("right", "both")
    if not ((low < v or (left and v == low)) and (v < high or (right and v == high))):
        interval = f"{'[' if left else '('}{low:g}, {high:g}{']' if right else ')'}"
        raise ParameterError(f"{name} must lie in {interval}; got {value!r}")
    return v


def check_sequence(values: Any, name: str) -> list[Any]:
    """The items of a sequence (a list, a tuple, a 1-D array; not a str, not a number)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ParameterError(f"{name} must be a sequence; got {reprlib.repr(values)}")
    try:
        return list(values)
    except TypeError as e:  # a 0-d array or tensor claims to be iterable
        raise ParameterError(f"{name} must be a sequence; got {reprlib.repr(values)}") from e


def check_names(names: Any, count: int, name: str) -> list[str] | None:
    """Optional names of `count` columns: the one check of unit and concept names given as a
    sequence. Each entry is a str or an integer (written as text); anything else (a float,
    None, a bool, a nested list) is refused rather than turned into text.

    >>> check_names(["dog", 7], 2, "concept_names")
    ['dog', '7']
    """
    if names is None:
        return None
    listed = check_sequence(names, name)
    for i, v in enumerate(listed):
        if not isinstance(v, (str, np.str_, int, np.integer)) or isinstance(v, (bool, np.bool_)):
            raise ParameterError(f"{name} entry {i} is {reprlib.repr(v)}; names must be strings")
    if len(listed) != count:
        raise ShapeError(f"{name} has {len(listed)} entries for {count} columns")
    return [str(v) for v in listed]


def check_path(path: Any) -> Any:
    """A file path: a str or an os.PathLike."""
    if not isinstance(path, (str, os.PathLike)):
        raise ParameterError(f"path must be a file path (a str or os.PathLike); got {path!r}")
    return path


def as_table(x: Any, name: str, columns: str) -> pl.DataFrame:
    """A polars table, from itself or anything `polars.DataFrame` takes."""
    if isinstance(x, pl.DataFrame):
        return x
    if x is None or isinstance(x, (str, bytes, numbers.Number)):
        raise ShapeError(f"{name} must be a table with columns {columns}; got {x!r}")
    try:
        return pl.DataFrame(x)
    except Exception as e:  # noqa: BLE001 - anything that is not a table
        raise ShapeError(f"{name} must be a table with columns {columns}; {e}") from e


def check_columns(table: pl.DataFrame, name: str, kinds: dict[str, str]) -> pl.DataFrame:
    """`table` (`name`, plural) with every column of `kinds`, each of its kind ("id": integers
    within int64, returned as Int64; "number": numeric; "text": strings; "any") and none with
    a missing value: a `ShapeError` for a missing column, a `LabelError` for a wrong value."""
    missing = sorted(set(kinds) - set(table.columns))
    if missing:
        raise ShapeError(f"{name} lack the column(s) {missing}; expected {', '.join(kinds)}")
    for column, kind in kinds.items():
        series, dtype = table[column], table[column].dtype
        if series.null_count():
            raise LabelError(f"{name} have {series.null_count()} missing value(s) in column {column!r}")
        ok = {"id": dtype.is_integer(), "number": dtype.is_numeric(), "text": dtype == pl.String}.get(kind, True)
        if not ok:
            what = {"id": "integer ids", "number": "numbers", "text": "text"}[kind]
            raise LabelError(f"{name} column {column!r} must hold {what}; got {dtype}")
        largest = int(series.max()) if dtype == pl.UInt64 else 0  # type: ignore[arg-type]
        if largest > np.iinfo(np.int64).max:
            raise LabelError(f"{name} column {column!r} holds {largest}, beyond int64")
    return table.with_columns(pl.col(c).cast(pl.Int64) for c, kind in kinds.items() if kind == "id")


def as_vector(x: Any, name: str, n: int | None = None) -> npt.NDArray[np.float64]:
    """One finite real value per input (of `n` inputs when given), as float64."""
    v = as_real_array(x, name)
    if v.ndim != 1:
        raise ShapeError(f"{name} must be 1-D (one value per input); got shape {v.shape}")
    if v.size == 0:
        raise EmptyInputError(f"{name} is empty")
    if n is not None and v.size != n:
        raise ShapeError(f"{name} has {v.size} inputs; expected {n}")
    bad = np.flatnonzero(~np.isfinite(v))
    if bad.size:
        raise NonFiniteError(f"{name} holds a non-finite value at input {bad[0]}")
    return v


def as_probabilities(x: Any, name: str, n: int | None = None) -> npt.NDArray[np.float64]:
    """`as_vector`, every value in [0, 1]."""
    v = as_vector(x, name, n)
    bad = np.flatnonzero((v < 0) | (v > 1))
    if bad.size:
        raise ConceptRangeError(f"{name} holds {v[bad[0]]} at input {bad[0]}; probabilities must lie in [0, 1]")
    return v


def check_pairs(pairs: npt.NDArray[np.int64], n_units: int, n_concepts: int) -> None:
    """(unit, concept) index pairs inside n_units x n_concepts: the core's rule and wording."""
    _core.check_pairs(pairs, n_units, n_concepts)


def as_reals(x: Any, name: str) -> npt.NDArray[np.float64]:
    """A real number (not a bool; NaN allowed) or an array of real numbers, as float64."""
    if x is None or isinstance(x, (numbers.Number, np.generic, str, bytes)):
        return np.asarray(check_real(x, name, finite=False))
    return as_real_array(x, name)


def as_counts(x: Any, name: str) -> npt.NDArray[np.float64]:
    """Counts as float64 (exact): a Python or numpy integer or an array of an integer dtype,
    every value >= 0. Bools and floats are refused, however whole: a count of 2.5 is a
    mistake upstream, not a number to round."""
    if x is None or isinstance(x, (numbers.Number, np.generic, str, bytes)):
        return np.asarray(float(check_integer(x, name, minimum=0)))
    raw = _as_array(x, name)
    values = np.asarray(_real(raw, name), dtype=np.float64)  # complex and strings are refused here
    kind = raw.dtype.kind
    if values.size and kind not in "iu":
        raise ParameterError(f"{name} must hold integer counts; got {'bools' if kind == 'b' else f'dtype {raw.dtype}'}")
    negative = values < 0
    if negative.any():
        raise ParameterError(f"{name} must hold counts >= 0; found {values[negative][0]:.0f}")
    return values


def check_parameter(name: str, **value: Any) -> None:
    """`ScoreParams`' rule for one parameter, with the caller's name for it in the message.

    None is refused: `ScoreParams` reads it as "the default", but here it is no value."""
    ((field, v),) = value.items()
    if v is None:
        raise ParameterError(f"{name} must be a number; got None")
    try:
        ScoreParams(**value)
    except ParameterError as e:
        raise ParameterError(str(e) if name == field else f"{name}: {e}") from e
