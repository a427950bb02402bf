"""Activations from a PyTorch model, ready for `neuroneval.score`.

`capture` returns a few layers' activations in memory; `extract` writes any number of them, at
any scale, into shard directories that `neuroneval.evaluate` reads (resumable, with row ids
for tokens and spatial positions, dense or sparse SAE latents).

This is the only module of neuroneval that imports torch; `import neuroneval` never does.

Examples
--------
>>> import torch
>>> from neuroneval.torch import capture
>>> _ = torch.manual_seed(0)
>>> model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
...                             torch.nn.Linear(4 * 8 * 8, 3))
>>> acts = capture(model, torch.randn(10, 1, 8, 8), ["1", "3"], batch_size=4)
>>> {name: a.shape for name, a in acts.items()}
{'1': (10, 4), '3': (10, 3)}
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import queue
import re
import shutil
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch

from ._files import write_atomic
from .errors import EmptyInputError, ParameterError, ResumeError, ShapeError, SourceError
from .sources import MANIFEST as MANIFEST_NAME

__all__ = ["ActivationStore", "StoredLayer", "capture", "extract"]

Reduce = Literal["mean", "max"]
_REDUCTIONS = ("mean", "max")


def capture(
    model: torch.nn.Module,
    inputs: torch.Tensor | npt.ArrayLike,
    layers: str | Sequence[str],
    *,
    batch_size: int = 256,
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
    batch_size : int
        Inputs per forward pass (at least 1).
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
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ParameterError(f"batch_size must be an integer of at least 1; got {batch_size!r}")
    modules = dict(model.named_modules())
    missing = [n for n in names if n not in modules]
    if missing:
        known = [n for n in modules if n]
        shown = ", ".join(map(repr, known[:20])) + (f", ... ({len(known)} in all)" if len(known) > 20 else "")
        raise ParameterError(f"model has no module named {', '.join(map(repr, missing))}; its modules are: {shown}")
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
            for start in range(0, n, int(batch_size)):
                model(x[start : start + int(batch_size)].to(device))
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


# ---------------------------------------------------------------------------------------------------
# extract: activations at scale, into the row-shard store that `neuroneval.evaluate` reads
# ---------------------------------------------------------------------------------------------------

#: The file at the top of an extraction's output directory.
EXTRACT_FILE = "extract.json"
_EXTRACT_FORMAT = "neuroneval-extract"
#: A layer directory's manifest while the run is unfinished (complete shards only).
_PARTIAL = "manifest.partial.json"
#: A layer's row-id table in the finished store.
ROWS_FILE = "rows.npy"
#: Default size of one shard: as many rows as fit in 64 MiB (values in the stored dtype and row ids).
SHARD_BYTES = 64 << 20
#: An SAE output whose first computed batch has more than this share of zeros is stored sparse.
SPARSE_ZEROS = 0.9
_QUEUE_BATCHES = 2
_EXTRACT_REDUCTIONS = ("mean", "max", "spatial", "tokens")
_STORE_DTYPES: dict[str, torch.dtype] = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}
_FIELDS = {"tokens": ("document", "position"), "spatial": ("input", "y", "x")}
_LABELS = {"flat": "none", "map-mean": "mean", "map-max": "max", "seq-mean": "mean", "seq-max": "max"}


class StoredLayer:
    """One layer of an `ActivationStore`: a shard directory that `neuroneval.evaluate` reads.

    Attributes
    ----------
    name : str
        The module name (``"layer4.1.conv2"``; ``""`` is the model itself).
    path : pathlib.Path
        The layer's shard directory (pass it, or `source`, to `neuroneval.evaluate`).
    reduce : str
        ``"none"`` (a 2-D output), ``"mean"``, ``"max"``, ``"spatial"`` or ``"tokens"``.
    fields : tuple of str
        The columns of `rows`: ``("input",)``, ``("document", "position")`` or ``("input", "y", "x")``.
    layout : str
        ``"dense"`` (``.npy`` shards) or ``"triplets"`` (sparse ``.npz`` shards).
    n_rows, n_units : int
        The shape of the stored matrix.
    dtype : str
        The stored dtype.
    """

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.name: str = manifest["layer"]
        self.reduce: str = manifest["reduce"]
        self.fields: tuple[str, ...] = tuple(manifest["row_fields"])
        self.layout: str = manifest["layout"]
        self.n_rows: int = int(manifest["n_rows"])
        self.n_units: int = int(manifest["n_columns"])
        self.dtype: str = manifest["dtype"]
        self.unit_names: list[str] = list(manifest["names"])
        self._source: Any = None

    @property
    def source(self) -> Any:
        """The layer's `neuroneval.sources.Source` (opened once, memory-mapped)."""
        if self._source is None:
            from .sources import open_activations

            self._source = open_activations(self.path)
        return self._source

    @property
    def rows(self) -> npt.NDArray[Any]:
        """The row-id table: a structured int64 array (memory-mapped) with one field per entry
        of `fields`; row i of the matrix belongs to ``rows[i]``."""
        table: npt.NDArray[Any] = np.load(self.path / ROWS_FILE, mmap_mode="r")
        return table

    def __repr__(self) -> str:
        return (
            f"StoredLayer({self.name!r}, reduce={self.reduce!r}, rows={self.n_rows}, units={self.n_units}, "
            f"layout={self.layout!r}, dtype={self.dtype!r})"
        )


class ActivationStore:
    """A finished extraction: one shard directory per layer plus ``extract.json``.

    ``store.layers`` maps each layer name (in the order asked) to its `StoredLayer`;
    ``store[name]`` is the same. ``store.info`` is the content of ``extract.json``.

    Examples
    --------
    >>> import tempfile, torch
    >>> from neuroneval.torch import ActivationStore, extract
    >>> _ = torch.manual_seed(0)
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    >>> out = tempfile.mkdtemp()
    >>> _ = extract(model, torch.randn(10, 4), ["0"], out, batch_size=4, progress=False)
    >>> store = ActivationStore.open(out)
    >>> store["0"].n_rows, store["0"].unit_names[:2], store["0"].rows["input"][:3].tolist()
    (10, ['0[0]', '0[1]'], [0, 1, 2])
    """

    def __init__(self, path: Path, info: dict[str, Any], layers: dict[str, StoredLayer]) -> None:
        self.path = path
        self.info = info
        self.layers = layers

    @property
    def n_inputs(self) -> int:
        """The number of inputs the data held."""
        return int(self.info["n_inputs"])

    def __getitem__(self, name: str) -> StoredLayer:
        try:
            return self.layers[name]
        except KeyError:
            raise ParameterError(f"the store {self.path} has no layer {name!r}; it has {list(self.layers)}") from None

    def __repr__(self) -> str:
        return f"ActivationStore({str(self.path)!r}, layers={list(self.layers)}, inputs={self.n_inputs})"

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ActivationStore:
        """Reopen the finished extraction in `path`.

        Raises
        ------
        SourceError
            `path` holds no extraction, an unfinished one (run `extract` again with the same
            arguments to finish it), or one whose files are missing or damaged.
        """
        from .sources import _read_manifest

        root = Path(path)
        info = _read_json_file(root / EXTRACT_FILE)
        if info is None or info.get("format") != _EXTRACT_FORMAT:
            raise SourceError(f"{root} holds no neuroneval extraction (no valid {EXTRACT_FILE})")
        if not info.get("complete"):
            raise SourceError(
                f"the extraction in {root} is unfinished; run extract again with the same arguments to finish it"
            )
        layers: dict[str, StoredLayer] = {}
        for entry in info["layers"]:
            directory = root / entry["directory"]
            try:
                manifest = _read_manifest(directory)
            except SourceError as e:
                raise SourceError(f"the extraction in {root} is damaged: {e}") from e
            for shard in manifest["shards"]:
                if not (directory / shard["file"]).is_file():
                    raise SourceError(
                        f"the extraction in {root} is damaged: shard {directory / shard['file']} is missing"
                    )
            try:
                rows = np.load(directory / ROWS_FILE, mmap_mode="r")
            except (OSError, ValueError) as e:
                raise SourceError(f"the extraction in {root} is damaged: {directory / ROWS_FILE}: {e}") from e
            if rows.shape != (int(manifest["n_rows"]),) or rows.dtype.names != tuple(manifest["row_fields"]):
                raise SourceError(
                    f"the extraction in {root} is damaged: {directory / ROWS_FILE} has {rows.shape[0]} rows "
                    f"{rows.dtype.names}; the manifest says {manifest['n_rows']} {tuple(manifest['row_fields'])}"
                )
            layers[entry["name"]] = StoredLayer(directory, manifest)
        return cls(root, info, layers)


def extract(
    model: torch.nn.Module,
    data: Any,
    layers: str | torch.nn.Module | Sequence[Any],
    out: str | os.PathLike[str],
    *,
    device: str | torch.device = "auto",
    reduce: str | Mapping[Any, str] = "mean",
    dtype: str | torch.dtype = "float16",
    batch_size: int | None = None,
    sae: Callable[[torch.Tensor], torch.Tensor] | Mapping[Any, Any] | None = None,
    autocast: bool = False,
    resume: bool = True,
    progress: bool = True,
    shard_rows: int | None = None,
    overlap: bool = True,
) -> ActivationStore:
    """Run `model` over `data` and store the outputs of `layers` as row shards in `out`, at any scale.

    Every layer gets its own shard directory ``out/<layer>/`` that `neuroneval.evaluate`,
    `neuroneval.score` and `neuroneval.sources.open_activations` read directly (unit names
    ``"<layer>[<j>]"``), with a row-id table ``rows.npy`` saying which input (and which token
    or position) each row is. ``out/extract.json`` records the run. Shards are written as they
    fill, so memory holds one shard per layer, not the matrix.

    The model runs in eval mode under `torch.inference_mode`, all layers in one forward pass
    per batch (forward hooks, always removed; the training flag is restored, and so is the
    model's device if it was moved to `device`). Results do not depend on the batch size
    beyond what the model's own arithmetic does: each row is reduced in float32 from its own
    input's output, then rounded once to `dtype`.

    Parameters
    ----------
    model : torch.nn.Module
        Called as ``model(x)``, or ``model(**batch)`` for dict batches.
    data
        The inputs, **in a deterministic order** (a shuffling DataLoader is refused; row ids
        count inputs in the order the data yield them, and resuming re-iterates the data):

        - a tensor or numpy array of shape (N, ...), split into `batch_size` chunks;
        - a DataLoader or any iterable of batches, each a tensor, a tuple/list whose first
          element is the input (labels after it are ignored), or a dict as Hugging Face
          tokenizers return (``model(**batch)``; its ``attention_mask`` marks padding).
    layers : str, module, or a sequence of them
        Modules by name as ``model.named_modules()`` gives them, or the module objects. Each
        must run exactly once per forward pass. A module returning a tuple (as many Hugging
        Face modules do) or a Hugging Face ``ModelOutput`` contributes its first element.
    out : path
        The output directory (created; it must be empty or hold an extraction).
    device : "auto", str or torch.device
        Where the model runs: "auto" is the model's CUDA device if it has one, else CUDA when
        available, else the CPU.
    reduce : str or dict of layer to str
        How a layer's output becomes rows (one value per layer, or a dict; layers not in the
        dict get "mean"):

        - (N, C, H, W) feature maps (or more spatial dimensions): ``"mean"`` or ``"max"`` over
          space (one row per input), or ``"spatial"`` (4-D only: one row per input and
          position, row ids (input, y, x));
        - (N, L, D) sequences: ``"mean"`` or ``"max"`` over the non-padding tokens (a
          document without tokens gets 0), or ``"tokens"`` (one row per non-padding token,
          row ids (document, position));
        - (N, D) outputs are stored as they are ("mean" and "max" leave them alone), (N,) as
          one unit.
    dtype : {"float16", "float32", "float64"}
        The stored dtype (round to nearest from float32).
    batch_size : int, optional
        Inputs per forward pass when `data` is a tensor (default 256); a DataLoader or an
        iterable sets its own batches, so it must be None then.
    sae : callable or dict of layer to callable, optional
        An encoder (e.g. an SAE's ``Linear + ReLU`` as a module) applied to the reduced rows
        of a layer (all layers, or those in the dict); its (rows, latents) output is stored
        instead. When more than 90% of its first computed batch is zero, the layer is stored
        as sparse ``(row, unit, value)`` triplet shards. A module is moved to the device and
        put in eval mode for the run (both restored afterwards).
    autocast : bool
        Run the model under ``torch.autocast`` (float16) on CUDA; ignored on the CPU.
    resume : bool
        If `out` holds an unfinished run with the same arguments, continue it: batches whose
        rows all lie in complete shards are skipped without running the model, and the final
        store is byte-identical to an uninterrupted run's. A finished run with the same
        arguments is returned as is. With different arguments `ResumeError` is raised.
        ``resume=False`` deletes an earlier extraction in `out` and starts over.
    progress : bool
        A progress line on stderr when it is a terminal, and notices (resuming) on stderr.
    shard_rows : int, optional
        Rows per shard (the last one may be shorter); by default as many as fit in 64 MiB
        (the stored values and their int64 row ids).
    overlap : bool
        On CUDA, copy each batch's rows to pinned host memory without blocking and write the
        shards from a background thread (bounded to two batches in flight), so disk writes
        overlap the next forward passes; on the CPU the writer thread alone. False copies and
        writes synchronously in the calling thread (for comparison; the output is the same).

    Returns
    -------
    ActivationStore
        The finished store (also ``ActivationStore.open(out)``).

    Raises
    ------
    ParameterError
        An unknown layer, `reduce`, `dtype`, `device`, `batch_size` or `shard_rows`; a
        shuffling DataLoader; a layer that did not run exactly once in a forward pass.
    ShapeError
        A `reduce` that does not fit a layer's output, a layer output that is not a tensor or
        whose first dimension is not the batch's, batches whose units or masks disagree.
    EmptyInputError
        No layers, or data without batches, or a layer that produced no rows.
    ResumeError
        `out` holds an extraction made with different arguments or data, or files that are
        not an extraction.

    Notes
    -----
    Store layout: ``out/extract.json`` (format ``neuroneval-extract``: the arguments and their
    fingerprint, model class, layers with their directory, reduction, units, layout, shard
    size, row fields and, once finished, rows; ``complete``, ``n_inputs``, ``n_batches``);
    ``out/<layer>/manifest.json`` (a ``neuroneval-shards`` manifest with the extra keys
    ``model``, ``layer``, ``reduce``, ``row_fields``, ``rows_file``, ``sae``); the shards
    ``shard-NNNNN.npy`` (dense) or ``.npz`` (triplets); ``rows.npy``.

    While a run is unfinished, each layer has only ``manifest.partial.json`` (listing the
    complete shards, each written aside, synced and renamed into place, with per-shard row
    ids ``rows-NNNNN.npy``); ``manifest.json`` and ``rows.npy`` are written at the end, then
    ``extract.json`` is marked complete. Resuming checks the arguments' fingerprint (model
    class and a sample of its weights, layers, reductions, dtype, SAEs, device type,
    autocast, batch and shard sizes, the data's length and a hash of its first batch).

    Examples
    --------
    >>> import tempfile, torch
    >>> from neuroneval.torch import extract
    >>> _ = torch.manual_seed(0)
    >>> model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
    ...                             torch.nn.Linear(4 * 8 * 8, 3))
    >>> store = extract(model, torch.randn(10, 1, 8, 8), ["1", "3"], tempfile.mkdtemp(),
    ...                 reduce={"1": "spatial"}, batch_size=4, progress=False)
    >>> [(name, layer.n_rows, layer.n_units, layer.fields) for name, layer in store.layers.items()]
    [('1', 640, 4, ('input', 'y', 'x')), ('3', 10, 3, ('input',))]
    """
    run = _Extraction(model, data, layers, out, device, reduce, dtype, batch_size, sae, autocast, shard_rows)
    return run.run(resume=resume, progress=progress, overlap=overlap)


# --- arguments --------------------------------------------------------------------------------------


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
        known = [n for n in modules if n]
        shown = ", ".join(map(repr, known[:20])) + (f", ... ({len(known)} in all)" if len(known) > 20 else "")
        raise ParameterError(f"model has no module named {item!r}; its modules are: {shown}")
    return item


def _per_layer(
    value: Any, names: list[str], model: torch.nn.Module, what: str, default: Any, is_value: Callable[[Any], bool]
) -> dict[str, Any]:
    """A per-layer setting: one value for every layer, or a dict keyed by layer name or module."""
    if is_value(value):
        return dict.fromkeys(names, value)
    if not isinstance(value, Mapping):
        raise ParameterError(f"{what} must be a single value or a dict of layer to value; got {value!r}")
    modules = dict(model.named_modules())
    by_id = {id(m): n for n, m in modules.items()}
    result = dict.fromkeys(names, default)
    for key, v in value.items():
        name = _layer_name(key, modules, by_id)
        if name not in result:
            raise ParameterError(f"{what} names the layer {name!r}, which is not among the layers extracted {names}")
        result[name] = v
    return result


def _store_dtype(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else dtype
    if not isinstance(name, str) or name not in _STORE_DTYPES:
        raise ParameterError(f"dtype must be one of {', '.join(map(repr, _STORE_DTYPES))}; got {dtype!r}")
    return name


def _positive(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ParameterError(f"{name} must be a positive integer; got {value!r}")
    return int(value)


def _pick_device(model: torch.nn.Module, device: Any) -> torch.device:
    if isinstance(device, str) and device == "auto":
        for t in itertools.chain(model.parameters(), model.buffers()):
            if t.device.type == "cuda":
                return t.device
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ParameterError(f"device must be 'auto', a device name or a torch.device; got {device!r}") from e
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ParameterError(f"device {device!r} was asked for, but CUDA is not available here")
    return chosen


def _weights_digest(module: Any) -> str:
    """Class, names, shapes and dtypes of every tensor of the state dict, with a sample of
    their values (the first and last 256 of each): cheap even for a large model on a GPU."""
    h = hashlib.blake2b(digest_size=16)
    h.update(_class_name(module).encode())
    if not isinstance(module, torch.nn.Module):
        return h.hexdigest()
    for name, t in module.state_dict().items():
        if not isinstance(t, torch.Tensor):
            continue
        h.update(f"|{name}|{tuple(t.shape)}|{t.dtype}".encode())
        try:
            flat = t.detach().reshape(-1)
            sample = torch.cat([flat[:256], flat[-256:]]) if flat.numel() > 512 else flat
            h.update(sample.to("cpu", torch.float64).numpy().tobytes())
        except (RuntimeError, TypeError, NotImplementedError):  # meta, quantized or sparse tensors
            pass
    return h.hexdigest()


def _class_name(obj: Any) -> str:
    """A module's class; a plain function's own name."""
    if not isinstance(obj, torch.nn.Module) and hasattr(obj, "__qualname__"):
        return f"{getattr(obj, '__module__', '')}.{obj.__qualname__}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


# --- data -------------------------------------------------------------------------------------------


@dataclass
class _Call:
    """One batch as the model is called with it."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    n: int
    mask: torch.Tensor | None  # the attention mask (N, L), where the batch had one


def _batches(data: Any, batch_size: int | None) -> tuple[Iterator[Any], dict[str, Any], int | None]:
    """The raw batches, a description of the data for the fingerprint, and the number of
    batches when known."""
    if isinstance(data, np.ndarray):
        data = torch.as_tensor(data)
    if isinstance(data, torch.Tensor):
        if data.ndim == 0:
            raise ShapeError("data must have a first dimension over inputs; got a scalar")
        n = int(data.shape[0])
        if n == 0:
            raise EmptyInputError("data hold no inputs (first dimension is 0)")
        bs = batch_size or 256
        return (data[s : s + bs] for s in range(0, n, bs)), {"kind": "tensor", "inputs": n}, -(-n // bs)
    if batch_size is not None:
        raise ParameterError(
            "batch_size applies to tensor data only; a DataLoader or an iterable of batches sets its own"
        )
    from torch.utils.data import DataLoader, RandomSampler

    if isinstance(data, DataLoader):
        samplers = [data.sampler, getattr(data.batch_sampler, "sampler", None)]
        if any(isinstance(s, RandomSampler) for s in samplers):
            raise ParameterError(
                "the DataLoader shuffles (shuffle=True); extract needs a deterministic order (row ids count "
                "inputs in the order the data yield them, and resuming re-iterates the data)"
            )
    if isinstance(data, (str, bytes, Mapping)) or not hasattr(data, "__iter__"):
        raise ParameterError(
            f"data must be a tensor, an array, a DataLoader or an iterable of batches; got {type(data).__name__}"
        )
    try:
        length: int | None = len(data)
    except TypeError:
        length = None
    kind = "dataloader" if isinstance(data, DataLoader) else "iterable"
    return iter(data), {"kind": kind, "batches": length}, length


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


def _batch_digest(batch: Any) -> str:
    """A hash of a raw batch's contents (tensors by dtype, shape and bytes)."""
    h = hashlib.blake2b(digest_size=16)

    def feed(x: Any) -> None:
        if isinstance(x, np.ndarray):
            x = torch.as_tensor(x)
        if isinstance(x, torch.Tensor):
            t = x.detach().to("cpu").contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(x, Mapping):
            for k in sorted(x, key=str):
                h.update(f"K{k}".encode())
                feed(x[k])
        elif isinstance(x, (tuple, list)):
            h.update(f"L{len(x)}".encode())
            for v in x:
                feed(v)
        else:
            h.update(f"V{x!r}".encode())

    feed(batch)
    return h.hexdigest()


# --- per-layer computation on the device ------------------------------------------------------------


@dataclass
class _Plan:
    """How a layer is stored, fixed by the first batch computed (and kept in extract.json)."""

    name: str
    directory: str
    kind: str  # flat, map-mean, map-max, spatial, seq-mean, seq-max, tokens
    units: int
    layout: str  # dense or triplets
    shard_rows: int

    @property
    def reduce(self) -> str:
        return _LABELS.get(self.kind, self.kind)

    @property
    def fields(self) -> tuple[str, ...]:
        return _FIELDS.get(self.kind, ("input",))

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "directory": self.directory,
            "kind": self.kind,
            "reduce": self.reduce,
            "units": self.units,
            "layout": self.layout,
            "shard_rows": self.shard_rows,
            "row_fields": list(self.fields),
            "rows_file": ROWS_FILE,
        }


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


# --- writing ----------------------------------------------------------------------------------------


def _write_json(path: Path, obj: Any) -> None:
    text = json.dumps(obj, indent=1) + "\n"
    write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def _read_json_file(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _save_npy(path: Path, array: np.ndarray) -> None:
    def write(p: Path) -> None:
        with open(p, "wb") as f:
            np.lib.format.write_array(f, array, allow_pickle=False)

    write_atomic(path, write)


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An uncompressed `.npz` (as np.savez writes) with fixed timestamps, so that the same
    arrays always give the same bytes."""

    def write(p: Path) -> None:
        with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_STORED) as z:
            for key, a in arrays.items():
                info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                with z.open(info, "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.ascontiguousarray(a), allow_pickle=False)

    write_atomic(path, write)


def _remove_temporaries(directory: Path) -> None:
    """Temporary files that a killed run left (write_atomic names them ``.<name>.<pid>.<uuid>.tmp``)."""
    if directory.is_dir():
        for p in directory.iterdir():
            if p.name.startswith(".") and p.name.endswith(".tmp") and p.is_file():
                p.unlink(missing_ok=True)


class _Sink:
    """A layer's shard directory: fills one shard at a time and commits it when full."""

    def __init__(self, root: Path, plan: _Plan, header: dict[str, Any]) -> None:
        self.plan, self.dir, self.header = plan, root / plan.directory, header
        self.np_dtype = np.dtype(header["dtype"])
        self.row_dtype = np.dtype([(f, np.int64) for f in plan.fields])
        self.entries: list[dict[str, Any]] = []
        self.committed = 0  # rows in complete shards
        self.fill = 0  # rows in the shard being filled
        self.resume_at: tuple[int, int] | None = None  # (input, rows of it already stored)
        self.ids = np.empty((plan.shard_rows, len(plan.fields)), dtype=np.int64)
        self.values: np.ndarray | None = None
        self.triplets: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        if plan.layout == "dense":
            self.values = np.empty((plan.shard_rows, plan.units), dtype=self.np_dtype)

    # The state on disk ----------------------------------------------------------------------------

    def load(self) -> tuple[int, int]:
        """The complete shards of an unfinished run; returns where the layer resumes (input, rows to skip)."""
        _remove_temporaries(self.dir)
        manifest = _read_json_file(self.dir / _PARTIAL)
        if manifest is None:
            return (0, 0)
        for entry in manifest["shards"]:
            for f in (entry["file"], self.rows_name(len(self.entries))):
                if not (self.dir / f).is_file():
                    raise ResumeError(
                        f"{self.dir} lists the shard {f}, which is missing: the unfinished extraction is damaged; "
                        "pass resume=False to start over"
                    )
            self.entries.append(entry)
            self.committed += int(entry["rows"])
        if not self.entries:
            return (0, 0)
        nxt = self.entries[-1]["next"]
        self.resume_at = (int(nxt[0]), int(nxt[1]))
        return self.resume_at

    def shard_name(self, index: int) -> str:
        return f"shard-{index:05d}.{'npy' if self.plan.layout == 'dense' else 'npz'}"

    @staticmethod
    def rows_name(index: int) -> str:
        return f"rows-{index:05d}.npy"

    def manifest(self, final: bool) -> dict[str, Any]:
        shards = [{k: v for k, v in e.items() if k != "next"} if final else e for e in self.entries]
        m: dict[str, Any] = {
            "format": "neuroneval-shards",
            "version": 1,
            "layout": self.plan.layout,
            "n_rows": self.committed,
            "n_columns": self.plan.units,
            "dtype": self.header["dtype"],
            "names": [f"{self.plan.name or 'model'}[{j}]" for j in range(self.plan.units)],
            "shards": shards,
            "model": self.header["model"],
            "layer": self.plan.name,
            "reduce": self.plan.reduce,
            "row_fields": list(self.plan.fields),
            "rows_file": ROWS_FILE,
            "sae": self.header["sae"],
        }
        if not final:
            m["status"] = "partial"
        return m

    # Rows in -------------------------------------------------------------------------------------

    def add(self, data: np.ndarray, ids: np.ndarray, offset: int, n: int) -> None:
        """A batch's rows (in row order) and their ids; rows already stored are skipped."""
        total = ids.shape[0]
        pos = 0
        if self.resume_at is not None:
            first, skip = self.resume_at
            col = ids[:, 0]
            lo, hi = int(np.searchsorted(col, first, "left")), int(np.searchsorted(col, first, "right"))
            pos = lo + min(skip, hi - lo)
            if offset + n > first:
                self.resume_at = None
        while pos < total:
            take = min(self.plan.shard_rows - self.fill, total - pos)
            chunk = data[pos : pos + take]
            self.ids[self.fill : self.fill + take] = ids[pos : pos + take]
            if self.values is not None:
                self.values[self.fill : self.fill + take] = chunk
            else:
                r, c = np.nonzero(chunk)
                self.triplets.append(
                    ((self.committed + self.fill + r).astype(np.int64), c.astype(np.int64), chunk[r, c])
                )
            self.fill += take
            pos += take
            if self.fill == self.plan.shard_rows:
                if pos == total:
                    nxt = [offset + n, 0]
                else:
                    col = ids[:, 0]
                    at = int(ids[pos, 0])
                    nxt = [at, pos - int(np.searchsorted(col, at, "left"))]
                self.flush(nxt)

    def flush(self, nxt: list[int]) -> None:
        """Commits the shard being filled: its file and its row ids, then the partial manifest."""
        if self.fill == 0:
            return
        index = len(self.entries)
        name = self.shard_name(index)
        entry: dict[str, Any] = {"file": name, "rows": self.fill}
        if self.values is not None:
            _save_npy(self.dir / name, self.values[: self.fill])
        else:
            parts = self.triplets
            row = np.concatenate([p[0] for p in parts])
            unit = np.concatenate([p[1] for p in parts])
            value = np.concatenate([p[2] for p in parts]).astype(self.np_dtype, copy=False)
            _save_npz(self.dir / name, {"row": row, "unit": unit, "value": value})
            entry["entries"] = int(row.size)
            self.triplets = []
        ids = np.empty(self.fill, dtype=self.row_dtype)
        for j, field_name in enumerate(self.plan.fields):
            ids[field_name] = self.ids[: self.fill, j]
        _save_npy(self.dir / self.rows_name(index), ids)
        entry["next"] = [int(nxt[0]), int(nxt[1])]
        self.entries.append(entry)
        self.committed += self.fill
        self.fill = 0
        _write_json(self.dir / _PARTIAL, self.manifest(final=False))

    # The end -------------------------------------------------------------------------------------

    def finish(self) -> None:
        """``rows.npy`` (from the per-shard row ids) and ``manifest.json``."""
        if self.committed == 0:
            raise EmptyInputError(f"layer {self.plan.name!r} produced no rows (every input was padding?)")

        def write_rows(p: Path) -> None:
            table = np.lib.format.open_memmap(p, mode="w+", dtype=self.row_dtype, shape=(self.committed,))
            at = 0
            for i in range(len(self.entries)):
                part = np.load(self.dir / self.rows_name(i))
                table[at : at + part.shape[0]] = part
                at += part.shape[0]
            table.flush()
            del table

        write_atomic(self.dir / ROWS_FILE, write_rows)
        _write_json(self.dir / MANIFEST_NAME, self.manifest(final=True))

    def clean(self) -> None:
        """Removes what only an unfinished run needs."""
        for i in range(len(self.entries)):
            (self.dir / self.rows_name(i)).unlink(missing_ok=True)
        (self.dir / _PARTIAL).unlink(missing_ok=True)
        _remove_temporaries(self.dir)


@dataclass
class _Item:
    """One batch's rows on their way to the disk."""

    offset: int
    n: int
    results: list[torch.Tensor]  # per layer, on the host (pinned on CUDA)
    metas: list[Any]
    mask: npt.NDArray[np.bool_] | None
    event: Any = None  # a CUDA event recorded after the copies


def _row_ids(plan: _Plan, offset: int, n: int, meta: Any, mask: npt.NDArray[np.bool_] | None) -> np.ndarray:
    if plan.kind == "spatial":
        h, w = meta
        i, y, x = np.meshgrid(np.arange(n), np.arange(h), np.arange(w), indexing="ij")
        return np.stack([i.reshape(-1) + offset, y.reshape(-1), x.reshape(-1)], axis=1).astype(np.int64)
    if plan.kind == "tokens":
        if mask is None:
            mask = np.ones((n, int(meta)), dtype=np.bool_)
        d, p = np.nonzero(mask)
        return np.stack([d + offset, p], axis=1).astype(np.int64)
    return np.arange(offset, offset + n, dtype=np.int64)[:, None]


class _Writer:
    """Writes each batch's rows into the layers' shards: on one background thread fed by a
    bounded queue (overlap), or in the calling thread."""

    def __init__(self, sinks: list[_Sink], threaded: bool) -> None:
        self.sinks = sinks
        self.threaded = threaded
        self.error: BaseException | None = None
        self.queue: queue.Queue[_Item | None] = queue.Queue(maxsize=_QUEUE_BATCHES)
        self.thread: threading.Thread | None = None
        if threaded:
            self.thread = threading.Thread(target=self._loop, name="neuroneval-writer", daemon=True)
            self.thread.start()

    def put(self, item: _Item) -> None:
        if not self.threaded:
            self._write(item)
            return
        while True:
            self._raise()
            try:
                self.queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _loop(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            if self.error is not None:
                continue  # drain without writing
            try:
                self._write(item)
            except BaseException as e:  # handed to the main thread
                self.error = e

    def _write(self, item: _Item) -> None:
        if item.event is not None:
            item.event.synchronize()
        for sink, result, meta in zip(self.sinks, item.results, item.metas, strict=True):
            ids = _row_ids(sink.plan, item.offset, item.n, meta, item.mask)
            data = result.numpy()
            if data.shape[0] != ids.shape[0]:  # pragma: no cover - the hook's reductions guarantee it
                raise ShapeError(f"layer {sink.plan.name!r}: {data.shape[0]} rows for {ids.shape[0]} row ids")
            sink.add(data, ids, item.offset, item.n)

    def close(self, ok: bool) -> None:
        """Waits for the queued batches to be written (also when the run failed: their full
        shards are committed, so a resumed run need not compute them again); raises the
        writer's error when `ok`."""
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.thread = None
        if ok:
            self._raise()


# --- the run ----------------------------------------------------------------------------------------


class _Extraction:
    def __init__(
        self,
        model: torch.nn.Module,
        data: Any,
        layers: Any,
        out: Any,
        device: Any,
        reduce: Any,
        dtype: Any,
        batch_size: Any,
        sae: Any,
        autocast: bool,
        shard_rows: Any,
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise ParameterError(f"model must be a torch.nn.Module; got {type(model).__name__}")
        self.model = model
        self.names = _resolve_layers(model, layers)
        self.reduce = _per_layer(reduce, self.names, model, "reduce", "mean", lambda v: isinstance(v, str))
        for name, r in self.reduce.items():
            if r not in _EXTRACT_REDUCTIONS:
                raise ParameterError(
                    f"reduce for layer {name!r} must be one of {', '.join(map(repr, _EXTRACT_REDUCTIONS))}; got {r!r}"
                )
        self.dtype = _store_dtype(dtype)
        self.batch_size = _positive("batch_size", batch_size)
        self.shard_rows = _positive("shard_rows", shard_rows)
        self.sae = _per_layer(sae, self.names, model, "sae", None, lambda v: v is None or callable(v))
        for name, s in self.sae.items():
            if s is not None and not callable(s):
                raise ParameterError(f"the sae of layer {name!r} must be callable; got {s!r}")
        self.device = _pick_device(model, device)
        self.autocast = bool(autocast) and self.device.type == "cuda"
        self.out = Path(out)
        self.raw, self.data_info, self.n_batches = _batches(data, self.batch_size)

    # --- the fingerprint and the state in extract.json ---

    def arguments(self, first_batch: Any) -> dict[str, Any]:
        saes = {
            n: ({"class": _class_name(s), "weights": _weights_digest(s)} if s is not None else None)
            for n, s in self.sae.items()
        }
        return {
            "model": _class_name(self.model),
            "model_weights": _weights_digest(self.model),
            "layers": self.names,
            "reduce": self.reduce,
            "dtype": self.dtype,
            "sae": saes if any(v is not None for v in saes.values()) else None,
            "device": self.device.type,
            "autocast": self.autocast,
            "batch_size": self.batch_size or (256 if self.data_info["kind"] == "tensor" else None),
            "shard_rows": self.shard_rows or "auto",
            "data": {**self.data_info, "first_batch": _batch_digest(first_batch)},
        }

    def directories(self) -> dict[str, str]:
        used = {EXTRACT_FILE}
        result = {}
        for name in self.names:
            base = re.sub(r"[^A-Za-z0-9._-]", "_", name) or "model"
            if base.startswith("."):
                base = "_" + base
            d, k = base, 2
            while d.lower() in used:
                d, k = f"{base}-{k}", k + 1
            used.add(d.lower())
            result[name] = d
        return result

    def open_out(self, state: dict[str, Any], resume: bool) -> dict[str, Any] | None:
        """The earlier state to resume from (None: a fresh start). A finished store with the
        same arguments comes back with ``complete`` set."""
        out = self.out
        if out.exists() and not out.is_dir():
            raise ResumeError(f"{out} exists and is not a directory")
        previous = _read_json_file(out / EXTRACT_FILE)
        if previous is not None and previous.get("format") == _EXTRACT_FORMAT:
            same = previous.get("fingerprint") == state["fingerprint"]
            if resume and not same:
                raise ResumeError(
                    f"{out} holds an extraction made with different arguments or data "
                    f"({self.difference(previous.get('arguments'), state['arguments'])}); run with the same ones to "
                    "resume it, or pass resume=False to discard it"
                )
            if resume:
                return previous
            shutil.rmtree(out)
        elif out.is_dir():
            _remove_temporaries(out)
            if any(out.iterdir()):
                raise ResumeError(
                    f"{out} exists and holds files that are not a neuroneval extraction; choose an empty directory"
                )
        out.mkdir(parents=True, exist_ok=True)
        return None

    @staticmethod
    def difference(old: Any, new: dict[str, Any]) -> str:
        if not isinstance(old, dict):
            return "unreadable arguments"
        keys = [k for k in new if old.get(k) != json.loads(json.dumps(new[k]))]
        return "differs in " + ", ".join(keys) if keys else "differs"

    # --- the loop ---

    def run(self, *, resume: bool, progress: bool, overlap: bool) -> ActivationStore:
        from ._evaluate import _Progress

        report = _Progress(progress)
        try:
            first = next(self.raw)
        except StopIteration:
            raise EmptyInputError("data hold no batches") from None
        arguments = self.arguments(first)
        fingerprint = hashlib.blake2b(json.dumps(arguments, sort_keys=True).encode(), digest_size=16).hexdigest()
        state: dict[str, Any] = {
            "format": _EXTRACT_FORMAT,
            "version": 1,
            "complete": False,
            "fingerprint": fingerprint,
            "arguments": arguments,
            "model": arguments["model"],
            "dtype": self.dtype,
            "layers": None,
        }
        previous = self.open_out(state, resume)
        if previous is not None and previous.get("complete"):
            self.clean_finished(previous)
            report.say(f"{self.out} already holds this extraction, finished")
            return ActivationStore.open(self.out)
        header = {"model": arguments["model"], "dtype": self.dtype}
        sinks: list[_Sink] | None = None
        restart = 0
        if previous is not None and previous.get("layers"):
            state["layers"] = previous["layers"]
            sinks = self.make_sinks(state, header)
            points = [sink.load() for sink in sinks]
            restart = min(p[0] for p in points)
            stored = sum(sink.committed for sink in sinks)
            report.say(
                f"resuming {self.out}: {sum(len(s.entries) for s in sinks)} complete shards ({stored} rows) kept; "
                f"the batches before input {restart} are skipped without running the model"
            )
        elif previous is not None:
            report.say(f"resuming {self.out}: no complete shard yet, starting from the first batch")
        else:
            _write_json(self.out / EXTRACT_FILE, state)
        return self.loop(first, state, header, sinks, restart, report, overlap)

    def make_sinks(self, state: dict[str, Any], header: dict[str, Any]) -> list[_Sink]:
        sinks = []
        for entry in state["layers"]:
            plan = _Plan(
                entry["name"],
                entry["directory"],
                entry["kind"],
                int(entry["units"]),
                entry["layout"],
                int(entry["shard_rows"]),
            )
            sae = self.sae[plan.name]
            sink_header = {**header, "sae": _class_name(sae) if sae is not None else None}
            (self.out / plan.directory).mkdir(parents=True, exist_ok=True)
            sinks.append(_Sink(self.out, plan, sink_header))
        return sinks

    def plans(self, runs: list[_LayerRun], store_dtype: torch.dtype) -> list[dict[str, Any]]:
        directories = self.directories()
        itemsize = torch.empty((), dtype=store_dtype).element_size()
        result = []
        for run in runs:
            assert run.result is not None and run.kind is not None
            units = int(run.result.shape[1])
            layout = "dense"
            if run.zeros is not None and run.result.numel() > 0:
                if int(run.zeros.item()) > SPARSE_ZEROS * run.result.numel():
                    layout = "triplets"
            row_bytes = units * itemsize + 8 * len(_FIELDS.get(run.kind, ("input",)))  # values and row ids
            rows = self.shard_rows or max(1, SHARD_BYTES // row_bytes)
            result.append(_Plan(run.name, directories[run.name], run.kind, units, layout, rows).as_json())
        return result

    def loop(
        self,
        first: Any,
        state: dict[str, Any],
        header: dict[str, Any],
        sinks: list[_Sink] | None,
        restart: int,
        report: Any,
        overlap: bool,
    ) -> ActivationStore:
        model, device = self.model, self.device
        store_dtype = _STORE_DTYPES[self.dtype]
        modules = dict(model.named_modules())
        runs = [_LayerRun(n, self.reduce[n], self.sae[n], store_dtype) for n in self.names]
        if sinks is not None:  # resuming: the plans are fixed
            for run, sink in zip(runs, sinks, strict=True):
                run.kind = sink.plan.kind
        cuda = device.type == "cuda"
        pinned = cuda and overlap
        writer: _Writer | None = None
        moved = _Moves()
        handles = []
        owned = [model, *(s for s in self.sae.values() if isinstance(s, torch.nn.Module))]
        flags = [(m, m.training) for o in owned for m in o.modules()]  # each module's own, restored as it was
        ok = False
        offset = 0
        index = -1
        computed = skipped = 0
        started = time.monotonic()
        try:
            for module in owned:
                moved.to(module, device)
                module.eval()
            for run in runs:
                handles.append(modules[run.name].register_forward_hook(run.hook))
            if sinks is not None:
                writer = _Writer(sinks, threaded=overlap)
            amp = torch.autocast("cuda") if self.autocast else contextlib.nullcontext()
            with torch.inference_mode(), amp:
                for index, raw in enumerate(itertools.chain([first], self.raw)):
                    call = _as_call(raw, index, device) if offset + _raw_size(raw, index) > restart else None
                    n = call.n if call is not None else _raw_size(raw, index)
                    if n == 0:
                        raise EmptyInputError(f"batch {index} holds no inputs")
                    if call is None:
                        offset += n
                        skipped += 1
                        self.show(report, index + 1, offset, started)
                        continue
                    mask = call.mask.to(device, non_blocking=True).bool() if call.mask is not None else None
                    for run in runs:
                        run.start(call, mask)
                        run.decide = sinks is None
                    model(*call.args, **call.kwargs)
                    for run in runs:
                        if run.calls != 1:
                            raise ParameterError(
                                f"layer {run.name!r} ran {run.calls} times in one forward pass; extract needs exactly once"
                            )
                    if sinks is None:
                        state["layers"] = self.plans(runs, store_dtype)
                        sinks = self.make_sinks(state, header)
                        _write_json(self.out / EXTRACT_FILE, state)
                        writer = _Writer(sinks, threaded=overlap)
                    assert writer is not None
                    for run, sink in zip(runs, sinks, strict=True):
                        assert run.result is not None
                        if run.result.shape[1] != sink.plan.units:
                            raise ShapeError(
                                f"layer {run.name!r} gives {run.result.shape[1]} columns in batch {index}; "
                                f"the store has {sink.plan.units}: batches must agree"
                            )
                    results = []
                    for run in runs:
                        assert run.result is not None
                        r = run.result
                        if pinned:
                            host = torch.empty(r.shape, dtype=r.dtype, pin_memory=True)
                            host.copy_(r, non_blocking=True)
                        elif cuda:
                            host = r.cpu()
                        else:  # a copy: the module's output may be changed in place later in the pass
                            host = torch.empty(r.shape, dtype=r.dtype)
                            host.copy_(r)
                        results.append(host)
                        run.result = None
                    event = None
                    if pinned:
                        event = torch.cuda.Event()
                        event.record()
                    mask_host = call.mask.to("cpu").bool().numpy() if call.mask is not None else None
                    writer.put(_Item(offset, n, results, [run.meta for run in runs], mask_host, event))
                    offset += n
                    computed += 1
                    self.show(report, index + 1, offset, started)
            assert writer is not None and sinks is not None
            writer.close(ok=True)
            for sink in sinks:
                sink.flush([offset, 0])
            ok = True
        finally:
            if writer is not None and not ok:
                writer.close(ok=False)
            for handle in handles:
                handle.remove()
            for module, training in flags:
                module.training = training
            moved.restore()
        if report.tty and self.n_batches is None:
            report.stream.write("\n")
        if skipped:
            report.say(f"skipped {skipped} batches already stored, computed {computed}")
        self.finish(state, sinks, offset, index + 1)
        return ActivationStore.open(self.out)

    def show(self, report: Any, batches: int, inputs: int, started: float) -> None:
        if self.n_batches is not None:
            report.bar("extracting", batches, self.n_batches)
        elif report.tty:
            report.stream.write(f"\rextracting: {batches} batches, {inputs} inputs, {time.monotonic() - started:.0f}s")
            report.stream.flush()

    def finish(self, state: dict[str, Any], sinks: list[_Sink], n_inputs: int, n_batches: int) -> None:
        for sink in sinks:
            sink.finish()
        for entry, sink in zip(state["layers"], sinks, strict=True):
            entry["n_rows"] = sink.committed
        state["complete"] = True
        state["n_inputs"] = n_inputs
        state["n_batches"] = n_batches
        _write_json(self.out / EXTRACT_FILE, state)
        for sink in sinks:
            sink.clean()
        _remove_temporaries(self.out)

    def clean_finished(self, state: dict[str, Any]) -> None:
        """What a run killed after it was marked complete may have left."""
        for entry in state.get("layers") or []:
            directory = self.out / entry["directory"]
            if directory.is_dir():
                for p in directory.iterdir():
                    if p.name == _PARTIAL or re.fullmatch(r"rows-\d+\.npy", p.name):
                        p.unlink(missing_ok=True)
                _remove_temporaries(directory)
        _remove_temporaries(self.out)


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


class _Moves:
    """Modules moved to the run's device, moved back afterwards."""

    def __init__(self) -> None:
        self.moved: list[tuple[torch.nn.Module, torch.device]] = []

    def to(self, module: torch.nn.Module, device: torch.device) -> None:
        tensors = list(itertools.chain(module.parameters(), module.buffers()))
        devices = {t.device for t in tensors}
        if not tensors or all(_same_device(d, device) for d in devices):
            return
        module.to(device)
        if len(devices) == 1:
            self.moved.append((module, devices.pop()))

    def restore(self) -> None:
        for module, device in reversed(self.moved):
            module.to(device)
        self.moved.clear()


def _same_device(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    return (a.index or 0) == (b.index if b.index is not None else torch.cuda.current_device())
