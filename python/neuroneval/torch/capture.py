"""`capture`: a few layers' activations in memory, one row per input."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch

from neuroneval.errors import EmptyInputError, ParameterError, ShapeError
from neuroneval.options import Option, Options

from .hooks import _no_such_modules, _units

Reduce = Literal["mean", "max"]
_REDUCTIONS = ("mean", "max")
#: The option of `capture`: inputs per forward pass.
CAPTURE_OPTIONS = Options(Option("batch_size", "integer", 256, "inputs per forward pass", low=1))


def capture(
    model: torch.nn.Module,
    inputs: torch.Tensor | npt.ArrayLike,
    layers: str | Sequence[str],
    *,
    batch_size: int | None = None,
    reduce: Reduce = "mean",
) -> dict[str, npt.NDArray[np.float32]]:
    """Run `model` over `inputs` and return the outputs of the named modules, one column per unit.

    The model runs in eval mode under `torch.inference_mode()`, `batch_size` inputs at a time,
    on the device of its first parameter (or buffer; else where `inputs` lie). Its training
    flag is restored and every hook removed afterwards, also when something fails.

    Parameters
    ----------
    model : torch.nn.Module
        The network; it is called as ``model(batch)``.
    inputs : torch.Tensor or array_like, shape (N, ...)
        The probing inputs, first dimension over inputs. Arrays are read with
        `torch.as_tensor`.
    layers : str or sequence of str
        Names of modules as ``model.named_modules()`` spells them (``"layer4.1.conv2"``;
        ``""`` is the model itself). Each must run exactly once per forward pass and return
        one tensor. Repeated names are kept once.
    batch_size : int, optional
        Inputs per forward pass; default: see `CAPTURE_OPTIONS`.
    reduce : {"mean", "max"}
        How a feature map of shape (N, C, H, W) (or more spatial dimensions) becomes one
        value per channel: its mean or its max over space. Outputs of any other shape are
        flattened to (N, units).

    Returns
    -------
    dict of str to numpy.ndarray
        For each layer, in the order asked, a C-contiguous float32 array of shape (N, units).

    Raises
    ------
    ParameterError
        An unknown layer name, `reduce` or `batch_size`, or a layer that did not run exactly
        once per forward pass.
    ShapeError
        `inputs` has no input dimension, or a layer returned something other than a tensor.
    EmptyInputError
        No inputs, or no layers.

    Examples
    --------
    >>> import torch
    >>> from neuroneval.torch import capture
    >>> model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1, bias=False), torch.nn.Flatten())
    >>> with torch.no_grad():
    ...     _ = model[0].weight.copy_(torch.tensor([1.0, -1.0]).reshape(2, 1, 1, 1))
    >>> x = torch.arange(1.0, 9.0).reshape(2, 1, 2, 2)
    >>> capture(model, x, "0")["0"]
    array([[ 2.5, -2.5],
           [ 6.5, -6.5]], dtype=float32)
    >>> capture(model, x, "0", reduce="max")["0"]
    array([[ 4., -1.],
           [ 8., -5.]], dtype=float32)
    >>> capture(model, x, "1")["1"].shape
    (2, 8)
    """
    names = _layer_names(layers)
    if reduce not in _REDUCTIONS:
        raise ParameterError(f"reduce must be one of {', '.join(map(repr, _REDUCTIONS))}; got {reduce!r}")
    batch: int = CAPTURE_OPTIONS.resolve(batch_size=batch_size)["batch_size"]
    modules = dict(model.named_modules())
    missing = [n for n in names if n not in modules]
    if missing:
        raise _no_such_modules(missing, modules)
    x = inputs if isinstance(inputs, torch.Tensor) else torch.as_tensor(inputs)
    if x.ndim == 0:
        raise ShapeError("inputs must have a first dimension over inputs; got a scalar")
    n = int(x.shape[0])
    if n == 0:
        raise EmptyInputError("inputs hold no inputs (first dimension is 0)")
    device = _device(model, x)

    # Reduced (and copied) inside the hook: a later in-place operation of the same forward pass
    # (ReLU(inplace=True)) cannot change what was captured.
    seen: dict[str, list[npt.NDArray[np.float32]]] = {name: [] for name in names}
    chunks: dict[str, list[npt.NDArray[np.float32]]] = {name: [] for name in names}

    def hook_for(name: str) -> Any:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            if not isinstance(output, torch.Tensor):
                raise ShapeError(
                    f"layer {name!r} returned {type(output).__name__}, not a tensor; capture a submodule "
                    "that returns a single tensor"
                )
            seen[name].append(_units(output, reduce))

        return hook

    was_training = model.training
    handles = []
    try:
        for name in names:
            handles.append(modules[name].register_forward_hook(hook_for(name)))
        model.eval()
        with torch.inference_mode():
            for start in range(0, n, batch):
                model(x[start : start + batch].to(device))
                for name in names:
                    outs = seen[name]
                    if len(outs) != 1:
                        raise ParameterError(
                            f"layer {name!r} ran {len(outs)} times in one forward pass; capture needs exactly once"
                        )
                    chunks[name].append(outs[0])
                    outs.clear()
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return {name: np.ascontiguousarray(np.concatenate(chunks[name], axis=0)) for name in names}


def _layer_names(layers: str | Sequence[str]) -> list[str]:
    names = [layers] if isinstance(layers, str) else list(layers)
    if not names:
        raise EmptyInputError("no layer was requested")
    for name in names:
        if not isinstance(name, str):
            raise ParameterError(f"layer names must be strings; got {name!r}")
    return list(dict.fromkeys(names))


def _device(model: torch.nn.Module, x: torch.Tensor) -> torch.device:
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return tensor.device
    return x.device
