"""Turning what users pass (numpy arrays, torch tensors, lists) into arrays the core reads."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import DTypeError, ShapeError

__all__ = ["as_matrix", "as_pairs", "is_torch_tensor"]


def is_torch_tensor(x: object) -> bool:
    """True for a torch.Tensor, without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _from_torch(x: Any) -> np.ndarray:
    import torch  # already loaded: x is a tensor

    t = x.detach()
    if not t.is_floating_point():
        t = t.double()  # integers and bools widen exactly to float64
    elif t.dtype == torch.bfloat16:
        t = t.float()  # numpy has no bfloat16; it widens exactly to float32
    return np.asarray(t.cpu().numpy())


def as_matrix(x: Any, name: str) -> npt.NDArray[np.floating[Any]]:
    """A 2-D float16, float32 or float64 array with non-negative strides, copying only when
    needed. Integers and bools widen exactly to float64.
    """
    arr = _from_torch(x) if is_torch_tensor(x) else np.asarray(x)
    if arr.ndim != 2:
        raise ShapeError(
            f"{name} must be 2-D (inputs x columns); got shape {arr.shape}"
            + ("; use x[:, None] for a single column" if arr.ndim == 1 else "")
        )
    if arr.dtype.byteorder not in "=|":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype.kind in "biu":
        arr = arr.astype(np.float64)
    elif arr.dtype not in (np.float16, np.float32, np.float64):
        raise DTypeError(f"{name} has dtype {arr.dtype}; expected a real floating, integer or bool dtype")
    if any(s < 0 for s in arr.strides) or any(s % arr.itemsize for s in arr.strides):
        arr = np.ascontiguousarray(arr)
    return arr


def as_pairs(pairs: Any) -> npt.NDArray[np.int64]:
    """An (M, 2) int64 array of (unit, concept) indices."""
    arr = _from_torch(pairs) if is_torch_tensor(pairs) else np.asarray(pairs)
    if arr.size == 0:
        arr = arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ShapeError(f"pairs must have shape (M, 2) of (unit, concept); got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise DTypeError(f"pairs must hold integer indices; got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)
