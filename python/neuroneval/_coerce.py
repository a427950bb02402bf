"""Turning what users pass (numpy arrays, torch tensors, lists, scalars) into what the library
reads, by type: the one home of the rules that integers are integers (no float is truncated,
no bool counts as a number), that values are real (complex is refused, never cut to its real
part) and that arrays are rectangular."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import DTypeError, ParameterError, ShapeError

__all__ = ["as_index_array", "as_matrix", "as_pairs", "as_real_array", "check_integer", "check_real", "is_torch_tensor"]

_FLOATS = (np.float16, np.float32, np.float64)


def is_torch_tensor(x: object) -> bool:
    """True for a torch.Tensor, without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _from_torch(x: Any, name: str) -> np.ndarray:
    import torch  # already loaded: x is a tensor

    t = x.detach()
    if t.is_complex():
        raise DTypeError(f"{name} has dtype {t.dtype}; complex values are not accepted (pass .real or .abs())")
    if not t.is_floating_point():
        t = t.double()  # integers and bools widen exactly to float64
    elif t.dtype == torch.bfloat16:
        t = t.float()  # numpy has no bfloat16; it widens exactly to float32
    elif t.dtype not in (torch.float16, torch.float32, torch.float64):
        # float8 and other narrow formats numpy cannot hold: they widen exactly to float32
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
    arr = np.asarray(pairs.detach().cpu().numpy()) if is_torch_tensor(pairs) else _as_array(pairs, "pairs")
    if arr.size == 0:
        arr = arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ShapeError(f"pairs must have shape (M, 2) of (unit, concept); got shape {arr.shape}")
    return as_index_array(arr, "pairs")


def as_index_array(arr: np.ndarray, name: str) -> npt.NDArray[np.int64]:
    """An integer array as int64. Floats are accepted only when every value is whole (never
    truncated); bools, complex and strings are refused, and so are values beyond int64 (a
    uint64 of 2^64 - 1 is not silently -1)."""
    if arr.dtype.kind == "f":
        whole = np.isfinite(arr) & (arr == np.round(arr)) & (np.abs(arr) < 2.0**63)
        if not whole.all():
            bad = arr.reshape(-1)[np.flatnonzero(~whole.reshape(-1))[0]]
            raise DTypeError(f"{name} must hold integer indices; found {bad}")
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise DTypeError(f"{name} must hold integer indices; got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ShapeError(f"{name} holds the index {int(arr.max())}, beyond any matrix")
    return np.ascontiguousarray(arr, dtype=np.int64)
