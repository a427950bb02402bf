"""What happens around a forward pass: the modules to hook, the batch as the model is called
with it, and the forward hooks that reduce a layer's output to rows (feature maps by their
spatial mean or max or per position, sequences by their mean or max over the non-padding
tokens or per token, anything else flattened)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from neuroneval.errors import EmptyInputError, ParameterError, ShapeError

# --- modules -----------------------------------------------------------------------------------------


def _resolve_layers(model: torch.nn.Module, layers: Any) -> list[str]:
    modules = dict(model.named_modules())
    by_id = {id(m): n for n, m in modules.items()}
    items = [layers] if isinstance(layers, (str, torch.nn.Module)) else list(layers)
    if not items:
        raise EmptyInputError("no layer was requested")
    names = [_layer_name(item, modules, by_id) for item in items]
    return list(dict.fromkeys(names))


def _layer_name(item: Any, modules: dict[str, torch.nn.Module], by_id: dict[int, str]) -> str:
    if isinstance(item, torch.nn.Module):
        if id(item) not in by_id:
            raise ParameterError(f"the module {type(item).__name__} given as a layer is not part of the model")
        return by_id[id(item)]
    if not isinstance(item, str):
        raise ParameterError(f"layers must be module names or modules; got {item!r}")
    if item not in modules:
        raise _no_such_modules([item], modules)
    return item


def _no_such_modules(missing: list[str], modules: dict[str, torch.nn.Module]) -> ParameterError:
    """The error for layer names the model lacks, listing (the first 20 of) its modules."""
    known = [n for n in modules if n]
    shown = ", ".join(map(repr, known[:20])) + (f", ... ({len(known)} in all)" if len(known) > 20 else "")
    return ParameterError(f"model has no module named {', '.join(map(repr, missing))}; its modules are: {shown}")


# --- batches -----------------------------------------------------------------------------------------


@dataclass
class _Call:
    """One batch as the model is called with it."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    n: int
    mask: torch.Tensor | None  # the attention mask (N, L), where the batch had one


def _as_call(batch: Any, index: int, device: torch.device) -> _Call:
    if isinstance(batch, (tuple, list)):
        if not batch:
            raise ShapeError(f"batch {index} is an empty {type(batch).__name__}; its first element must be the input")
        batch = batch[0]
    if isinstance(batch, np.ndarray):
        batch = torch.as_tensor(batch)
    if isinstance(batch, torch.Tensor):
        if batch.ndim == 0:
            raise ShapeError(f"batch {index} is a scalar; expected a first dimension over inputs")
        return _Call((batch.to(device, non_blocking=True),), {}, int(batch.shape[0]), None)
    if isinstance(batch, Mapping):
        tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor) and v.ndim >= 1}
        if not tensors:
            raise ShapeError(f"batch {index} is a dict without tensors (keys {list(batch)})")
        first = tensors.get("input_ids", next(iter(tensors.values())))
        n = int(first.shape[0])
        bad = {k: tuple(v.shape) for k, v in tensors.items() if v.shape[0] != n}
        if bad:
            raise ShapeError(f"batch {index}: the dict's tensors disagree on the number of inputs ({n} vs {bad})")
        mask = batch.get("attention_mask")
        if mask is not None and (not isinstance(mask, torch.Tensor) or mask.ndim != 2):
            raise ShapeError(f"batch {index}: attention_mask must be an (inputs, tokens) tensor")
        kwargs = {k: (v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
        return _Call((), kwargs, n, mask)
    raise ShapeError(
        f"batch {index} is a {type(batch).__name__}; a batch must be a tensor, a tuple or list whose first "
        "element is the input, or a dict of tensors"
    )


def _raw_size(batch: Any, index: int) -> int:
    """The number of inputs of a raw batch, without moving it anywhere."""
    if isinstance(batch, (tuple, list)) and batch:
        batch = batch[0]
    if isinstance(batch, (torch.Tensor, np.ndarray)) and batch.ndim >= 1:
        return int(batch.shape[0])
    if isinstance(batch, Mapping):
        tensors = [v for v in batch.values() if isinstance(v, torch.Tensor) and v.ndim >= 1]
        first = batch.get("input_ids", tensors[0] if tensors else None)
        if isinstance(first, torch.Tensor) and first.ndim >= 1:
            return int(first.shape[0])
    return int(_as_call(batch, index, torch.device("cpu")).n)  # raises the right error


# --- hooks and reductions ----------------------------------------------------------------------------


def _units(output: torch.Tensor, reduce: str) -> npt.NDArray[np.float32]:
    """(batch, units) float32 on the CPU: spatial mean/max of feature maps, else flattened."""
    out = output.detach().float()
    if out.ndim == 0:
        raise ShapeError("a captured layer returned a scalar; expected a first dimension over inputs")
    if out.ndim >= 4:
        spatial = tuple(range(2, out.ndim))
        out = out.mean(dim=spatial) if reduce == "mean" else out.amax(dim=spatial)
    out = out.reshape(out.shape[0], -1)
    return np.array(out.cpu().numpy(), dtype=np.float32)  # a copy, never a view of the layer's output


def _kind(name: str, requested: str, shape: tuple[int, ...]) -> str:
    ndim = len(shape)
    fits = {1: ("mean", "max"), 2: ("mean", "max"), 3: ("mean", "max", "tokens"), 4: ("mean", "max", "spatial")}
    allowed = fits.get(ndim, ("mean", "max"))
    if requested not in allowed:
        what = {3: "a sequence (N, L, D)", 4: "a feature map (N, C, H, W)"}.get(ndim, f"a {ndim}-D tensor")
        need = {"tokens": "a sequence output (N, L, D)", "spatial": "a feature map (N, C, H, W)"}[requested]
        raise ShapeError(
            f"reduce={requested!r} does not fit layer {name!r}: it returned {what} of shape {shape}; "
            f"{requested!r} needs {need} (this output takes {', '.join(map(repr, allowed))})"
        )
    if ndim <= 2:
        return "flat"
    if ndim == 3:
        return {"mean": "seq-mean", "max": "seq-max"}.get(requested, requested)
    return {"mean": "map-mean", "max": "map-max"}.get(requested, requested)


def _first_tensor(name: str, output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "to_tuple"):  # a Hugging Face ModelOutput
        output = output.to_tuple()
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise ShapeError(
        f"layer {name!r} returned {type(output).__name__}, not a tensor (nor a tuple whose first element is one); "
        "extract a submodule that returns a tensor"
    )


class _LayerRun:
    """A layer's forward hook: reduces its output on the device as soon as the module runs."""

    def __init__(self, name: str, requested: str, sae: Any, store_dtype: torch.dtype) -> None:
        self.name, self.requested, self.sae, self.store_dtype = name, requested, sae, store_dtype
        self.kind: str | None = None
        self.units: int | None = None  # of the reduced output (before the SAE)
        self.calls = 0
        self.result: torch.Tensor | None = None
        self.meta: Any = None  # (H, W) for spatial rows, L for tokens without a mask
        self.zeros: torch.Tensor | None = None
        self.decide = False  # count the zeros of the result (the first batch decides the layout)
        self.call: _Call | None = None
        self.mask: torch.Tensor | None = None  # the batch's mask on the device, as bool

    def start(self, call: _Call, mask: torch.Tensor | None) -> None:
        self.calls, self.result, self.meta, self.zeros, self.call, self.mask = 0, None, None, None, call, mask

    def hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self.calls += 1
        if self.calls > 1:
            return
        assert self.call is not None
        t = _first_tensor(self.name, output).detach()
        shape = tuple(int(s) for s in t.shape)
        if t.ndim == 0 or shape[0] != self.call.n:
            raise ShapeError(
                f"layer {self.name!r} returned shape {shape} for a batch of {self.call.n} inputs; "
                "its first dimension must be the batch's"
            )
        kind = _kind(self.name, self.requested, shape)
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind:
            raise ShapeError(
                f"layer {self.name!r} returned shape {shape}, reduced as {kind!r}, but the store's rows are "
                f"{self.kind!r}: batches must agree"
            )
        units = int(np.prod(shape[1:], dtype=np.int64)) if kind == "flat" else shape[-1] if t.ndim == 3 else shape[1]
        if self.units is None:
            self.units = units
        elif units != self.units:
            raise ShapeError(
                f"layer {self.name!r} has {units} units in this batch (output shape {shape}) but {self.units} "
                "in the first one: batches must agree"
            )
        r = self.reduce(t, kind, shape)
        if self.sae is not None:
            encoded = self.sae(r)
            if not isinstance(encoded, torch.Tensor) or encoded.ndim != 2 or encoded.shape[0] != r.shape[0]:
                got = tuple(encoded.shape) if isinstance(encoded, torch.Tensor) else type(encoded).__name__
                raise ShapeError(
                    f"the sae of layer {self.name!r} returned {got} for input rows of shape {tuple(r.shape)}; "
                    "it must return a (rows, latents) tensor"
                )
            r = encoded
        r = r.to(self.store_dtype)
        if r.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
            # A view of the output: a later in-place operation of this forward pass (ReLU(inplace=True))
            # would change it before it is copied to the host.
            r = r.clone()
        if self.sae is not None and self.decide:
            self.zeros = (r == 0).sum()
        self.result = r

    def reduce(self, t: torch.Tensor, kind: str, shape: tuple[int, ...]) -> torch.Tensor:
        n = shape[0]
        if kind == "flat":
            return t.reshape(n, -1).float()
        if kind in ("map-mean", "map-max"):
            spatial = tuple(range(2, t.ndim))
            h = t.float()
            return h.mean(dim=spatial) if kind == "map-mean" else h.amax(dim=spatial)
        if kind == "spatial":
            self.meta = (shape[2], shape[3])
            return t.permute(0, 2, 3, 1).reshape(-1, shape[1]).float()
        # sequences (N, L, D)
        mask = self.mask
        if mask is not None and tuple(mask.shape) != shape[:2]:
            raise ShapeError(
                f"layer {self.name!r} returned a sequence of shape {shape} but the batch's attention_mask has "
                f"shape {tuple(mask.shape)}; they must agree on (inputs, tokens)"
            )
        h = t.float()
        if kind == "tokens":
            if mask is None:
                self.meta = shape[1]
                return h.reshape(-1, shape[2])
            return h[mask]
        if mask is None:
            return h.mean(dim=1) if kind == "seq-mean" else h.amax(dim=1)
        m = mask.unsqueeze(-1)
        if kind == "seq-mean":
            mf = m.to(h.dtype)
            return (h * mf).sum(dim=1) / mf.sum(dim=1).clamp(min=1.0)
        top = h.masked_fill(~m, -math.inf).amax(dim=1)
        return torch.where(m.any(dim=1), top, torch.zeros((), dtype=h.dtype, device=h.device))
