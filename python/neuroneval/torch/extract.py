"""`extract`: activations at scale, into the row-shard store that `neuroneval.evaluate` reads.

The run checks its arguments and fingerprints them, resumes an unfinished store, calls the
model batch by batch with the layers' hooks in place and hands each batch's rows to the
writer (a background thread, so that disk writes overlap the next forward passes)."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import queue
import re
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from neuroneval.errors import EmptyInputError, ParameterError, ResumeError, ShapeError
from neuroneval.files import inside, output_lock, writing
from neuroneval.interop.sae import SparseAutoencoder
from neuroneval.options import Option, Options
from neuroneval.progress import Progress

from .hooks import _as_call, _layer_name, _LayerRun, _raw_size, _resolve_layers
from .sae import sae_module
from .store import (
    _EXTRACT_FORMAT,
    _FIELDS,
    _PARTIAL,
    EXTRACT_FILE,
    ActivationStore,
    _Plan,
    _read_json_file,
    _remove_temporaries,
    _row_ids,
    _Sink,
    _write_json,
    layer_entries,
)

#: Default size of one shard: as many rows as fit in 64 MiB (values in the stored dtype and row ids).
SHARD_BYTES = 64 << 20
#: An SAE output whose first computed batch has more than this share of zeros is stored sparse.
SPARSE_ZEROS = 0.9
_QUEUE_BATCHES = 2
_EXTRACT_REDUCTIONS = ("mean", "max", "spatial", "tokens")
_STORE_DTYPES: dict[str, torch.dtype] = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}
#: The options of `extract` given by name: where the model runs and the stored dtype (a
#: torch.device or a torch.dtype is taken as well, and checked where it is used).
EXTRACT_OPTIONS = Options(
    Option(
        "device",
        "text",
        "auto",
        "where the model runs: auto (the model's CUDA device, else CUDA when available, else the CPU) or a device name",
    ),
    Option("dtype", "choice", "float16", "the stored dtype", choices=tuple(_STORE_DTYPES)),
)


def extract(
    model: torch.nn.Module,
    data: Any,
    layers: str | torch.nn.Module | Sequence[Any],
    out: str | os.PathLike[str],
    *,
    device: str | torch.device | None = None,
    reduce: str | Mapping[Any, str] = "mean",
    dtype: str | torch.dtype | None = None,
    batch_size: int | None = None,
    sae: Callable[[torch.Tensor], torch.Tensor] | SparseAutoencoder | Mapping[Any, Any] | None = None,
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
    device : "auto", str or torch.device, optional
        Where the model runs: "auto" is the model's CUDA device if it has one, else CUDA when
        available, else the CPU; default: see `EXTRACT_OPTIONS`.
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
    dtype : {"float16", "float32", "float64"} or torch.dtype, optional
        The stored dtype (round to nearest from float32); default: see `EXTRACT_OPTIONS`.
    batch_size : int, optional
        Inputs per forward pass when `data` is a tensor (default 256); a DataLoader or an
        iterable sets its own batches, so it must be None then.
    sae : callable, SparseAutoencoder, or dict of layer to them, optional
        An encoder (e.g. an SAE's ``Linear + ReLU`` as a module) applied to the reduced rows
        of a layer (all layers, or those in the dict); its (rows, latents) output is stored
        instead. A `neuroneval.interop.sae.SparseAutoencoder` (SAELens or sparsify weights,
        `read_saelens` / `read_sparsify`) is applied as `sae_module` makes it, which computes
        what its ``encode`` computes. When more than 90% of its first computed batch is zero,
        the layer is stored as sparse ``(row, unit, value)`` triplet shards. A module is moved
        to the device and put in eval mode for the run (both restored afterwards).
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
    # names are checked against the declarations; a torch.device or torch.dtype where it is used
    named = {"device": device, "dtype": dtype}
    values = EXTRACT_OPTIONS.resolve(**{k: v for k, v in named.items() if v is None or isinstance(v, str)})
    device = values["device"] if device is None or isinstance(device, str) else device
    dtype = values["dtype"] if dtype is None or isinstance(dtype, str) else dtype
    run = _Extraction(model, data, layers, out, device, reduce, dtype, batch_size, sae, autocast, shard_rows)
    if run.out.exists() and not run.out.is_dir():
        raise ResumeError(f"{run.out} exists and is not a directory")
    with writing(run.out.parent, "creating the store's directory"):
        run.out.parent.mkdir(parents=True, exist_ok=True)
    # One writer per store: a second extraction into the same `out` fails at once.
    with output_lock(run.out):
        return run.run(resume=resume, progress=progress, overlap=overlap)


# --- arguments --------------------------------------------------------------------------------------


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


# --- the writer -------------------------------------------------------------------------------------


@dataclass
class _Item:
    """One batch's rows on their way to the disk."""

    offset: int
    n: int
    results: list[torch.Tensor]  # per layer, on the host (pinned on CUDA)
    metas: list[Any]
    mask: npt.NDArray[np.bool_] | None
    event: Any = None  # a CUDA event recorded after the copies


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
        self.sae = _per_layer(
            sae, self.names, model, "sae", None, lambda v: v is None or callable(v) or isinstance(v, SparseAutoencoder)
        )
        # A SparseAutoencoder runs as its encoder module, whose state dict the fingerprint reads.
        self.sae = {n: sae_module(s) if isinstance(s, SparseAutoencoder) else s for n, s in self.sae.items()}
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
        report = Progress(progress)
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
        for entry in layer_entries(self.out, state):
            inside(self.out, entry["directory"], named_in=self.out / EXTRACT_FILE)
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
        report: Progress,
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
        bar = report.bar("extracting", total=self.n_batches, unit="batch")
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
                        self.show(bar, offset)
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
                    self.show(bar, offset)
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
            bar.close()
        if skipped:
            report.say(f"skipped {skipped} batches already stored, computed {computed}")
        self.finish(state, sinks, offset, index + 1)
        return ActivationStore.open(self.out)

    def show(self, bar: Any, inputs: int) -> None:
        """One more batch on the bar; without a known number of batches, the inputs so far too."""
        if self.n_batches is None:
            bar.set_postfix_str(f"{inputs} inputs", refresh=False)
        bar.update(1)

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
        for entry in layer_entries(self.out, state):
            directory = inside(self.out, entry["directory"], named_in=self.out / EXTRACT_FILE)
            if directory.is_dir():
                for p in directory.iterdir():
                    if p.name == _PARTIAL or re.fullmatch(r"rows-\d+\.npy", p.name):
                        p.unlink(missing_ok=True)
                _remove_temporaries(directory)
        _remove_temporaries(self.out)


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
