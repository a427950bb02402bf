"""The results directory's inputs: each unit's top-activating inputs (``top_inputs.parquet``)
and the probing set's images or texts (``inputs/``), as `neuroneval.report` reads them."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from neuroneval.errors import EmptyInputError, NonFiniteError, ParameterError, ShapeError
from neuroneval.files import write_files_atomic
from neuroneval.options import Option, Options
from neuroneval.sources import Source, open_activations

from .read import INPUTS_PER_UNIT

_CHUNK_BYTES = 64 << 20
#: The option of `top_inputs`: how many top-activating inputs each unit keeps (the domain of
#: the scoring parameter k, whose --k flag shares the name).
TOP_INPUTS_OPTIONS = Options(
    Option("k", "integer", INPUTS_PER_UNIT, "top-activating inputs per unit", low=1, high=2.0**64, high_open=True)
)


def top_inputs(
    activations: Mapping[str, Any], k: int | None = None, *, unit_names: Mapping[str, Sequence[str]] | None = None
) -> pl.DataFrame:
    """Each unit's `k` top-activating inputs, exactly: the table ``top_inputs.parquet`` holds.

    Parameters
    ----------
    activations : mapping of layer name to an (N, K) activation source
        Anything `neuroneval.sources.open_activations` takes: a numpy array or torch tensor,
        a ``.npy`` file, a shard directory, a sparse matrix. Files are read once, in row
        chunks of about 64 MiB (sparse data in column blocks of that size).
    k : int, optional
        Inputs per unit (fewer when the layer has fewer than `k` inputs); default: see
        `TOP_INPUTS_OPTIONS`.
    unit_names : mapping of layer name to K names, optional
        The units' names, which must equal the ``unit`` values of ``scores.parquet``. Default:
        the names a shard manifest carries, else ``"{layer}[{j}]"`` (the demo's names).

    Returns
    -------
    polars.DataFrame
        Columns layer (str), unit (str), rank (int64, 0 = highest), input (int64, the row),
        activation (float64), ordered by layer (as given), unit, rank. Ties between equal
        activations go to the smaller input index.

    Raises
    ------
    NonFiniteError
        A NaN or infinite activation (its layer, row and column named).
    """
    k = TOP_INPUTS_OPTIONS.resolve(k=k)["k"]
    frames = []
    for layer, x in activations.items():
        src = open_activations(x)
        names: Sequence[str] | None = None if unit_names is None else unit_names.get(layer)
        if names is not None and len(names) != src.n_columns:
            raise ShapeError(f"unit_names[{layer!r}] has {len(names)} names for {src.n_columns} units")
        if names is None:
            names = src.names if src.names is not None else [f"{layer}[{j}]" for j in range(src.n_columns)]
        if src.n_rows == 0 or src.n_columns == 0:
            raise EmptyInputError(f"activations of layer {layer!r} have shape {src.shape}")
        index, values = _top_k(src, int(k), layer)
        units, kk = index.shape
        frames.append(
            pl.DataFrame(
                {
                    "layer": pl.Series([str(layer)] * (units * kk), dtype=pl.String),
                    "unit": pl.Series([str(n) for n in names], dtype=pl.String).gather(np.repeat(np.arange(units), kk)),
                    "rank": np.tile(np.arange(kk, dtype=np.int64), units),
                    "input": index.reshape(-1),
                    "activation": values.reshape(-1),
                }
            )
        )
    if not frames:
        return pl.DataFrame(
            schema={
                "layer": pl.String,
                "unit": pl.String,
                "rank": pl.Int64,
                "input": pl.Int64,
                "activation": pl.Float64,
            }
        )
    return pl.concat(frames)


def _top_k(src: Source, k: int, layer: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """(K, min(k, N)) input indices and activations, each unit's highest first, ties by index."""
    n, units = src.shape
    kk = min(k, n)
    if not src.row_major_files:
        # Data in memory, sparse data and column-major files: dense column blocks of about
        # _CHUNK_BYTES, each unit's top k selected at once.
        idx_parts, val_parts = [], []
        width = max(1, _CHUNK_BYTES // (8 * n))
        for start in range(0, units, width):
            stop = min(units, start + width)
            dense = np.asarray(src.dense(np.arange(start, stop)), dtype=np.float64)
            _check_finite(dense, layer, 0, start)
            pos = _select(dense, kk)
            idx_parts.append(pos)
            val_parts.append(np.take_along_axis(dense.T, pos, axis=1))
        index, values = np.concatenate(idx_parts), np.concatenate(val_parts)
    else:
        # Row-major files, read once: a running top-k over row chunks. The kept rows stay in
        # input order, so a position in [kept; chunk] orders like the input index and ties go
        # to the earlier input.
        kept_idx = np.empty((0, units), dtype=np.int64)
        kept_val = np.empty((0, units), dtype=np.float64)
        start = 0
        for chunk in src.row_chunks(max(1, _CHUNK_BYTES // (8 * units))):
            block = np.asarray(chunk, dtype=np.float64)
            _check_finite(block, layer, start, 0)
            rows = np.arange(start, start + block.shape[0], dtype=np.int64)
            start += block.shape[0]
            vals = np.concatenate([kept_val, block])
            idx = np.concatenate([kept_idx, np.broadcast_to(rows[:, None], block.shape)])
            if vals.shape[0] <= kk:
                kept_val, kept_idx = vals, idx
                continue
            pos = _select(vals, kk).T  # (kk, units), ascending positions
            kept_val = np.take_along_axis(vals, pos, axis=0)
            kept_idx = np.take_along_axis(idx, pos, axis=0)
        index, values = kept_idx.T, kept_val.T
    order = np.lexsort((index, -values))  # along the last axis: per unit
    return np.take_along_axis(index, order, axis=1), np.take_along_axis(values, order, axis=1)


def _select(values: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.int64]:
    """(columns, k) row positions of each column's k largest values, ties to the smaller
    position, in ascending position order. Needs k <= rows."""
    neg = -values
    kth = np.partition(neg, k - 1, axis=0)[k - 1]  # minus each column's k-th largest value
    above = neg < kth
    tied = neg == kth
    room = k - above.sum(axis=0)  # how many of the tied values fit, by position
    keep = above | (tied & (np.cumsum(tied, axis=0) <= room))
    return np.nonzero(keep.T)[1].reshape(values.shape[1], k).astype(np.int64)


def _check_finite(block: npt.NDArray[np.float64], layer: str, row0: int, col0: int) -> None:
    bad = ~np.isfinite(block)
    if bad.any():
        r, c = (int(v[0]) for v in np.nonzero(bad))
        raise NonFiniteError(
            f"activations of layer {layer!r} hold {block[r, c]} at row {row0 + r}, column {col0 + c}; "
            "top inputs need finite activations"
        )


def write_inputs(
    results_dir: str | os.PathLike[str],
    *,
    images: Any = None,
    texts: Sequence[str | Sequence[str]] | None = None,
    highlight: Sequence[int | None] | None = None,
) -> Path:
    """Write ``inputs/`` of `results_dir` (see `neuroneval.report`'s docstring), all files or none.

    Parameters
    ----------
    images : array of shape (N, H, W), (N, H, W, 1) or (N, H, W, 3), values in [0, 1]
        Stored as float32 ``images.npy``. A numpy array or a torch tensor.
    texts : sequence of N strings or N token lists
        Stored as ``texts.json``.
    highlight : sequence of N token indices (or None), only with `texts`
        The token of each row to highlight (``"tokens"`` of meta.json).

    Returns the ``inputs`` directory.

    Examples
    --------
    >>> import tempfile
    >>> d = write_inputs(tempfile.mkdtemp(), texts=["a dog barks", "cats"], highlight=[1, None])
    >>> json.loads((d / "meta.json").read_text())
    {'kind': 'text', 'file': 'texts.json', 'tokens': [1, None]}
    """
    if (images is None) == (texts is None):
        raise ParameterError("write_inputs takes either images= or texts=")
    directory = Path(results_dir) / "inputs"
    files: dict[str, Any] = {}
    if images is not None:
        if highlight is not None:
            raise ParameterError("highlight= goes with texts=, not images=")
        arr = _image_array(images)

        def save(p: Path) -> None:
            with open(p, "wb") as f:
                np.save(f, arr)

        files["images.npy"] = save
        meta: dict[str, Any] = {"kind": "image", "file": "images.npy"}
    else:
        assert texts is not None
        rows = _text_rows(texts)
        meta = {"kind": "text", "file": "texts.json"}
        if highlight is not None:
            meta["tokens"] = _token_indices(highlight, rows)
        files["texts.json"] = _json_writer(rows)
    files["meta.json"] = _json_writer(meta)
    write_files_atomic(directory, files)
    return directory


def _json_writer(value: Any) -> Any:
    def write(p: Path) -> None:
        p.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")

    return write


def _image_array(images: Any) -> npt.NDArray[np.float32]:
    if type(images).__module__.startswith("torch") and hasattr(images, "detach"):
        images = images.detach().cpu().numpy()
    arr = np.asarray(images)
    if arr.ndim == 4 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if not (arr.ndim == 3 or (arr.ndim == 4 and arr.shape[-1] == 3)) or 0 in arr.shape:
        raise ShapeError(f"images must have shape (N, H, W) or (N, H, W, 3); got {arr.shape}")
    if arr.dtype.kind not in "fiub":
        raise ParameterError(f"images must be numbers in [0, 1]; got dtype {arr.dtype}")
    arr = arr.astype(np.float32)
    bad = ~np.isfinite(arr) | (arr < 0) | (arr > 1)
    if bad.any():
        i = int(np.nonzero(bad.reshape(arr.shape[0], -1).any(axis=1))[0][0])
        raise ParameterError(f"images must hold values in [0, 1]; image {i} holds {arr[i][bad[i]][0]}")
    return arr


def _text_rows(texts: Sequence[str | Sequence[str]]) -> list[str | list[str]]:
    rows: list[str | list[str]] = []
    for i, t in enumerate(texts):
        if isinstance(t, str):
            rows.append(t)
        elif isinstance(t, Sequence) and all(isinstance(tok, str) for tok in t):
            rows.append(list(t))
        else:
            raise ParameterError(f"texts[{i}] must be a string or a list of token strings; got {type(t).__name__}")
    if not rows:
        raise EmptyInputError("texts is empty")
    return rows


def _token_indices(highlight: Sequence[Any], rows: Sequence[str | list[str]]) -> list[int | None]:
    if len(highlight) != len(rows):
        raise ShapeError(f"highlight has {len(highlight)} entries for {len(rows)} texts")
    out: list[int | None] = []
    for i, (h, row) in enumerate(zip(highlight, rows, strict=True)):
        if h is None:
            out.append(None)
            continue
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)):
            raise ParameterError(f"highlight[{i}] must be a token index or None; got {h!r}")
        n = len(row.split() if isinstance(row, str) else row)
        if not 0 <= int(h) < n:
            raise ParameterError(f"highlight[{i}] = {int(h)} is outside the row's {n} tokens")
        out.append(int(h))
    return out
