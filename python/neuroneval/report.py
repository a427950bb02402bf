"""One self-contained HTML page of a results directory: ``neuroneval report RESULTS_DIR -o report.html``.

The page needs nothing at view time: its CSS is inline, images are base64 ``data:`` URIs,
histograms are inline SVG, and its only script (a few lines) counts images that failed to
load into ``<div id="image-check" data-broken="N">``. It shows, per layer, the distribution
of each trustworthy metric and a table of units (best explanation, its scores, the unit's
top-activating inputs), then the sanity checks and the crowd simulation when present.

The results directory
---------------------
Everything but ``scores.parquet`` is optional; a part that is absent is left out of the page.
A file that is present but does not follow this contract is an error that names the file.

``scores.parquet`` (required)
    One row per scored (unit, concept) pair, as ``neuroneval.score``/``evaluate`` write it
    plus a layer column:

    - ``layer`` (string): the unit's layer. Without this column all rows form one layer
      named ``units``.
    - ``unit`` (string, or an integer index): the unit, unique within its layer.
    - ``concept`` (string, or an integer index): the explanation.
    - one float column per metric, named as in `neuroneval.METRICS` (NaN where the metric
      is undefined). Other columns (``rank`` of ``keep=k``, anything else) are ignored.

    Layers and the units of a layer appear in the order of their first row. A unit's *best
    explanation* is its concept with the highest ``correlation`` (when that column is
    present; else the first metric column), NaN ignored, ties to the earliest row; a unit
    whose scores are all NaN has none.

``sanity/table.csv``
    The sanity checks' table, as ``SanityResult.write`` and ``neuroneval sanity --out``
    write it: ``metric, missing_experimental, missing_theoretical, extra_experimental,
    extra_theoretical`` (Decrease Acc in %, empty where that test was not run) and ``passes``
    (``true``/``false``). ``sanity/chart.png`` is shown when present; ``table.md`` and
    ``records.csv`` are not read.

``crowd/rce.csv``
    The crowd simulation (``crowd.Simulation.rce``): ``sampling, aggregation, budget, rce,
    rce_se``, one row per configuration and budget (other columns ignored).
    ``crowd/rce.png`` is shown when present, else the curves are drawn from ``rce.csv``.
    The ratings each configuration needs come from ``crowd/needed.csv`` (``sampling,
    aggregation, needed``; empty = never; written by ``neuroneval crowd simulate --out``)
    when present, else they are interpolated from ``rce.csv`` as ``Simulation.needed`` does,
    at ``crowd_target`` of ``report.json`` (default 0.275).

``top_inputs.parquet``
    Each unit's top-activating inputs, as `top_inputs` returns them: ``layer`` (string),
    ``unit`` (the unit's value in ``scores.parquet``; compared as text), ``rank`` (0 = the
    highest activation), ``input`` (the input's row in the probing set, from 0) and
    ``activation`` (float). The page shows the first `INPUTS_PER_UNIT` ranks of a unit.

``inputs/``
    How to show an input, as `write_inputs` writes it: ``inputs/meta.json`` holds

    - ``{"kind": "image", "file": "images.npy"}``: an ``(N, H, W)`` (grey) or
      ``(N, H, W, 3)`` (RGB) float array with values in [0, 1] (``uint8`` 0..255 is read
      too), row i the probing set's input i. Shown nearest-neighbour upscaled to at least
      `IMAGE_MIN_SIDE` pixels, or area-downscaled to at most `IMAGE_MAX_SIDE`.
    - ``{"kind": "text", "file": "texts.json"}``, optionally with ``"tokens": [...]``:
      ``texts.json`` is a JSON list of N items, each a string or a list of token strings
      (shown concatenated as they are, so tokens carry their own spaces). ``tokens``, when
      the rows are tokens in context, is a list of N integers (or nulls): the token of each
      row to highlight, an index into the row's token list, or for a string into its
      whitespace-separated words (``str.split()``; the row is then shown with single spaces).
      Long rows are cut to a window around the highlighted token.

``report.json``
    ``{"title": str, "description": str, "layers": {layer: description}, "crowd_target":
    float}``; every key optional.

Examples
--------
>>> import numpy as np
>>> acts = np.array([[0.5, 1.0], [2.0, 1.0], [1.0, 0.0]], dtype=np.float32)
>>> top_inputs({"fc": acts}, k=2).rows()
[('fc', 'fc[0]', 0, 1, 2.0), ('fc', 'fc[0]', 1, 2, 1.0), ('fc', 'fc[1]', 0, 0, 1.0), ('fc', 'fc[1]', 1, 1, 1.0)]
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from . import __version__
from ._files import write_atomic, write_files_atomic
from ._registry import METRICS, PASSING_METRICS
from .errors import EmptyInputError, NonFiniteError, ParameterError, ShapeError, SourceError
from .sources import Source, open_activations

__all__ = [
    "DEFAULT_CROWD_TARGET",
    "IMAGE_MAX_SIDE",
    "IMAGE_MIN_SIDE",
    "INPUTS_PER_UNIT",
    "MAX_UNITS",
    "SCORES",
    "TOP_INPUTS",
    "TRUSTWORTHY",
    "render_report",
    "top_inputs",
    "write_inputs",
    "write_report",
]

#: Units listed per layer; a larger layer lists its best-explained units, with a note.
MAX_UNITS = 100
#: Top-activating inputs shown per unit.
INPUTS_PER_UNIT = 8
#: Images smaller than this (in pixels, longer side) are upscaled by an integer factor, nearest neighbour.
IMAGE_MIN_SIDE = 48
#: Images larger than this are downscaled by an integer factor (block means).
IMAGE_MAX_SIDE = 64
#: The crowd target RCE when neither needed.csv nor report.json's crowd_target gives one.
DEFAULT_CROWD_TARGET = 0.275
#: The metrics the page shows, in this order, when present: those the paper found trustworthy.
TRUSTWORTHY: tuple[str, ...] = tuple(
    sorted(PASSING_METRICS, key=lambda m: ("correlation", "cosine", "auprc", "f1", "iou", m).index(m))
)

SCORES = "scores.parquet"
TOP_INPUTS = "top_inputs.parquet"
INFO = "report.json"
_ONE_LAYER = "units"
_SANITY_COLUMNS = ("missing_experimental", "missing_theoretical", "extra_experimental", "extra_theoretical")
_PASS_LEVEL = 90.0  # sanity.PASS_LEVEL, without importing the sanity module's dependencies
_CHUNK_BYTES = 64 << 20
_TEXT_WINDOW = 12  # tokens shown on each side of a highlighted token
_TEXT_CHARS = 160  # characters shown of a row without a highlight


# --------------------------------------------------------------------------- top inputs


def top_inputs(
    activations: Mapping[str, Any], k: int = INPUTS_PER_UNIT, *, unit_names: Mapping[str, Sequence[str]] | None = None
) -> pl.DataFrame:
    """Each unit's `k` top-activating inputs, exactly: the table ``top_inputs.parquet`` holds.

    Parameters
    ----------
    activations : mapping of layer name to an (N, K) activation source
        Anything `neuroneval.sources.open_activations` takes: a numpy array or torch tensor,
        a ``.npy`` file, a shard directory, a sparse matrix. Files are read once, in row
        chunks of about 64 MiB (sparse data in column blocks of that size).
    k : int
        Inputs per unit (fewer when the layer has fewer than `k` inputs).
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
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ParameterError(f"k must be a positive integer; got {k!r}")
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
    if src.kind == "sparse":
        idx_parts, val_parts = [], []
        width = max(1, _CHUNK_BYTES // (8 * n))
        for start in range(0, units, width):
            stop = min(units, start + width)
            dense = _sparse_block(src, start, stop)
            _check_finite(dense, layer, 0, start)
            pos = _select(dense, kk)
            idx_parts.append(pos)
            val_parts.append(np.take_along_axis(dense.T, pos, axis=1))
        index, values = np.concatenate(idx_parts), np.concatenate(val_parts)
    else:
        # A running top-k over row chunks: the kept rows stay in input order, so a position
        # in [kept; chunk] orders like the input index and ties go to the earlier input.
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


def _sparse_block(src: Source, start: int, stop: int) -> npt.NDArray[np.float64]:
    n, indptr, indices, values = src.core
    dense = np.zeros((n, stop - start), dtype=np.float64)
    lo, hi = int(indptr[start]), int(indptr[stop])
    cols = np.repeat(np.arange(stop - start), np.diff(indptr[start : stop + 1]))
    dense[indices[lo:hi], cols] = values[lo:hi]
    return dense


def _check_finite(block: npt.NDArray[np.float64], layer: str, row0: int, col0: int) -> None:
    bad = ~np.isfinite(block)
    if bad.any():
        r, c = (int(v[0]) for v in np.nonzero(bad))
        raise NonFiniteError(
            f"activations of layer {layer!r} hold {block[r, c]} at row {row0 + r}, column {col0 + c}; "
            "top inputs need finite activations"
        )


# --------------------------------------------------------------------------- inputs


def write_inputs(
    results_dir: str | os.PathLike[str],
    *,
    images: Any = None,
    texts: Sequence[str | Sequence[str]] | None = None,
    highlight: Sequence[int | None] | None = None,
) -> Path:
    """Write ``inputs/`` of `results_dir` (see the module docstring), all files or none.

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


# --------------------------------------------------------------------------- reading a results directory


@dataclass
class _Layer:
    name: str
    scores: pl.DataFrame  # this layer's rows, with a _row column (row order within the layer)


@dataclass
class _Inputs:
    kind: str
    images: npt.NDArray[Any] | None = None
    texts: list[Any] | None = None
    tokens: list[Any] | None = None

    @property
    def count(self) -> int:
        if self.images is not None:
            return int(self.images.shape[0])
        return len(self.texts or [])


def _read_info(directory: Path) -> dict[str, Any]:
    path = directory / INFO
    if not path.is_file():
        return {}
    info = _read_json(path)
    if not isinstance(info, dict):
        raise SourceError(f"{path} must hold a JSON object (title, description, layers, crowd_target)")
    for key in ("title", "description"):
        if key in info and not isinstance(info[key], str):
            raise SourceError(f"{path}: {key!r} must be a string")
    if "layers" in info and not (
        isinstance(info["layers"], dict) and all(isinstance(v, str) for v in info["layers"].values())
    ):
        raise SourceError(f"{path}: 'layers' must map layer names to descriptions (strings)")
    target = info.get("crowd_target")
    if target is not None and not (
        isinstance(target, (int, float)) and not isinstance(target, bool) and math.isfinite(target) and target > 0
    ):
        raise SourceError(f"{path}: 'crowd_target' must be a positive number; got {target!r}")
    return info


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SourceError(f"{path} is not valid JSON: {e}") from e


def _read_parquet(path: Path) -> pl.DataFrame:
    try:
        return pl.read_parquet(path)
    except Exception as e:  # polars raises many kinds; all mean the file is unreadable
        raise SourceError(f"cannot read {path}: {_one_line(e)}") from e


def _read_csv(path: Path, schema: Mapping[str, Any] | None = None) -> pl.DataFrame:
    try:
        return pl.read_csv(path, schema_overrides=schema)
    except Exception as e:  # polars raises many kinds; all mean the file is unreadable
        raise SourceError(f"cannot read {path}: {_one_line(e)}") from e


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _read_scores(directory: Path) -> tuple[pl.DataFrame, list[str]]:
    path = directory / SCORES
    if not path.is_file():
        raise FileNotFoundError(
            f"{directory} has no {SCORES}, so it is not a results directory "
            "(neuroneval score --out or python -m neuroneval.demo --out writes one)"
        )
    df = _read_parquet(path)
    missing = [c for c in ("unit", "concept") if c not in df.columns]
    if missing:
        raise SourceError(f"{path} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    metrics = [c for c in df.columns if c in METRICS]
    if not metrics:
        raise SourceError(f"{path} has no metric column (expected some of {', '.join(METRICS)})")
    for m in metrics:
        if not df.schema[m].is_numeric():
            raise SourceError(f"{path}: metric column {m!r} has type {df.schema[m]}; expected floats")
    layer = pl.col("layer").cast(pl.String) if "layer" in df.columns else pl.lit(_ONE_LAYER)
    df = df.select(
        layer.fill_null("(none)").alias("layer"),
        pl.col("unit").cast(pl.String).fill_null("(none)"),
        pl.col("concept").cast(pl.String).fill_null("(none)"),
        *[pl.col(m).cast(pl.Float64).fill_null(float("nan")) for m in metrics],
    )
    if df.height == 0:
        raise EmptyInputError(f"{path} has no rows")
    return df, metrics


def _read_sanity(directory: Path) -> pl.DataFrame | None:
    path = directory / "sanity" / "table.csv"
    if not path.is_file():
        return None
    schema = {"metric": pl.String, **{c: pl.Float64 for c in _SANITY_COLUMNS}, "passes": pl.Boolean}
    table = _read_csv(path, schema)
    missing = [c for c in schema if c not in table.columns]
    if missing:
        raise SourceError(f"{path} lacks the columns {', '.join(missing)}")
    return table.select(list(schema))


def _read_crowd(directory: Path, target: float | None) -> tuple[pl.DataFrame, pl.DataFrame, float | None] | None:
    """(rce, needed, target) of crowd/, or None without rce.csv."""
    path = directory / "crowd" / "rce.csv"
    if not path.is_file():
        return None
    schema = {"sampling": pl.String, "aggregation": pl.String, "budget": pl.Float64, "rce": pl.Float64}
    rce = _read_csv(path, {**schema, "rce_se": pl.Float64})
    missing = [c for c in schema if c not in rce.columns]
    if missing:
        raise SourceError(f"{path} lacks the columns {', '.join(missing)}")
    if "rce_se" not in rce.columns:
        rce = rce.with_columns(pl.lit(float("nan")).alias("rce_se"))
    rce = rce.select("sampling", "aggregation", "budget", "rce", "rce_se")
    needed_path = directory / "crowd" / "needed.csv"
    if needed_path.is_file():
        needed = _read_csv(needed_path, {"sampling": pl.String, "aggregation": pl.String, "needed": pl.Float64})
        if any(c not in needed.columns for c in ("sampling", "aggregation", "needed")):
            raise SourceError(f"{needed_path} must have the columns sampling, aggregation, needed")
        return rce, needed.select("sampling", "aggregation", "needed"), target
    goal = DEFAULT_CROWD_TARGET if target is None else target
    return rce, _needed(rce, goal), goal


def _needed(rce: pl.DataFrame, goal: float) -> pl.DataFrame:
    """`crowd.needed_budgets`, imported late: the report does not need the crowd module otherwise."""
    from .crowd import needed_budgets

    return needed_budgets(rce, goal)


def _read_inputs(directory: Path) -> _Inputs | None:
    meta_path = directory / "inputs" / "meta.json"
    if not meta_path.is_file():
        return None
    meta = _read_json(meta_path)
    if not isinstance(meta, dict) or meta.get("kind") not in ("image", "text") or not isinstance(meta.get("file"), str):
        raise SourceError(f'{meta_path} must be {{"kind": "image" or "text", "file": NAME}}')
    path = directory / "inputs" / meta["file"]
    if not path.is_file():
        raise FileNotFoundError(f"{path}, named in {meta_path}, does not exist")
    if meta["kind"] == "image":
        try:
            images = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as e:
            raise SourceError(f"{path} is not a .npy array: {e}") from e
        if (
            not (images.ndim == 3 or (images.ndim == 4 and images.shape[-1] in (1, 3)))
            or images.dtype.kind not in "fiu"
        ):
            raise SourceError(f"{path} must hold an (N, H, W) or (N, H, W, 3) array; got {images.shape} {images.dtype}")
        return _Inputs("image", images=images)
    texts = _read_json(path)
    if not isinstance(texts, list) or not all(
        isinstance(t, str) or (isinstance(t, list) and all(isinstance(s, str) for s in t)) for t in texts
    ):
        raise SourceError(f"{path} must hold a JSON list of strings or of token lists")
    tokens = meta.get("tokens")
    if tokens is not None and not (
        isinstance(tokens, list)
        and len(tokens) == len(texts)
        and all(t is None or (isinstance(t, int) and not isinstance(t, bool)) for t in tokens)
    ):
        raise SourceError(f"{meta_path}: 'tokens' must be a list of {len(texts)} token indices (or nulls)")
    return _Inputs("text", texts=texts, tokens=tokens)


def _read_top_inputs(directory: Path) -> pl.DataFrame | None:
    path = directory / TOP_INPUTS
    if not path.is_file():
        return None
    df = _read_parquet(path)
    missing = [c for c in ("layer", "unit", "rank", "input", "activation") if c not in df.columns]
    if missing:
        raise SourceError(f"{path} lacks the columns {', '.join(missing)}")
    return df.select(
        pl.col("layer").cast(pl.String),
        pl.col("unit").cast(pl.String),
        pl.col("rank").cast(pl.Int64),
        pl.col("input").cast(pl.Int64),
        pl.col("activation").cast(pl.Float64),
    )


# --------------------------------------------------------------------------- the page


def write_report(
    results_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    max_units: int = MAX_UNITS,
    inputs_per_unit: int = INPUTS_PER_UNIT,
) -> Path:
    """Write the page of `results_dir` to `out` (default ``results_dir/report.html``), atomically.

    Returns the path written. See `render_report` for the options.
    """
    page = render_report(results_dir, max_units=max_units, inputs_per_unit=inputs_per_unit)
    path = Path(results_dir) / "report.html" if out is None else Path(out)
    data = page.encode("utf-8")
    return write_atomic(path, lambda p: p.write_bytes(data))


def render_report(
    results_dir: str | os.PathLike[str], *, max_units: int = MAX_UNITS, inputs_per_unit: int = INPUTS_PER_UNIT
) -> str:
    """The HTML page of `results_dir` (see the module docstring for what it reads), as text.

    `max_units` caps each layer's unit table (a larger layer lists its `max_units`
    best-explained units, best first, and says so); `inputs_per_unit` caps the top inputs
    shown per unit.
    """
    for value, name in ((max_units, "max_units"), (inputs_per_unit, "inputs_per_unit")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ParameterError(f"{name} must be a positive integer; got {value!r}")
    directory = Path(results_dir)
    if not directory.exists():
        raise FileNotFoundError(f"results directory {directory} does not exist")
    if not directory.is_dir():
        raise ParameterError(f"{directory} is a file; expected a results directory (holding {SCORES})")
    scores, metrics = _read_scores(directory)
    info = _read_info(directory)
    sanity = _read_sanity(directory)
    crowd = _read_crowd(directory, info.get("crowd_target"))
    inputs = _read_inputs(directory)
    tops = _read_top_inputs(directory)
    return _Page(directory, scores, metrics, info, sanity, crowd, inputs, tops, max_units, inputs_per_unit).html()


class _Page:
    def __init__(
        self,
        directory: Path,
        scores: pl.DataFrame,
        metrics: list[str],
        info: dict[str, Any],
        sanity: pl.DataFrame | None,
        crowd: tuple[pl.DataFrame, pl.DataFrame, float | None] | None,
        inputs: _Inputs | None,
        tops: pl.DataFrame | None,
        max_units: int,
        inputs_per_unit: int,
    ) -> None:
        self.directory = directory
        self.scores = scores
        self.metrics = metrics
        self.info = info
        self.sanity = sanity
        self.crowd = crowd
        self.inputs = inputs
        self.tops = None if tops is None else tops.filter(pl.col("rank") < inputs_per_unit)
        self.max_units = max_units
        self.shown = [m for m in TRUSTWORTHY if m in metrics] or list(metrics)
        self.best_metric = "correlation" if "correlation" in metrics else metrics[0]
        self.passing_here: set[str] | None = (
            None if sanity is None else set(sanity.filter(pl.col("passes").fill_null(False))["metric"].to_list())
        )
        self.tested: set[str] = set() if sanity is None else set(sanity["metric"].to_list())
        self.layers = [
            _Layer(str(part["layer"][0]), part.with_row_index("_row"))
            for part in scores.partition_by("layer", maintain_order=True)
        ]

    # -- the whole page

    def html(self) -> str:
        title = self.info.get("title") or f"neuroneval report: {self.directory.resolve().name}"
        body = [self._header(title)]
        body += [self._layer(i, layer) for i, layer in enumerate(self.layers)]
        if self.sanity is not None:
            body.append(self._sanity())
        if self.crowd is not None:
            body.append(self._crowd())
        body.append(
            f"<footer>Written by neuroneval {_e(__version__)} (<code>neuroneval report</code>) from "
            f"<code>{_e(self.directory.resolve().name)}/</code>. This page needs no network: its images are inline."
            '<div id="image-check" data-broken="unchecked" hidden></div></footer>'
        )
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n"
            + "\n".join(body)
            + f"\n</main>\n<script>{_SCRIPT}</script>\n</body>\n</html>\n"
        )

    def _header(self, title: str) -> str:
        n_units = self.scores.select(pl.struct("layer", "unit").n_unique()).item()
        n_concepts = self.scores["concept"].n_unique()
        n_nan = sum(int(self.scores[m].is_nan().sum()) for m in self.metrics)
        description = self.info.get("description") or (
            f"Scores of explanations (concepts) of {n_units:,} units in {_count(len(self.layers), 'layer')}."
        )
        names = ", ".join(_metric_label(m) for m in TRUSTWORTHY)
        lines = [
            f"<header><h1>{_e(title)}</h1>",
            f'<p class="lead">{_paragraphs(description)}</p>',
            '<p class="metrics">A metric scores how well an explanation (a concept: which probing inputs show it, '
            f"in [0, 1]) matches a unit's activations on the same inputs; of the {len(METRICS)} of the NeuronEval "
            "paper only "
            f"{names} pass its sanity checks; {self._shown_note()}</p>",
            f"<p>{self._verdict()}</p>",
            '<ul class="facts">',
            f"<li><b>{len(self.layers):,}</b> {'layer' if len(self.layers) == 1 else 'layers'}</li>",
            f"<li><b>{n_units:,}</b> units</li><li><b>{n_concepts:,}</b> concepts</li>",
            f"<li><b>{self.scores.height:,}</b> scored pairs</li>",
            f"<li><b>{len(self.metrics)}</b> metrics in {SCORES}</li>",
            f"<li><b>{n_nan:,}</b> undefined (NaN) scores</li></ul>",
            "<nav><span>Contents:</span> "
            + " ".join(
                f'<a href="#{self._anchor(i, layer.name)}">{_e(layer.name)}</a>' for i, layer in enumerate(self.layers)
            )
            + (' <a href="#sanity">sanity checks</a>' if self.sanity is not None else "")
            + (' <a href="#crowd">crowd simulation</a>' if self.crowd is not None else "")
            + "</nav>",
            self._definitions(),
            "</header>",
        ]
        return "\n".join(lines)

    def _shown_note(self) -> str:
        trusted = [m for m in TRUSTWORTHY if m in self.metrics]
        if not trusted:
            return f"{SCORES} has none of them, so this page shows all its metrics."
        if len(trusted) == len(TRUSTWORTHY):
            return "this page shows those."
        return f"this page shows those in {SCORES}: {', '.join(_metric_label(m) for m in trusted)}."

    def _verdict(self) -> str:
        paper = ", ".join(_metric_label(m) for m in TRUSTWORTHY)
        if self.sanity is None or self.passing_here is None:
            return (
                f"No sanity checks in this directory (<code>sanity/table.csv</code>); the paper's verdict: "
                f"{paper} pass."
            )
        tested = self.sanity["metric"].to_list()
        passing = [m for m in tested if m in self.passing_here]
        listed = ", ".join(f'<span class="pass">{_e(m)}</span>' for m in passing) or "none"
        failing = [m for m in TRUSTWORTHY if m in tested and m not in self.passing_here]
        note = (
            f" Of the paper's five, {', '.join(_e(m) for m in failing)} "
            f"{'fails' if len(failing) == 1 else 'fail'} here (marked &dagger; below)."
            if failing
            else ""
        )
        return (
            f'<b>Passing the sanity checks here</b> (<a href="#sanity">below</a>; Decrease Acc &ge; '
            f"{_PASS_LEVEL:g}% in every test): {listed} ({len(passing)} of {len(tested)} tested).{note}"
        )

    def _definitions(self) -> str:
        rows = "".join(
            f"<tr><td><code>{_e(m)}</code></td><td>{_e(METRICS[m].description)}</td><td>{_range(m)}</td></tr>"
            for m in self.shown
        )
        return (
            "<details><summary>What the metrics shown compute</summary><p>For a unit's activations <i>a</i> over "
            "the N probing inputs, an explanation's concept vector <i>c</i>; <i>b</i> = the unit's top-alpha inputs, "
            "<i>y</i> = <i>c</i> &ge; 0.5. NaN: undefined (e.g. no positive label).</p>"
            f'<table class="plain"><tr><th>metric</th><th>definition</th><th>range</th></tr>{rows}</table></details>'
        )

    def _anchor(self, i: int, name: str) -> str:
        return f"layer-{i}-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:40] or "x")

    def _mark(self, m: str) -> str:
        """The metric's column name, with a dagger when it fails this directory's sanity checks."""
        fails = self.passing_here is not None and self.sanity is not None
        fails = fails and m in self.tested and m not in (self.passing_here or set())
        return _e(m) + ('<span title="fails the sanity checks here"> &dagger;</span>' if fails else "")

    # -- a layer

    def _layer(self, i: int, layer: _Layer) -> str:
        df = layer.scores
        units = df["unit"].unique(maintain_order=True)
        n_units, n_concepts = units.len(), df["concept"].n_unique()
        best_m = self.best_metric
        ranked = (
            df.filter(pl.col(best_m).is_not_nan())
            .sort([best_m, "_row"], descending=[True, False])
            .with_columns(pl.int_range(pl.len()).over("unit").alias("_k"))
            .filter(pl.col("_k") < 2)
        )
        best = ranked.filter(pl.col("_k") == 0)
        second = {r["unit"]: r for r in ranked.filter(pl.col("_k") == 1).iter_rows(named=True)}
        capped = n_units > self.max_units
        if capped:
            shown_units = best["unit"].head(self.max_units).to_list()
        else:
            shown_units = units.to_list()
        best_rows = {r["unit"]: r for r in best.filter(pl.col("unit").is_in(shown_units)).iter_rows(named=True)}

        description = (self.info.get("layers") or {}).get(layer.name)
        parts = [
            f'<section class="layer" id="{self._anchor(i, layer.name)}">',
            f"<h2>{_e(layer.name)} <small>{n_units:,} units &times; {n_concepts:,} concepts</small></h2>",
        ]
        if description:
            parts.append(f'<p class="desc">{_paragraphs(description)}</p>')
        parts.append(self._histograms(df))
        undefined = n_units - best.height
        note = f"Each unit's best explanation is its concept with the highest <b>{_e(best_m)}</b>"
        note += " (NaN ignored, ties to the first)."
        if undefined:
            note += (
                f" {_count(undefined, 'unit')} {'has' if undefined == 1 else 'have'} no defined {_e(best_m)} at all."
            )
        if capped:
            note += (
                f' <span class="cap">Showing the {len(shown_units):,} best-explained of {n_units:,} units, best first; '
                f"every unit's scores are in <code>{SCORES}</code>.</span>"
            )
        parts.append(f'<p class="note">{note}</p>')
        parts.append(self._unit_table(layer.name, shown_units, best_rows, second))
        parts.append("</section>")
        return "\n".join(parts)

    def _histograms(self, df: pl.DataFrame) -> str:
        per_unit = df.group_by("unit").agg([pl.col(m).fill_nan(None).max() for m in self.shown])
        figures = []
        for m in self.shown:
            col = df[m].to_numpy()
            values = col[~np.isnan(col)]
            unit_best = per_unit[m].drop_nulls().to_numpy().astype(np.float64)
            nan = int(col.size - values.size)
            figures.append(_histogram_svg(m, values, unit_best, nan, self._mark(m)))
        legend = (
            '<div class="legend"><span class="sw all"></span> all (unit, concept) pairs '
            '<span class="sw best"></span> each unit\'s best score under the metric'
            " &middot; heights: share of each group per bin</div>"
        )
        return f'<div class="hists">{legend}{"".join(figures)}</div>'

    def _unit_table(
        self, layer: str, units: list[str], best: dict[str, dict[str, Any]], second: dict[str, dict[str, Any]]
    ) -> str:
        tops = self._tops_for(layer, units) if self.tops is not None else {}
        with_inputs = bool(tops)
        missing = ""
        if self.tops is not None and not tops:
            missing = (
                f'<p class="note">{TOP_INPUTS} lists no inputs for the units shown here (its layer and unit '
                f"values must equal those of {SCORES}).</p>"
            )
        head = "".join(f'<th class="num">{self._mark(m)}</th>' for m in self.shown)
        rows = []
        for u in units:
            row = best.get(u)
            if row is None:
                cells = (
                    f'<td class="concept" data-best=""><span class="nan">no defined {_e(self.best_metric)}</span></td>'
                )
                cells += '<td class="num"><span class="nan">&ndash;</span></td>' * len(self.shown)
            else:
                nxt = second.get(u)
                runner = (
                    f'<div class="next">next: {_e(nxt["concept"])} ({_number(nxt[self.best_metric])})</div>'
                    if nxt is not None
                    else ""
                )
                cells = f'<td class="concept" data-best="{_e(row["concept"])}"><b>{_e(row["concept"])}</b>{runner}</td>'
                cells += "".join(_score_cell(m, row[m]) for m in self.shown)
            if with_inputs:
                cells += f'<td class="tops">{tops.get(u, "")}</td>'
            rows.append(f'<tr data-unit="{_e(u)}"><th class="unit">{_e(u)}</th>{cells}</tr>')
        inputs_head = "<th>top-activating inputs (highest first)</th>" if with_inputs else ""
        return (
            f'<div class="scroll"><table class="units"><thead><tr><th>unit</th>'
            f"<th>best explanation (by {_e(self.best_metric)})</th>{head}{inputs_head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>{missing}"
        )

    def _tops_for(self, layer: str, units: list[str]) -> dict[str, str]:
        assert self.tops is not None
        rows = self.tops.filter((pl.col("layer") == layer) & pl.col("unit").is_in(units)).sort("unit", "rank")
        if self.inputs is not None and rows.height:
            highest = int(rows["input"].max())  # type: ignore[arg-type]
            lowest = int(rows["input"].min())  # type: ignore[arg-type]
            if lowest < 0 or highest >= self.inputs.count:
                bad = lowest if lowest < 0 else highest
                raise SourceError(
                    f"{self.directory / TOP_INPUTS} names input {bad} of layer {layer!r}, but inputs/ holds "
                    f"{self.inputs.count:,} inputs (0..{self.inputs.count - 1})"
                )
        out: dict[str, list[str]] = {}
        for unit, index, activation in rows.select("unit", "input", "activation").iter_rows():
            label = f"input {index:,}: activation {_number(activation, 4, markup=False)}"
            out.setdefault(unit, []).append(self._input(index, label))
        return {u: "".join(v) for u, v in out.items()}

    def _input(self, index: int, label: str) -> str:
        if self.inputs is None:
            return f'<span class="chip" title="{_e(label)}">#{index:,}</span>'
        if self.inputs.images is not None:
            uri = _png_uri(np.asarray(self.inputs.images[index]))
            return f'<img class="input" src="{uri}" alt="{_e(label)}" title="{_e(label)}">'
        texts, tokens = self.inputs.texts or [], self.inputs.tokens
        mark = None if tokens is None else tokens[index]
        return f'<div class="snippet" title="{_e(label)}">{_snippet(texts[index], mark)}</div>'

    # -- sanity checks and crowd simulation

    def _sanity(self) -> str:
        assert self.sanity is not None
        head = "".join(f'<th class="num">{c.replace("_", " ")}</th>' for c in _SANITY_COLUMNS)
        rows = []
        for r in self.sanity.iter_rows(named=True):
            cells = []
            for c in _SANITY_COLUMNS:
                v = r[c]
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    cells.append('<td class="num na">&ndash;</td>')
                else:
                    cells.append(f'<td class="num {"ok" if v >= _PASS_LEVEL else "bad"}">{v:.1f}</td>')
            passes = bool(r["passes"])
            verdict = f'<td class="verdict {"ok" if passes else "bad"}">{"pass" if passes else "fail"}</td>'
            info = METRICS.get(r["metric"])
            paper = "" if info is None else ("pass" if info.passes_sanity else "fail")
            rows.append(
                f'<tr data-metric="{_e(r["metric"])}" data-passes="{str(passes).lower()}">'
                f'<th class="metric">{_e(r["metric"])}</th>{"".join(cells)}{verdict}'
                f'<td class="paper">{paper}</td></tr>'
            )
        chart = self._file_image(self.directory / "sanity" / "chart.png", "the sanity checks' Decrease Acc per metric")
        return (
            '<section id="sanity"><h2>Sanity checks</h2><p>Decrease Acc (%): how often a metric scores a unit\'s '
            "correct concept above the same concept with half its labels missing (too specific) or as many wrong "
            f"labels added (too general). A metric passes when every cell is &ge; {_PASS_LEVEL:g}.</p>"
            f'<div class="scroll"><table class="sanity" id="sanity-table"><thead><tr><th>metric</th>{head}'
            f"<th>verdict here</th><th>paper's verdict</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
            f"{chart}</section>"
        )

    def _crowd(self) -> str:
        assert self.crowd is not None
        rce, needed, target = self.crowd
        last = rce.sort("budget").group_by("sampling", "aggregation", maintain_order=True).last()
        at_last = {(r["sampling"], r["aggregation"]): r for r in last.iter_rows(named=True)}
        rows = []
        for r in needed.iter_rows(named=True):
            key = (r["sampling"], r["aggregation"])
            n = r["needed"]
            shown = f"{n:,.0f}" if n is not None and math.isfinite(n) else "never on this grid"
            end = at_last.get(key)
            end_text = (
                f"{_number(end['rce'])} &plusmn; {_number(end['rce_se'])} at {end['budget']:,.0f}"
                if end is not None
                else "&ndash;"
            )
            rows.append(
                f'<tr><th class="metric">{_e(_configuration(*key))}</th><td class="num">{shown}</td>'
                f'<td class="num">{end_text}</td></tr>'
            )
        goal = f"RCE &le; {target:g}" if target is not None else "the target RCE"
        png = self.directory / "crowd" / "rce.png"
        chart = (
            self._file_image(png, "relative correlation error against ratings per pair")
            if png.is_file()
            else _rce_svg(rce, target)
        )
        return (
            '<section id="crowd"><h2>Crowd simulation</h2><p>Estimating correlation from a few noisy human ratings '
            "per (unit, explanation) pair: the relative correlation error (RCE) of each configuration against the "
            "ratings per pair, with simulated raters.</p>"
            f'<table class="crowd" id="crowd-table"><thead><tr><th>configuration</th><th class="num">ratings per pair '
            f'to reach {goal}</th><th class="num">RCE at the largest budget</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>{chart}</section>"
        )

    def _file_image(self, path: Path, alt: str) -> str:
        if not path.is_file():
            return ""
        data = path.read_bytes()
        if not data.startswith(b"\x89PNG\r\n\x1a\n"):
            raise SourceError(f"{path} is not a PNG image")
        uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        return (
            f'<figure class="chart"><img src="{uri}" alt="{_e(alt)}"><figcaption>{_e(path.name)}</figcaption></figure>'
        )


# --------------------------------------------------------------------------- pieces


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _paragraphs(text: str) -> str:
    return "<br>".join(_e(line) for line in text.strip().splitlines())


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _metric_label(m: str) -> str:
    return {"auprc": "AUPRC", "f1": "F1", "iou": "IoU"}.get(m, m)


def _range(m: str) -> str:
    r = METRICS[m].value_range
    return "data-dependent" if r is None else f"[{r[0]:g}, {r[1]:g}]"


def _configuration(sampling: str, aggregation: str) -> str:
    s = {"mgis": "MG-IS", "uniform": "uniform"}.get(sampling, sampling)
    a = {"bragg": "BRAgg"}.get(aggregation, aggregation)
    return f"{s} + {a}"


def _number(v: Any, digits: int = 3, *, markup: bool = True) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return '<span class="nan">NaN</span>' if markup else "NaN"
    return f"{v:.{digits}f}"


def _score_cell(m: str, v: float) -> str:
    if v is None or math.isnan(v):
        return '<td class="num"><span class="nan" title="undefined">NaN</span></td>'
    r = METRICS[m].value_range
    if r is None:
        return f'<td class="num">{v:.3f}</td>'
    share = min(1.0, max(0.0, v / r[1]))  # a bar under the number for its positive part
    return f'<td class="num"><span class="bar" style="background-size:{100 * share:.0f}% 3px">{v:.3f}</span></td>'


def _snippet(row: str | list[str], mark: int | None) -> str:
    if isinstance(row, str):
        if mark is None:
            text = row if len(row) <= _TEXT_CHARS else row[: _TEXT_CHARS - 1] + "\u2026"
            return _e(text)
        words = row.split()
        tokens = [w + " " for w in words[:-1]] + words[-1:]
    else:
        tokens = list(row)
        if mark is None:
            text = "".join(tokens)
            return _e(text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 1] + "\u2026")
    if not 0 <= mark < len(tokens):
        return _e("".join(tokens)[:_TEXT_CHARS])
    lo, hi = max(0, mark - _TEXT_WINDOW), min(len(tokens), mark + _TEXT_WINDOW + 1)
    before = ("\u2026" if lo > 0 else "") + "".join(tokens[lo:mark])
    after = "".join(tokens[mark + 1 : hi]) + ("\u2026" if hi < len(tokens) else "")
    token = tokens[mark]
    word = token.strip()  # a token's own spaces stay outside the mark
    lead = token[: len(token) - len(token.lstrip())]
    trail = token[len(token.rstrip()) :]
    return f"{_e(before + lead)}<mark>{_e(word)}</mark>{_e(trail + after)}"


def _png_uri(image: npt.NDArray[Any]) -> str:
    """A small PNG of one image ((H, W) or (H, W, 1|3), floats in [0, 1] or uint8), resized
    by integer factors: nearest-neighbour up to IMAGE_MIN_SIDE, block means down to IMAGE_MAX_SIDE."""
    a = np.asarray(image)
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    if a.dtype.kind in "ui" and a.dtype.itemsize == 1:
        a = a.astype(np.float64) / 255.0
    a = np.nan_to_num(np.asarray(a, dtype=np.float64), nan=0.0, posinf=1.0, neginf=0.0)
    side = max(a.shape[0], a.shape[1])
    if side > IMAGE_MAX_SIDE:
        f = math.ceil(side / IMAGE_MAX_SIDE)
        h, w = (a.shape[0] // f) * f, (a.shape[1] // f) * f
        a = a[:h, :w].reshape(h // f, f, w // f, f, *a.shape[2:]).mean(axis=(1, 3))
    elif side < IMAGE_MIN_SIDE:
        f = math.ceil(IMAGE_MIN_SIDE / side)
        a = np.repeat(np.repeat(a, f, axis=0), f, axis=1)
    pixels = np.round(np.clip(a, 0.0, 1.0) * 255.0).astype(np.uint8)
    return "data:image/png;base64," + base64.b64encode(_png(pixels)).decode("ascii")


def _png(pixels: npt.NDArray[np.uint8]) -> bytes:
    """An 8-bit grey (H, W) or RGB (H, W, 3) PNG."""
    h, w = pixels.shape[:2]
    colour = 0 if pixels.ndim == 2 else 2
    raw = np.zeros((h, 1 + w * (1 if colour == 0 else 3)), dtype=np.uint8)  # filter byte 0 per row
    raw[:, 1:] = pixels.reshape(h, -1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
        + chunk(b"IEND", b"")
    )


_BINS = 24


def _histogram_svg(
    m: str, values: npt.NDArray[np.float64], unit_best: npt.NDArray[np.float64], nan: int, label: str
) -> str:
    w, h, left, right, top, bottom = 232, 96, 6, 6, 4, 16
    pw, ph = w - left - right, h - top - bottom
    r = METRICS[m].value_range
    if r is not None:
        lo, hi = r
    else:
        both = np.concatenate([values, unit_best])
        lo, hi = (float(both.min()), float(both.max())) if both.size else (0.0, 1.0)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, _BINS + 1)

    def shares(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        if v.size == 0:
            return np.zeros(_BINS)
        counts, _ = np.histogram(np.clip(v, lo, hi), bins=edges)
        return counts / v.size

    all_share, best_share = shares(values), shares(unit_best)
    top_share = max(float(all_share.max()), float(best_share.max())) or 1.0
    bw = pw / _BINS
    shapes = []
    for share, cls, inset in ((all_share, "all", 0.5), (best_share, "best", bw * 0.28)):
        for j, s in enumerate(share):
            if s <= 0:
                continue
            bh = max(0.8, ph * s / top_share)
            x = left + j * bw + inset
            shapes.append(
                f'<rect class="{cls}" x="{x:.1f}" y="{top + ph - bh:.1f}" width="{bw - 2 * inset:.1f}" height="{bh:.1f}"/>'
            )
    ticks = []
    for t, anchor in ((lo, "start"), ((lo + hi) / 2, "middle"), (hi, "end")):
        x = left + pw * (t - lo) / (hi - lo)
        ticks.append(f'<text x="{x:.1f}" y="{h - 3}" text-anchor="{anchor}">{t:.3g}</text>')
    if lo < 0 < hi:
        x0 = left + pw * (0 - lo) / (hi - lo)
        shapes.append(f'<line class="zero" x1="{x0:.1f}" y1="{top}" x2="{x0:.1f}" y2="{top + ph}"/>')
    empty = (
        f'<text x="{w / 2}" y="{top + ph / 2}" text-anchor="middle">no defined values</text>'
        if values.size == 0
        else ""
    )
    med_all = f"{float(np.median(values)):.3f}" if values.size else "NaN"
    med_best = f"{float(np.median(unit_best)):.3f}" if unit_best.size else "NaN"
    summary = f"{m}: median {med_all} over {values.size:,} pairs, median best {med_best} over {unit_best.size:,} units"
    svg = (
        f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{_e(summary)}">'
        f"<title>{_e(summary)}</title>"
        f'<line class="axis" x1="{left}" y1="{top + ph + 0.5}" x2="{w - right}" y2="{top + ph + 0.5}"/>'
        + "".join(shapes)
        + "".join(ticks)
        + empty
        + "</svg>"
    )
    nan_text = f" &middot; {nan:,} NaN" if nan else ""
    caption = f"median {med_all}, best per unit {med_best}{nan_text}"
    return f'<figure class="hist"><div class="mname">{label}</div>{svg}<figcaption>{caption}</figcaption></figure>'


_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _rce_svg(rce: pl.DataFrame, target: float | None) -> str:
    """RCE against budget (log x), one line per configuration: the page's chart without rce.png."""
    data = rce.filter(pl.col("budget") > 0)
    if data.height == 0:
        return ""
    w, h, left, right, top, bottom = 640, 300, 52, 190, 12, 40
    pw, ph = w - left - right, h - top - bottom
    x_lo, x_hi = math.log10(float(data["budget"].min())), math.log10(float(data["budget"].max()))  # type: ignore[arg-type]
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
    finite = data["rce"].fill_nan(None).drop_nulls()
    y_hi = max([float(finite.max()) if finite.len() else 1.0, target or 0.0]) * 1.05  # type: ignore[arg-type]
    y_hi = y_hi or 1.0

    def xy(budget: float, value: float) -> tuple[float, float]:
        return (
            left + pw * (math.log10(budget) - x_lo) / (x_hi - x_lo),
            top + ph - ph * min(max(value, 0.0), y_hi) / y_hi,
        )

    parts = [
        f'<line class="axis" x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}"/>',
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}"/>',
    ]
    for e in range(math.floor(x_lo), math.ceil(x_hi) + 1):
        if x_lo - 1e-9 <= e <= x_hi + 1e-9:
            x, _ = xy(10.0**e, 0)
            parts.append(f'<text x="{x:.1f}" y="{top + ph + 14}" text-anchor="middle">{10**e:,}</text>')
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        _, y = xy(10**x_lo, y_hi * frac)
        parts.append(f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end">{y_hi * frac:.2f}</text>')
    parts.append(
        f'<text x="{left + pw / 2}" y="{h - 6}" text-anchor="middle">ratings per (unit, explanation) pair</text>'
    )
    if target is not None:
        _, y = xy(10**x_lo, target)
        parts.append(f'<line class="target" x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}"/>')
        parts.append(f'<text x="{left + pw + 8}" y="{y + 3:.1f}">target {target:g}</text>')
    for j, ((sampling, method), group) in enumerate(data.group_by("sampling", "aggregation", maintain_order=True)):
        colour = _COLOURS[j % len(_COLOURS)]
        group = group.sort("budget").filter(pl.col("rce").is_not_nan())
        points = " ".join("{:.1f},{:.1f}".format(*xy(b, v)) for b, v in group.select("budget", "rce").iter_rows())
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{points}"/>')
        ly = top + 14 + 18 * j
        parts.append(
            f'<line x1="{left + pw + 8}" y1="{ly}" x2="{left + pw + 26}" y2="{ly}" stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{left + pw + 30}" y="{ly + 4}">{_e(_configuration(sampling, method))}</text>')
    return (
        f'<figure class="chart"><svg class="rce" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        f'aria-label="relative correlation error against ratings per pair">{"".join(parts)}</svg>'
        "<figcaption>relative correlation error (mean over pairs and trials)</figcaption></figure>"
    )


_CSS = """
:root{--ink:#1d2330;--muted:#5d6677;--line:#dfe3ea;--bg:#f6f7f9;--ok:#1b7a3a;--okbg:#e2f3e6;--bad:#b42318;--badbg:#fde7e4}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
main{max-width:1360px;margin:0 auto;padding:24px 28px 40px}
header,section{background:#fff;border:1px solid var(--line);border-radius:10px;padding:18px 22px;margin:0 0 18px}
h1{font-size:24px;margin:0 0 6px}h2{font-size:19px;margin:0 0 8px}h2 small{font-weight:400;color:var(--muted);font-size:14px;margin-left:6px}
p{margin:6px 0}.lead{font-size:15px}.metrics,.note,.desc{color:var(--muted)}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f1f3f6;padding:0 3px;border-radius:3px}
a{color:#1f5fbf}nav{margin:10px 0 4px}nav a{margin-right:10px}nav span{color:var(--muted);margin-right:6px}
.facts{list-style:none;padding:0;margin:10px 0;display:flex;flex-wrap:wrap;gap:8px}
.facts li{background:#f1f4f9;border-radius:14px;padding:2px 11px;color:var(--muted)}.facts b{color:var(--ink)}
.pass{color:var(--ok);font-weight:600}
details{margin-top:8px}summary{cursor:pointer;color:#1f5fbf}
table{border-collapse:collapse}th,td{padding:4px 8px;text-align:left;vertical-align:middle}
table.plain td,table.plain th{border-bottom:1px solid var(--line)}
.scroll{overflow-x:auto}
table.units,table.sanity,table.crowd{font-size:13px;margin-top:8px}table.units,table.sanity{width:100%}
table.units thead th,table.sanity thead th,table.crowd thead th{position:sticky;top:0;background:#fff;border-bottom:2px solid var(--line);font-weight:600;white-space:nowrap}
table.units tbody tr,table.sanity tbody tr,table.crowd tbody tr{border-bottom:1px solid var(--line)}
table.units tbody tr:nth-child(even){background:#fafbfc}
th.unit,th.metric{font-weight:600;white-space:nowrap;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.bar{display:inline-block;min-width:46px;padding-bottom:3px;background-image:linear-gradient(#7fa8d8,#7fa8d8);background-repeat:no-repeat;background-position:left bottom}
td.concept{min-width:130px}.next{color:var(--muted);font-size:12px}
.nan{color:#9aa3b2;font-style:italic}
td.tops{min-width:420px}
img.input{width:48px;height:48px;object-fit:contain;image-rendering:pixelated;border:1px solid var(--line);border-radius:3px;margin:1px;background:#000;vertical-align:middle}
.snippet{font-size:12.5px;line-height:1.35;padding:2px 0;border-bottom:1px dotted var(--line);max-width:640px}
.snippet:last-child{border-bottom:0}
mark{background:#ffe08a;padding:0 2px;border-radius:2px}
.chip{display:inline-block;background:#eef1f6;border-radius:3px;padding:0 5px;margin:1px;font-size:12px}
.hists{display:flex;flex-wrap:wrap;gap:6px 14px;align-items:flex-start;margin:8px 0}
.legend{flex-basis:100%;color:var(--muted);font-size:12px}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;vertical-align:-1px;margin-left:8px}
.sw.all,rect.all{background:#b9d3ee;fill:#b9d3ee}.sw.best,rect.best{background:#1f4e8c;fill:#1f4e8c}
figure{margin:0}figure.hist{width:232px}.mname{font-weight:600;font-size:13px}
figure.hist figcaption{font-size:11.5px;color:var(--muted)}
svg text{font-size:10px;fill:#5d6677;font-family:system-ui,sans-serif}
svg line.axis{stroke:#9aa3b2;stroke-width:1}svg line.zero{stroke:#c3c9d4;stroke-dasharray:2 2}
svg line.target{stroke:#222;stroke-dasharray:5 4}svg.rce text{font-size:11px}
figure.chart{margin-top:14px}figure.chart img{max-width:100%;height:auto;border:1px solid var(--line);border-radius:6px}
figure.chart figcaption{color:var(--muted);font-size:12px}
td.ok{background:var(--okbg);color:var(--ok)}td.bad{background:var(--badbg);color:var(--bad)}td.na{color:#9aa3b2}
td.verdict{font-weight:700;text-align:center}td.paper{color:var(--muted);text-align:center}
.cap{color:#8a5a00}
#image-check{margin-top:8px;color:var(--bad);font-weight:600}
footer{color:var(--muted);font-size:12px;padding:4px 4px 0}
"""

# Counts images that did not load (a broken data URI) into #image-check; logs nothing.
_SCRIPT = """
window.addEventListener("load", function () {
  var images = document.images, broken = 0;
  for (var i = 0; i < images.length; i++) {
    if (!images[i].complete || images[i].naturalWidth === 0) broken++;
  }
  var check = document.getElementById("image-check");
  check.setAttribute("data-broken", String(broken));
  check.setAttribute("data-images", String(images.length));
  if (broken > 0) {
    check.hidden = false;
    check.textContent = broken + " of " + images.length + " images failed to load";
  }
});
"""
