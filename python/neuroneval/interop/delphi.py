"""delphi's files: latent caches, explanations and scorer outputs, read where delphi writes them.

A delphi run (EleutherAI's `delphi`) leaves, per hookpoint (a module path such as
``layers.6.mlp``):

- ``latents/{hookpoint}/{start}_{end}.safetensors``: the latent cache, split by latent range
  (`end` inclusive). Each file holds ``locations`` (n, 3) unsigned integers (sequence,
  position, latent - start), ``activations`` (n,) float16 and, usually, ``tokens``
  (sequences, context) of the token ids; ``config.json`` beside them records the run
  (delphi's ``CacheConfig``: ``cache_ctx_len``, ``n_splits``, ... and ``model_name``).
- ``explanations/{hookpoint}_latent{i}.txt``: one explanation, a JSON string.
- ``scores/{scorer}/{hookpoint}_latent{i}.txt``: a JSON list of the scorer's examples
  (``str_tokens``, ``activations``, ``distance``, ``activating``, ``prediction``,
  ``probability``, ``correct``), as the detection and fuzz scorers write them; the simulation
  scorer's ``scores/simulation`` holds neuron-explainer ScoredSimulations instead, read by
  `neuroneval.interop.read_scored_simulations`.

`read_delphi_cache` turns a cache into a sparse activation source (row = sequence x context
+ position, column = latent) without densifying it: two passes over each file in bounded
chunks (count each latent's entries, then place them), so memory holds the result (an
int64 row index and the stored value per entry) plus one chunk. `write_delphi_cache` writes
the same layout from a sparse or dense matrix, as delphi's ``save_splits`` and
``save_config`` do. Every JSON value read is checked against the type delphi writes there.

Examples
--------
>>> import tempfile, numpy as np
>>> from pathlib import Path
>>> from neuroneval.interop.delphi import read_delphi_cache, write_delphi_cache
>>> acts = np.zeros((2 * 4, 6), dtype=np.float32)   # 2 sequences of 4 tokens, 6 latents
>>> acts[1, 0], acts[5, 0], acts[6, 4] = 1.5, 2.0, 0.5
>>> d = tempfile.mkdtemp()
>>> _ = write_delphi_cache(d, acts, tokens=np.arange(8).reshape(2, 4), n_splits=2)
>>> sorted(p.name for p in Path(d).glob("*.safetensors"))
['0_2.safetensors', '3_5.safetensors']
>>> cache = read_delphi_cache(d)
>>> cache.activations.shape, cache.activations.kind
((8, 6), 'sparse')
>>> cache.activations.dense([0, 4]).T.tolist()
[[0.0, 1.5, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0]]
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from .. import _core
from .._coerce import check_integer
from ..errors import EmptyInputError, ParameterError, ShapeError, SourceError
from ..files import read_json, write_files_atomic
from ..sources import Source, register_directory_reader
from ._fields import json_bool, json_float_list, json_int, json_number, json_string_list

__all__ = [
    "DelphiCache",
    "read_delphi_cache",
    "read_delphi_explanations",
    "read_delphi_scores",
    "delphi_score_summary",
    "write_delphi_cache",
    "write_delphi_explanations",
]

CHUNK_ENTRIES = 1 << 22  # entries read at a time (about 32 MiB of locations and values)
_SPLIT_NAME = re.compile(r"^(\d+)_(\d+)\.safetensors$")
_LATENT_FILE = re.compile(r"^(?P<module>.+)_latent(?P<latent>\d+)\.txt$")
_INTEGER_DTYPES = {"U8", "U16", "U32", "U64", "I8", "I16", "I32", "I64"}  # safetensors' dtype names
_EXAMPLE_FIELDS = ("str_tokens", "activations", "distance", "activating", "prediction", "probability", "correct")


@dataclass(frozen=True)
class DelphiCache:
    """One hookpoint's delphi latent cache, read as a sparse (inputs x latents) source.

    Attributes
    ----------
    activations : neuroneval.sources.Source
        Sparse CSC source of shape (n_sequences * ctx_len, width): row ``s * ctx_len + p``
        is token `p` of sequence `s`; absent entries are zeros. Its values keep the file's
        dtype (float16 for delphi's splits).
    tokens : numpy.ndarray or None
        The (n_sequences, ctx_len) token ids, when the cache saved them.
    n_sequences, ctx_len, width : int
    splits : tuple of (start, end)
        The latent range of each file, `end` inclusive, in order.
    config : dict or None
        ``config.json`` beside the splits (delphi's cache configuration), when present.
    directory : pathlib.Path
    """

    activations: Source
    tokens: npt.NDArray[np.int64] | None
    n_sequences: int
    ctx_len: int
    width: int
    splits: tuple[tuple[int, int], ...]
    config: dict[str, Any] | None
    directory: Path

    @property
    def hookpoint(self) -> str:
        """The hookpoint (module path) the cache belongs to: its directory's name."""
        return self.directory.name

    def row(self, sequence: int, position: int) -> int:
        """The activation row of token `position` of `sequence`."""
        if not (0 <= sequence < self.n_sequences and 0 <= position < self.ctx_len):
            raise ShapeError(
                f"(sequence {sequence}, position {position}) is outside {self.n_sequences} x {self.ctx_len}"
            )
        return sequence * self.ctx_len + position


# --------------------------------------------------------------------------- the latent cache


@contextmanager
def _opened(path: Path) -> Iterator[Any]:
    """The file's safetensors handle; its memory map is released on leaving, so only the file
    being read is mapped (its touched pages count as resident while it is)."""
    from safetensors import safe_open

    try:
        handle = safe_open(str(path), framework="numpy")
    except Exception as e:  # safetensors raises its own error types for a bad header
        raise SourceError(f"{path} is not a readable safetensors file (truncated or corrupt?): {e}") from e
    with handle as f:
        yield f


def _tensor_slice(f: Any, path: Path, key: str) -> Any:
    try:
        return f.get_slice(key)
    except Exception as e:
        raise SourceError(f"{path}: cannot read the '{key}' tensor: {e}") from e


class _Split:
    """One split file: its tensors' shapes checked at once, its entries read in chunks."""

    def __init__(self, path: Path, start: int, end: int) -> None:
        self.path, self.start, self.end = path, start, end
        with _opened(path) as f:
            keys = set(f.keys())
            for key in ("locations", "activations"):
                if key not in keys:
                    raise SourceError(f"{path} has no '{key}' tensor; a delphi split holds locations and activations")
            locations, values = _tensor_slice(f, path, "locations"), _tensor_slice(f, path, "activations")
            loc_shape, val_shape = tuple(locations.get_shape()), tuple(values.get_shape())
            loc_dtype, self.value_dtype = locations.get_dtype(), values.get_dtype()
        if len(loc_shape) != 2 or loc_shape[1] != 3:
            raise SourceError(f"{path}: locations must have shape (n, 3); got {loc_shape}")
        if val_shape != (loc_shape[0],):
            raise SourceError(f"{path}: activations have shape {val_shape}, locations {loc_shape}; they must agree")
        if loc_dtype.upper() not in _INTEGER_DTYPES:
            raise SourceError(f"{path}: locations must be integers; they are {loc_dtype}")
        if self.value_dtype.upper() not in ("F16", "F32", "F64", "BF16"):
            raise SourceError(f"{path}: activations must be floats; they are {self.value_dtype}")
        self.n = int(loc_shape[0])
        self.has_tokens = "tokens" in keys

    def tokens(self) -> npt.NDArray[Any]:
        with _opened(self.path) as f:
            try:
                t = np.asarray(f.get_tensor("tokens"))
            except Exception as e:
                raise SourceError(f"{self.path}: cannot read the 'tokens' tensor: {e}") from e
        if t.ndim != 2 or not np.issubdtype(t.dtype, np.integer):
            raise SourceError(f"{self.path}: tokens must be a 2-D integer array; got {t.dtype} {t.shape}")
        return t

    def chunks(self) -> Iterator[tuple[npt.NDArray[Any], npt.NDArray[Any]]]:
        """(locations, values) chunks of at most CHUNK_ENTRIES entries, in file order, copied
        out of the map. The file is mapped anew for each chunk, so that the pages resident at
        once are one chunk's, not the file's."""
        for lo in range(0, self.n, CHUNK_ENTRIES):
            hi = min(lo + CHUNK_ENTRIES, self.n)
            with _opened(self.path) as f:
                locations, values = _tensor_slice(f, self.path, "locations"), _tensor_slice(f, self.path, "activations")
                try:
                    loc, val = np.array(locations[lo:hi]), np.array(values[lo:hi])
                except Exception as e:  # a short file fails here, not at open
                    raise SourceError(f"{self.path}: entries {lo}..{hi} cannot be read (truncated file?): {e}") from e
            yield loc, val


def _split_files(directory: Path) -> list[tuple[int, int, Path]]:
    if not directory.is_dir():
        raise SourceError(f"no delphi latent cache at {directory}: not a directory")
    found = []
    for p in directory.iterdir():
        m = _SPLIT_NAME.match(p.name)
        if m:
            found.append((int(m.group(1)), int(m.group(2)), p))
    if not found:
        inner = sorted(d.name for d in directory.iterdir() if d.is_dir() and any(d.glob("*_*.safetensors")))
        hint = f"; it holds the hookpoints {inner}: give one of those directories" if inner else ""
        raise SourceError(f"{directory} holds no delphi split files ({{start}}_{{end}}.safetensors){hint}")
    found.sort()
    expected = 0
    for start, end, p in found:
        if end < start:
            raise SourceError(f"{p}: the split's end {end} is before its start {start}")
        if start != expected:
            what = (
                "overlaps the split before it"
                if start < expected
                else f"leaves latents {expected}..{start - 1} without a file"
            )
            raise SourceError(f"{p} {what}; the splits of {directory} must cover 0..width-1 once")
        expected = end + 1
    return found


def _read_config(directory: Path) -> dict[str, Any] | None:
    """``config.json`` beside the splits, when present, with the fields this reader uses checked
    against the types delphi's ``CacheConfig`` writes (``cache_ctx_len`` and ``n_splits`` are
    integers)."""
    path = directory / "config.json"
    if not path.is_file():
        return None
    config = read_json(path)
    if not isinstance(config, dict):
        raise SourceError(f"{path} must hold a JSON object (delphi's cache configuration)")
    for field in ("cache_ctx_len", "n_splits"):
        if field in config:
            json_int(config[field], str(path), field, minimum=1)
    return config


def read_delphi_cache(
    directory: str | os.PathLike[str],
    *,
    width: int | None = None,
    n_sequences: int | None = None,
    ctx_len: int | None = None,
) -> DelphiCache:
    """Read one hookpoint's delphi latent cache as a sparse activation source.

    Parameters
    ----------
    directory : path
        The hookpoint's directory, ``latents/{hookpoint}``, holding ``{start}_{end}.safetensors``.
    width : int, optional
        The SAE's number of latents; checked against the splits (whose last `end` + 1 it is).
    n_sequences, ctx_len : int, optional
        The cache's shape in tokens. Taken from the ``tokens`` tensor when the cache saved it
        (and then checked when given); needed when it did not (`ctx_len` may then come from
        ``config.json``'s ``cache_ctx_len``). Inferring them from the largest location would
        silently drop trailing inputs on which no latent fires, so it is never done.

    Returns
    -------
    DelphiCache

    Raises
    ------
    SourceError
        A missing, truncated or inconsistent file (named): splits that do not tile the latent
        range, fewer or more split files than ``config.json``'s ``n_splits``, a ``config.json``
        whose ``cache_ctx_len`` or ``n_splits`` is not an integer or disagrees with the tokens,
        a location outside the cache's shape or its split, an entry twice, tokens that differ
        between splits, a non-finite activation.
    ParameterError
        `width`, `n_sequences` or `ctx_len` is not a positive integer.
    """
    directory = Path(directory)
    width = None if width is None else check_integer(width, "width", minimum=1)
    n_sequences = None if n_sequences is None else check_integer(n_sequences, "n_sequences", minimum=1)
    ctx_len = None if ctx_len is None else check_integer(ctx_len, "ctx_len", minimum=1)
    files = _split_files(directory)
    config = _read_config(directory)
    if config is not None and "n_splits" in config and config["n_splits"] != len(files):
        raise SourceError(
            f"{directory / 'config.json'}: n_splits is {config['n_splits']}, but {directory} holds {len(files)} "
            f"split files ({', '.join(p.name for _, _, p in files)}); a split is missing, or the config is another "
            "cache's"
        )
    total_width = files[-1][1] + 1
    if width is not None and width != total_width:
        raise SourceError(f"{directory}: the splits cover {total_width} latents, not the width {width} given")
    splits = [_Split(p, s, e) for s, e, p in files]
    tokens = _common_tokens(splits)
    configured_ctx = None if config is None else config.get("cache_ctx_len")
    if tokens is not None:
        shape = tokens.shape
        for given, actual, name in ((n_sequences, shape[0], "n_sequences"), (ctx_len, shape[1], "ctx_len")):
            if given is not None and given != actual:
                raise SourceError(f"{directory}: the cache's tokens have shape {shape}; {name}={given} disagrees")
        if configured_ctx is not None and configured_ctx != shape[1]:
            raise SourceError(
                f"{directory / 'config.json'}: cache_ctx_len is {configured_ctx}, but the cache's tokens have "
                f"shape {shape}"
            )
        n_sequences, ctx_len = int(shape[0]), int(shape[1])
    else:
        if ctx_len is None and configured_ctx is not None:
            ctx_len = int(configured_ctx)
        if n_sequences is None or ctx_len is None:
            raise SourceError(
                f"{directory}: the cache saved no tokens, so its shape is unknown; give n_sequences and ctx_len"
            )
    if n_sequences <= 0 or ctx_len <= 0:
        raise EmptyInputError(f"{directory}: the cache has no tokens ({n_sequences} x {ctx_len})")
    n_rows = n_sequences * ctx_len
    counts = np.zeros(total_width, dtype=np.int64)
    for split in splits:
        counts[split.start : split.end + 1] = _count_entries(split, n_sequences, ctx_len)
    indptr = np.zeros(total_width + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    value_dtype = np.result_type(*(np.dtype(_numpy_dtype(s.value_dtype)) for s in splits))
    indices = np.empty(int(indptr[-1]), dtype=np.int64)
    values = np.empty(int(indptr[-1]), dtype=value_dtype)
    for split in splits:
        _place_entries(split, ctx_len, indptr, indices, values)
        _check_columns(split, indptr, indices, values)
    source = Source(
        "sparse",
        (n_rows, total_width),
        (n_rows, indptr, indices, values),
        values.dtype,
        files=tuple(p for _, _, p in files),
        origin=f"delphi cache {directory}",
    )
    splits_out = tuple((s.start, s.end) for s in splits)
    return DelphiCache(source, tokens, n_sequences, ctx_len, total_width, splits_out, config, directory)


def _cache_directory(path: Path) -> Source | None:
    """A delphi hookpoint directory as a source, for `neuroneval.sources.open_activations`."""
    if not any(_SPLIT_NAME.match(p.name) for p in path.iterdir()):
        return None
    return read_delphi_cache(path).activations


register_directory_reader(_cache_directory)


def _numpy_dtype(name: str) -> str:
    if name.upper() == "BF16":
        raise SourceError("bfloat16 delphi activations are not supported; save them as float16 or float32")
    return {"F16": "float16", "F32": "float32", "F64": "float64"}[name.upper()]


def _common_tokens(splits: Sequence[_Split]) -> npt.NDArray[np.int64] | None:
    with_tokens = [s for s in splits if s.has_tokens]
    if not with_tokens:
        return None
    if len(with_tokens) != len(splits):
        missing = next(s for s in splits if not s.has_tokens)
        raise SourceError(f"{missing.path} has no tokens while other splits of the cache do")
    first = with_tokens[0].tokens()
    for s in with_tokens[1:]:
        other = s.tokens()
        if other.shape != first.shape or not np.array_equal(other, first):
            raise SourceError(
                f"{s.path} holds other tokens than {with_tokens[0].path}; the splits are of different runs"
            )
    return first.astype(np.int64, copy=False)


def _count_entries(split: _Split, n_sequences: int, ctx_len: int) -> npt.NDArray[np.int64]:
    """Entries per latent of the split, with every location checked against the shape (the
    count in the core: `_core.count_entries`)."""
    size = split.end - split.start + 1
    counts = np.zeros(size, dtype=np.int64)
    done = 0
    for loc, val in split.chunks():
        bad = _core.count_entries(loc, val, (n_sequences, ctx_len, size), counts)
        if bad is not None:
            i, field, value = bad
            if field == 3:
                raise SourceError(f"{split.path}: entry {done + i} has the activation {val[i]}")
            name, limit = (("sequence", n_sequences), ("position", ctx_len), ("latent", size))[field]
            hint = f" (latent - {split.start} of the split {split.start}..{split.end})" if name == "latent" else ""
            raise SourceError(f"{split.path}: entry {done + i} has {name} {value}{hint}, outside 0..{limit - 1}")
        done += len(val)
    return counts


def _place_entries(
    split: _Split, ctx_len: int, indptr: npt.NDArray[np.int64], indices: npt.NDArray[np.int64], values: npt.NDArray[Any]
) -> None:
    """Place the split's entries in CSC order, each latent's in file order: a stable counting
    sort by latent, in the core (`_core.place_entries`), chunk by chunk."""
    cursor = indptr[split.start : split.end + 1].copy()
    ends = indptr[split.start + 1 : split.end + 2]
    done = 0
    for loc, val in split.chunks():
        try:
            _core.place_entries(loc, val.astype(values.dtype, copy=False), ctx_len, cursor, ends, indices, values)
        except ShapeError as e:  # the counted entries no longer fit: the file changed between the passes
            raise SourceError(f"{split.path}, entries {done}..{done + len(val) - 1}: {e}") from None
        done += len(val)


def _check_columns(
    split: _Split, indptr: npt.NDArray[np.int64], indices: npt.NDArray[np.int64], values: npt.NDArray[Any]
) -> None:
    """Each latent's rows strictly increasing: delphi writes them in (sequence, position)
    order; a cache written otherwise is sorted here, and an entry given twice is an error."""
    for latent in _core.unordered_columns(indptr, indices, split.start, split.end + 1):
        a, b = int(indptr[latent]), int(indptr[latent + 1])
        order = np.argsort(indices[a:b], kind="stable")
        indices[a:b], values[a:b] = indices[a:b][order], values[a:b][order]
        repeated = np.flatnonzero(np.diff(indices[a:b]) == 0)
        if repeated.size:
            row = int(indices[a + int(repeated[0])])
            raise SourceError(f"{split.path}: latent {latent} has two entries at row {row}")


def write_delphi_cache(
    directory: str | os.PathLike[str],
    activations: Any,
    *,
    tokens: npt.ArrayLike | None = None,
    ctx_len: int | None = None,
    n_splits: int = 5,
    config: dict[str, Any] | None = None,
) -> list[Path]:
    """Write an (n_sequences * ctx_len, width) activation matrix as a delphi latent cache.

    The layout is delphi's ``save_splits``: `n_splits` files ``{start}_{end}.safetensors``
    at boundaries ``linspace(0, width, n_splits + 1)`` (`end` inclusive), each with
    ``locations`` (uint16 when sequences and split-local latents fit, else uint32) in
    (sequence, position, latent) order, float16 ``activations`` of the entries whose
    magnitude exceeds 1e-5 (delphi's cut), and ``tokens`` when given; and always
    ``config.json``, as delphi's ``save_config`` writes it beside the splits (delphi's
    ``LatentDataset`` refuses a cache without one): ``cache_ctx_len``, ``n_splits``,
    ``n_tokens`` (the rows written) and ``model_name`` (None unless `config` names it: give it,
    or give ``LatentDataset`` a tokenizer, since delphi loads the tokenizer by that name), with
    `config`'s other fields (delphi's ``CacheConfig``: ``dataset_repo``, ``batch_size``, ...)
    added. All files appear at once or none.

    Parameters
    ----------
    directory : path
        The hookpoint directory to write (created).
    activations : array_like or scipy.sparse matrix, shape (n_sequences * ctx_len, width)
    tokens : array_like of int, shape (n_sequences, ctx_len), optional
    ctx_len : int, optional
        Tokens per sequence; from `tokens` when given.
    n_splits : int
    config : dict, optional
        More fields for ``config.json``; its ``cache_ctx_len`` and ``n_splits``, when given,
        must agree with the cache written.

    Raises
    ------
    ParameterError
        `config`'s ``cache_ctx_len`` or ``n_splits`` disagrees with the cache, or `n_splits`
        is not in 1..width.
    """
    import scipy.sparse as sp

    if tokens is not None:
        tok = np.asarray(tokens)
        if tok.ndim != 2 or not np.issubdtype(tok.dtype, np.integer):
            raise ShapeError(f"tokens must be a 2-D integer array; got {tok.dtype} {tok.shape}")
        if ctx_len is not None and ctx_len != tok.shape[1]:
            raise ShapeError(f"ctx_len {ctx_len} disagrees with the tokens' shape {tok.shape}")
        ctx_len = int(tok.shape[1])
    if ctx_len is None or ctx_len <= 0:
        raise ParameterError("give tokens or a positive ctx_len")
    matrix = sp.csr_array(activations)
    n_rows, width = matrix.shape
    if n_rows % ctx_len:
        raise ShapeError(f"{n_rows} activation rows are not whole sequences of {ctx_len} tokens")
    if tokens is not None and tok.shape[0] * ctx_len != n_rows:
        raise ShapeError(f"tokens {tok.shape} cover {tok.size} rows; the activations have {n_rows}")
    if not isinstance(n_splits, int) or not 1 <= n_splits <= width:
        raise ParameterError(f"n_splits must be an integer in 1..{width}; got {n_splits!r}")
    coo = matrix.tocoo()
    keep = np.abs(coo.data) > 1e-5
    rows, latents, data = coo.row[keep], coo.col[keep], coo.data[keep]
    order = np.lexsort((latents, rows))  # (sequence, position, latent) order, as torch.nonzero gives
    rows, latents, data = rows[order].astype(np.int64), latents[order].astype(np.int64), data[order]
    boundaries = np.linspace(0, width, n_splits + 1).astype(np.int64)  # torch.linspace(...).long() truncates too
    files: dict[str, Any] = {}
    for start, stop in zip(boundaries[:-1], boundaries[1:], strict=True):
        mask = (latents >= start) & (latents <= stop - 1)
        loc = np.stack([rows[mask] // ctx_len, rows[mask] % ctx_len, latents[mask] - start], axis=1)
        fits = loc.size == 0 or (loc[:, 2].max() < 2**16 and loc[:, 0].max() < 2**16)
        tensors = {
            "locations": np.ascontiguousarray(loc.astype(np.uint16 if fits else np.uint32)),
            "activations": np.ascontiguousarray(data[mask].astype(np.float16)),
        }
        if tokens is not None:
            tensors["tokens"] = np.ascontiguousarray(tok)
        files[f"{start}_{stop - 1}.safetensors"] = _safetensors_writer(tensors)
    written: dict[str, Any] = {"cache_ctx_len": ctx_len, "n_tokens": n_rows, "n_splits": n_splits, "model_name": None}
    for field in ("cache_ctx_len", "n_splits"):
        if config is not None and field in config and config[field] != written[field]:
            raise ParameterError(f"config's {field} is {config[field]!r}, but the cache written has {written[field]}")
    text = json.dumps({**written, **(config or {})}, indent=4)  # json.dump(..., indent=4), as save_config
    files["config.json"] = lambda p: p.write_text(text, encoding="utf-8")
    return write_files_atomic(directory, files)


def _safetensors_writer(tensors: dict[str, npt.NDArray[Any]]) -> Any:
    from safetensors.numpy import save_file

    return lambda p: save_file(tensors, str(p))


# --------------------------------------------------------------------------- explanations and scores


def _latent_files(directory: Path, what: str) -> Iterator[tuple[str, int, Path]]:
    if not directory.is_dir():
        raise SourceError(f"no delphi {what} directory at {directory}")
    for p in sorted(directory.iterdir()):
        m = _LATENT_FILE.match(p.name)
        if m and p.is_file():
            yield m.group("module"), int(m.group("latent")), p


def read_delphi_explanations(
    directory: str | os.PathLike[str], *, module: str | None = None, explainer: str | None = None
) -> pl.DataFrame:
    """delphi's explanations (``{hookpoint}_latent{i}.txt``, each a JSON string) as a table.

    Returns the columns `unit` (the latent index), `module`, `explainer` (`explainer`, else
    the directory's parent run name and the directory's name, e.g. ``run/explanations``) and
    `explanation`, ordered by module and latent; with `module`, only that hookpoint's files.

    Raises
    ------
    SourceError
        No such directory, no explanation file, a file that is not a JSON string (named).
    """
    directory = Path(directory)
    name = explainer if explainer is not None else f"{directory.parent.name}/{directory.name}".lstrip("/")
    rows: list[tuple[int, str, str]] = []
    for mod, latent, path in _latent_files(directory, "explanations"):
        if module is not None and mod != module:
            continue
        text = read_json(path)
        if not isinstance(text, str):
            raise SourceError(
                f"{path} must hold one JSON string (delphi's explanation); it holds {type(text).__name__}"
            )
        rows.append((latent, mod, text))
    if not rows:
        which = f" for module {module!r}" if module is not None else ""
        raise SourceError(f"{directory} holds no delphi explanation files ({{module}}_latent{{i}}.txt){which}")
    frame = pl.DataFrame(rows, schema={"unit": pl.Int64, "module": pl.String, "explanation": pl.String}, orient="row")
    return (
        frame.with_columns(pl.lit(name).alias("explainer"))
        .select("unit", "module", "explainer", "explanation")
        .sort("module", "unit")
    )


def write_delphi_explanations(
    directory: str | os.PathLike[str], explanations: pl.DataFrame, *, module: str
) -> list[Path]:
    """Write a (unit, explanation) table as delphi's explanation files of `module` (all or none)."""
    for column in ("unit", "explanation"):
        if column not in explanations.columns:
            raise SourceError(f"the explanation table needs a '{column}' column; it has {explanations.columns}")
    files: dict[str, Any] = {}
    for unit, text in explanations.select("unit", "explanation").iter_rows():
        data = json.dumps(text).encode("utf-8")
        files[f"{module}_latent{int(unit)}.txt"] = lambda p, data=data: p.write_bytes(data)
    return write_files_atomic(directory, files)


#: The scorer folder where delphi's simulation scorer writes (``scores/simulation``): its files
#: hold neuron-explainer ScoredSimulations, read by `neuroneval.interop.read_scored_simulations`.
SIMULATION_SCORER = "simulation"
_SCORE_COLUMNS = {
    "scorer": pl.String, "module": pl.String, "unit": pl.Int64, "example": pl.Int64, "distance": pl.Float64,
    "activating": pl.Boolean, "prediction": pl.Boolean, "probability": pl.Float64, "correct": pl.Boolean,
    "max_activation": pl.Float64,
}  # fmt: skip


def scores_directory(path: str | os.PathLike[str]) -> Path:
    """A delphi run's ``scores`` folder: `path` itself, or ``path/scores`` when `path` is the
    run's folder (the one holding ``latents``, ``explanations`` and ``scores``)."""
    path = Path(path)
    if not path.is_dir():
        raise SourceError(f"no delphi scores directory at {path}")
    inner = path / "scores"
    return inner if inner.is_dir() else path


def _classifier_example(ex: Any, where: str) -> tuple[Any, ...]:
    """One example as delphi's classifier scorers write it (``ClassifierOutput`` through
    orjson), its fields checked against their types there: (distance, activating, prediction,
    probability, correct, max_activation)."""
    if isinstance(ex, dict) and "scored_sequence_simulations" in ex:
        raise SourceError(
            f"{where} is a simulation scorer's output, not a classifier example; read it with read_scored_simulations"
        )
    if not isinstance(ex, dict) or not set(_EXAMPLE_FIELDS) <= ex.keys():
        missing = sorted(set(_EXAMPLE_FIELDS) - ex.keys()) if isinstance(ex, dict) else list(_EXAMPLE_FIELDS)
        raise SourceError(f"{where} is not a classifier example (fields {_EXAMPLE_FIELDS}; missing {missing})")
    json_string_list(ex["str_tokens"], where, "str_tokens")
    acts = json_float_list(ex["activations"], where, "activations")
    return (
        json_number(ex["distance"], where, "distance"),
        json_bool(ex["activating"], where, "activating"),
        json_bool(ex["prediction"], where, "prediction", null=True),
        json_number(ex["probability"], where, "probability", null=True),
        json_bool(ex["correct"], where, "correct", null=True),
        float(acts.max()) if acts.size else None,
    )


def read_delphi_scores(directory: str | os.PathLike[str]) -> pl.DataFrame:
    """A delphi run's classifier scores (``scores/{scorer}/{module}_latent{i}.txt``) as one row
    per example.

    Parameters
    ----------
    directory : path
        The run's ``scores`` folder (one subfolder per scorer), or the run's folder holding it.

    Returns
    -------
    polars.DataFrame
        Columns `scorer`, `module`, `unit`, `example` (its place in the file), `distance`,
        `activating`, `prediction`, `probability`, `correct`, `max_activation` (of the
        example's tokens). The classifier scorers (detection, fuzz) are read; delphi's
        simulation scorer (``scores/simulation``) is left out: read it with
        `neuroneval.interop.read_scored_simulations`.

    Raises
    ------
    SourceError
        A file that is not a list of delphi's classifier examples (``ClassifierOutput``: the
        seven fields, each of the JSON type delphi writes: ``activating`` true or false,
        ``prediction`` and ``correct`` true, false or null, ``activations`` numbers, ...),
        naming the file, the example and the field; no classifier score file at all.
    """
    directory = scores_directory(directory)
    columns: dict[str, list[Any]] = {k: [] for k in _SCORE_COLUMNS}
    skipped = False
    for scorer_dir in sorted(d for d in directory.iterdir() if d.is_dir()):
        if scorer_dir.name == SIMULATION_SCORER:
            skipped = True
            continue
        for mod, latent, path in _latent_files(scorer_dir, "scores"):
            examples = read_json(path)
            if not isinstance(examples, list):
                raise SourceError(
                    f"{path} must hold a JSON list of scored examples; it holds {type(examples).__name__}"
                )
            for i, ex in enumerate(examples):
                values = _classifier_example(ex, f"{path}: example {i}")
                for name, value in zip(_SCORE_COLUMNS, (scorer_dir.name, mod, latent, i, *values), strict=True):
                    columns[name].append(value)
    if not columns["scorer"]:
        hint = f" (its {SIMULATION_SCORER}/ scores are read by read_scored_simulations)" if skipped else ""
        raise SourceError(
            f"{directory} holds no delphi classifier score files ({{scorer}}/{{module}}_latent{{i}}.txt){hint}"
        )
    return pl.DataFrame(columns, schema=_SCORE_COLUMNS)


def delphi_score_summary(examples: pl.DataFrame) -> pl.DataFrame:
    """Per (scorer, module, unit) of `read_delphi_scores`'s table: the examples with a
    prediction, and their balanced accuracy, precision, recall and F1 (delphi's definitions;
    examples without a prediction are left out), and the AUC of the probabilities as a
    classifier of `activating` (NaN when one class is absent or no probability was kept).
    """
    from .._score import compute

    rows = []
    for key, group in examples.group_by(["scorer", "module", "unit"], maintain_order=True):
        valid = group.filter(pl.col("prediction").is_not_null())
        act = valid["activating"].to_numpy().astype(bool)
        pred = valid["prediction"].to_numpy().astype(bool)
        pos, neg = int(act.sum()), int((~act).sum())
        tp, tn = int((pred & act).sum()), int((~pred & ~act).sum())
        fp = int((pred & ~act).sum())
        recall = tp / pos if pos else 0.0
        precision = tp / (tp + fp) if tp + fp else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        balanced = ((tp / pos if pos else 0.0) + (tn / neg if neg else 0.0)) / 2
        auc = float("nan")
        probs = group.filter(pl.col("probability").is_not_null())
        if probs.height and probs["activating"].n_unique() == 2:
            p = probs["probability"].to_numpy().astype(np.float64)
            a = probs["activating"].to_numpy().astype(np.float64)
            # inverse_auc of a "unit" whose activations are the probabilities, for the concept
            # "activating": the AUC of ranking by probability (ties count half).
            auc = float(compute(p[:, None], a[:, None], ["inverse_auc"])["inverse_auc"][0, 0])
        rows.append((*key, valid.height, balanced, precision, recall, f1, auc))
    schema = {
        "scorer": pl.String, "module": pl.String, "unit": pl.Int64, "examples": pl.Int64, "balanced_accuracy": pl.Float64,
        "precision": pl.Float64, "recall": pl.Float64, "f1": pl.Float64, "auc": pl.Float64,
    }  # fmt: skip
    return pl.DataFrame(rows, schema=schema, orient="row")
