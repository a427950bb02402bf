"""Where activations and concepts come from: arrays, `.npy` files, shard directories, sparse.

Every function that scores (`compute`, `score`, `evaluate`, the CLI) accepts any of these and
hands the core a view it reads in place; nothing is densified or copied whole first.

Activations (N inputs x K units):

- a numpy array or torch tensor (float16/bfloat16/float32/float64, any strides);
- a path to a `.npy` file, opened as a memory map (float16, float32, float64);
- a path to a `.npz` file holding a `scipy.sparse` matrix (`scipy.sparse.save_npz`);
- a path to a delphi latent cache (a hookpoint directory of ``{start}_{end}.safetensors``
  splits, `neuroneval.interop.read_delphi_cache`), read as a sparse source;
- a path to a shard directory: row shards that stack along N, described by `manifest.json`,
  either dense `.npy` shards (`write_shards`) or sparse `(row, unit, value)` triplets, one
  `.npz` per shard with arrays `row` (the input, counted over all shards), `unit` (or
  `column`) and `value` (`write_triplet_shards`);
- a `scipy.sparse` matrix or array (CSR, CSC, COO, ...): absent entries are zeros, and zeros
  are a real value that forms one tie group (SPEC section 1).

Concepts (N inputs x T concepts) take the same forms, plus a `.parquet` or `.csv` table of
`(input, concept, probability)` rows (see `read_concept_table`).

Examples
--------
>>> import numpy as np, scipy.sparse as sp, neuroneval
>>> from neuroneval.sources import open_activations
>>> a = sp.csr_matrix(np.array([[0.0, 2.0], [1.5, 0.0], [0.0, 0.0]]))
>>> src = open_activations(a)
>>> src.kind, src.shape
('sparse', (3, 2))
>>> c = np.array([[1.0], [0.0], [0.0]])
>>> float(neuroneval.compute(a, c, ["auc"])["auc"][1, 0])
1.0
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _direct
from ._coerce import as_index_array, as_matrix, as_real_array, check_names
from .errors import DTypeError, EmptyInputError, ShapeError, SourceError
from .files import inside, read_json, write_atomic

__all__ = [
    "MANIFEST",
    "Source",
    "input_file",
    "input_paths",
    "open_activations",
    "open_concepts",
    "read_concept_table",
    "read_manifest",
    "read_names",
    "register_directory_reader",
    "write_manifest",
    "write_shards",
    "write_triplet_shards",
]

MANIFEST = "manifest.json"
_FORMAT = "neuroneval-shards"
_FILE_DTYPES = (np.float16, np.float32, np.float64)
_NATIVE = "<" if sys.byteorder == "little" else ">"
CoreSparse = tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[Any]]


@dataclass(frozen=True)
class Source:
    """An (N, K) matrix as the core reads it, with where it came from.

    `core` is what the extension takes: one array (possibly a memory map), a list of row
    shards, or a CSC tuple `(rows, indptr, indices, values)`. `files` are the files it reads
    (empty for data in memory); `names` are the column names the source carries, if any.
    """

    kind: str
    shape: tuple[int, int]
    core: Any
    dtype: np.dtype[Any]
    names: list[str] | None = None
    files: tuple[Path, ...] = ()
    origin: str = "in-memory data"
    _digest: str | None = field(default=None, repr=False, compare=False)

    @property
    def n_rows(self) -> int:
        return self.shape[0]

    @property
    def n_columns(self) -> int:
        return self.shape[1]

    @property
    def row_major_files(self) -> bool:
        """True when the data are row-major files, where reading a block of columns would
        read every file page again: `evaluate` transposes those once into block files."""
        return self.kind in ("npy", "shards") and not (
            self.kind == "npy" and bool(self.core.flags.f_contiguous) and not self.core.flags.c_contiguous
        )

    def columns(self, start: int, stop: int) -> Source:
        """Columns [start, stop) as a source reading the same data (no copy of the values)."""
        if not 0 <= start < stop <= self.n_columns:
            raise ShapeError(f"columns [{start}, {stop}) are outside 0..{self.n_columns}")
        names = None if self.names is None else self.names[start:stop]
        if isinstance(self.core, tuple):
            rows, indptr, indices, values = self.core
            lo, hi = int(indptr[start]), int(indptr[stop])
            core: Any = (rows, indptr[start : stop + 1] - lo, indices[lo:hi], values[lo:hi])
        elif isinstance(self.core, list):
            core = [s[:, start:stop] for s in self.core]
        else:
            core = self.core[:, start:stop]
        return replace(self, shape=(self.n_rows, stop - start), core=core, names=names)

    def dense(self, columns: Sequence[int] | npt.NDArray[np.integer] | None = None) -> np.ndarray:
        """The source (or the listed `columns`, in that order) as one in-memory (N, len) array
        in its own dtype: sparse entries scattered into zeros, shards stacked.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp
        >>> src = open_activations(sp.csr_matrix(np.array([[0.0, 2.0], [1.5, 0.0]])))
        >>> src.dense([1]).tolist()
        [[2.0], [0.0]]
        """
        cols = np.arange(self.n_columns) if columns is None else np.asarray(columns, dtype=np.int64).reshape(-1)
        if cols.size and (cols.min() < 0 or cols.max() >= self.n_columns):
            raise ShapeError(
                f"column {int(cols[(cols < 0) | (cols >= self.n_columns)][0])} is outside 0..{self.n_columns}"
            )
        core = self.core
        if isinstance(core, tuple):  # CSC: (rows, indptr, indices, values)
            _, indptr, indices, values = core
            out = np.zeros((self.n_rows, cols.size), dtype=values.dtype)
            for j, c in enumerate(cols):
                lo, hi = int(indptr[c]), int(indptr[c + 1])
                out[indices[lo:hi], j] = values[lo:hi]
            return out
        if isinstance(core, list):  # dense row shards
            if columns is None:
                return np.concatenate([np.asarray(s) for s in core], axis=0)
            return np.concatenate([np.asarray(s[:, cols]) for s in core], axis=0)
        return np.asarray(core) if columns is None else np.asarray(np.asarray(core)[:, cols])

    def in_memory(self) -> Source:
        """The same source with its memory maps read into memory, to send to another process
        (a map is not shipped as a map). The fingerprint stays that of the files, so nothing
        rehashes the data."""
        core = self.core
        if isinstance(core, np.memmap):
            core = np.array(core)
        elif isinstance(core, list):
            core = [np.array(a) if isinstance(a, np.memmap) else a for a in core]
        return replace(self, core=core, _digest=self.fingerprint() if self.files else self._digest)

    def row_chunks(self, rows: int, reuse: bool = False) -> Iterator[np.ndarray]:
        """Dense row-major chunks of about `rows` rows, in order, each read once from disk
        into memory (plain reads, not a memory map, so nothing stays resident). With
        `reuse`, a file's chunks are read into one buffer in turn, so each chunk is valid
        only until the next is asked for (no fresh pages per chunk for the kernel to zero)."""
        if self.kind == "npy":
            yield from _npy_row_chunks(self.files[0], rows, reuse)
        elif self.kind == "shards":
            for f in self.files:
                yield from _npy_row_chunks(f, rows, reuse)
        elif isinstance(self.core, np.ndarray):
            for s in range(0, self.n_rows, rows):
                yield np.asarray(self.core[s : s + rows])
        else:
            raise SourceError(f"{self.kind} data cannot be read by rows")

    def fingerprint(self) -> str:
        """Identifies the data: files by path, size and modification time; data in memory by
        a hash of its contents."""
        h = hashlib.blake2b(digest_size=16)
        h.update(json.dumps([self.kind, list(self.shape), str(self.dtype), self.names]).encode())
        if self.files:
            for f in self.files:
                st = f.stat()
                h.update(f"{f.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
        elif self._digest is not None:
            h.update(self._digest.encode())
        else:
            parts = list(self.core[1:]) if isinstance(self.core, tuple) else [self.core]
            for p in parts:
                _hash_array(h, np.asarray(p))
        return h.hexdigest()


def path_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a file, in words ("does not exist", "is a directory",
    "is a symbolic link that loops", ...), or None when it is a readable regular file."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as e:
        return f"cannot be examined ({e.strerror})"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"is a symbolic link to {os.readlink(path)}, which does not exist"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is a symbolic link that loops"
        return f"cannot be examined ({e.strerror})"
    if stat.S_ISDIR(st.st_mode):
        return "is a directory"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if not os.access(path, os.R_OK):
        return "is not readable (permission denied)"
    return None


def input_file(path: str | os.PathLike[str], what: str) -> Path:
    """`path` as a readable regular file, else a `SourceError` that says what it is instead:
    missing, a directory, a dangling or looping symbolic link, unreadable.

    Examples
    --------
    >>> import tempfile
    >>> input_file(tempfile.mkdtemp(), "pairs file")
    Traceback (most recent call last):
    ...
    neuroneval.errors.SourceError: pairs file ... is a directory, not a file
    """
    p = Path(path)
    problem = path_problem(p)
    if problem == "is a directory":
        problem = "is a directory, not a file"
    if problem is not None:
        raise SourceError(f"{what} {p} {problem}")
    return p


def input_paths(*inputs: Any) -> list[Path]:
    """Every file and directory that `inputs` read: a `Source`'s files (and its shard
    directory), a path as given; anything else (data in memory, None) reads none. What an
    output must never overwrite (`neuroneval.files.check_output`)."""
    paths: list[Path] = []
    for x in inputs:
        if isinstance(x, Source):
            paths += list(x.files)
            if x.files:
                paths.append(Path(x.origin))
        elif isinstance(x, (str, os.PathLike)):
            paths.append(Path(x))
    return paths


def _hash_array(h: Any, a: np.ndarray) -> None:
    h.update(f"{a.shape}{a.strides}".encode())
    # Hashed from the buffer itself (no bytes copy); row blocks keep the temporary copies of
    # strided arrays small.
    flat = a.reshape(a.shape[0], -1) if a.ndim > 1 else a.reshape(-1, 1)
    step = max(1, (64 << 20) // max(1, flat.shape[1] * a.itemsize))
    for s in range(0, flat.shape[0], step):
        h.update(np.ascontiguousarray(flat[s : s + step]))


def _npy_header(path: Path) -> tuple[tuple[int, ...], bool, np.dtype[Any], int]:
    """(shape, fortran_order, dtype, data offset) of a `.npy` file; a clear error if corrupt."""
    input_file(path, ".npy file")
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:  # pragma: no cover - numpy rejects unknown versions in read_magic
                raise ValueError(f"unsupported .npy version {version}")
            offset = f.tell()
    except (ValueError, OSError, SyntaxError, TypeError) as e:
        raise SourceError(f"{path} is not a valid .npy file: {e}") from e
    size = path.stat().st_size
    expected = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size < expected:
        raise SourceError(f"{path} is truncated: {size} bytes, but its header describes {expected}")
    return shape, fortran, dtype, offset


def _open_npy(path: Path, what: str, *, allow_no_rows: bool = False) -> np.ndarray:
    shape, fortran, dtype, offset = _npy_header(path)
    if len(shape) != 2:
        raise ShapeError(f"{what} file {path} holds an array of shape {shape}; expected 2-D (inputs x columns)")
    if dtype.type not in _FILE_DTYPES and dtype.kind not in "biu":
        raise DTypeError(f"{what} file {path} has dtype {dtype}; expected float16, float32 or float64")
    if dtype.byteorder not in "=|" and dtype.byteorder != _NATIVE:
        raise DTypeError(
            f"{what} file {path} is {'big' if dtype.byteorder == '>' else 'little'}-endian ({dtype.str}); "
            f"rewrite it in native byte order, e.g. np.save(path, np.load(path).astype('{dtype.newbyteorder('=').str}'))"
        )
    if shape[1] == 0 or (shape[0] == 0 and not allow_no_rows):
        raise EmptyInputError(f"empty input: {what} file {path} has shape {shape}")
    arr = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")
    return np.asarray(arr) if dtype.kind in "biu" else arr


def _npy_row_chunks(path: Path, rows: int, reuse: bool = False) -> Iterator[np.ndarray]:
    shape, fortran, dtype, offset = _npy_header(path)
    if fortran:  # a column-major file: fall back to a memory map, one row slice at a time
        arr = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F")
        for s in range(0, shape[0], rows):
            yield np.ascontiguousarray(arr[s : s + rows])
        return
    n, k = shape
    row_bytes = k * dtype.itemsize
    # a large file is read once, past the page cache (`_direct`); read at call time: tests lower it
    direct = path.stat().st_size >= _direct.DIRECT_READ_BYTES
    with _direct.SequentialReader(path, offset, direct=direct) as reader:
        for s in range(0, n, rows):
            size = (min(rows, n - s), k)
            raw = reader.take(size[0] * row_bytes)
            if len(raw) < size[0] * row_bytes:
                raise SourceError(f"{path} ended early, at row {s + len(raw) // row_bytes} of {n}")
            chunk = raw.view(dtype).reshape(size)
            yield chunk if reuse else chunk.copy()


def read_names(x: str | os.PathLike[str] | Sequence[str] | None, count: int, what: str) -> list[str] | None:
    """Names from a sequence or a text file (one per line); their number must be `count`."""
    if x is None:
        return None
    if isinstance(x, (str, os.PathLike)):
        return check_names(_names_file(x, what), count, what)
    return check_names(x, count, what)


def _is_sparse(x: object) -> bool:
    return type(x).__module__.startswith("scipy.sparse")


def _from_sparse(x: Any, what: str) -> Source:
    import scipy.sparse as sp

    m = sp.csc_array(x)
    if m.ndim != 2:
        raise ShapeError(f"{what} must be 2-D; got shape {m.shape}")
    if 0 in m.shape:
        raise EmptyInputError(f"empty input: {what} have shape {m.shape}; need at least one input and one column")
    if not m.has_canonical_format:
        m = m.copy()
        m.sum_duplicates()
    values = _real_values(m.data, what)
    core: CoreSparse = (
        int(m.shape[0]),
        np.ascontiguousarray(m.indptr, dtype=np.int64),
        np.ascontiguousarray(m.indices, dtype=np.int64),
        np.ascontiguousarray(values),
    )
    return Source("sparse", (int(m.shape[0]), int(m.shape[1])), core, values.dtype)


def _real_values(values: Any, what: str) -> np.ndarray:
    """Entry values of a sparse source: 1-D, real (complex and strings refused), in their own
    float dtype, integers and bools widened exactly to float64."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ShapeError(f"{what}: values must be a 1-D array; got shape {arr.shape}")
    if arr.dtype.type in _FILE_DTYPES:
        return arr if arr.dtype.byteorder in "=|" else arr.astype(arr.dtype.newbyteorder("="))
    return as_real_array(arr, f"{what} values")


def _load_npz(path: Path, what: str) -> Any:
    """The scipy sparse matrix in a `.npz` file written by `scipy.sparse.save_npz`."""
    try:
        import scipy.sparse as sp
    except ImportError as e:  # pragma: no cover - scipy comes with scikit-learn
        raise SourceError(f"reading {what} from {path} needs scipy (pip install scipy)") from e
    try:
        return sp.load_npz(path)
    except Exception as e:  # zipfile, numpy and scipy raise many kinds; all mean unreadable
        raise SourceError(f"{what} file {path} is not a sparse matrix saved by scipy.sparse.save_npz: {e}") from e


def _from_triplets(shape: tuple[int, int], rows: np.ndarray, cols: np.ndarray, values: np.ndarray, what: str) -> Source:
    """A CSC source from (row, column, value) triplets; duplicates and out-of-range indices
    are errors, not silently summed."""
    n, k = shape
    rows, cols = as_index_array(np.asarray(rows), f"{what}: rows"), as_index_array(np.asarray(cols), f"{what}: columns")
    values = _real_values(values, what)
    if rows.ndim != 1 or cols.ndim != 1:
        raise ShapeError(f"{what}: row and column indices must be 1-D arrays")
    if len(rows) != len(cols) or len(rows) != len(values):
        raise ShapeError(f"{what}: row, column and value arrays differ in length")
    for idx, limit, name in ((rows, n, "row"), (cols, k, "column")):
        if len(idx) and (idx.min() < 0 or idx.max() >= limit):
            bad = idx[(idx < 0) | (idx >= limit)][0]
            raise ShapeError(f"{what}: {name} index {bad} is outside 0..{limit}")
    order = np.lexsort((rows, cols))
    rows, cols, values = rows[order], cols[order], values[order]
    dup = (np.diff(rows) == 0) & (np.diff(cols) == 0)
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise ShapeError(f"{what}: entry (row {rows[i]}, column {cols[i]}) appears more than once")
    indptr = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=k), out=indptr[1:])
    core: CoreSparse = (n, indptr, np.ascontiguousarray(rows, dtype=np.int64), np.ascontiguousarray(values))
    return Source("sparse", shape, core, values.dtype)


def read_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The `manifest.json` of a shard directory, checked for the fields every reader needs."""
    directory = Path(directory)
    path = directory / MANIFEST
    if not path.is_file():
        raise SourceError(f"{directory} is a directory without {MANIFEST}; see neuroneval.sources.write_shards")
    manifest = read_json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise SourceError(f"{path} is not a {_FORMAT} manifest (its 'format' field must be {_FORMAT!r})")
    _check_manifest(manifest, path)
    return manifest


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _check_manifest(manifest: dict[str, Any], path: Path) -> None:
    """The manifest's fields against the format's schema, each by type: a `SourceError`
    naming the field and what it holds instead."""

    def bad(field: str, expected: str) -> SourceError:
        return SourceError(f"{path}: the field {field!r} must be {expected}; it holds {manifest.get(field)!r}")

    for key in ("n_rows", "n_columns", "layout", "shards"):
        if key not in manifest:
            raise SourceError(f"{path} lacks the field {key!r}")
    if manifest["layout"] not in ("dense", "triplets"):
        raise bad("layout", "'dense' or 'triplets'")
    for key in ("n_rows", "n_columns"):
        if not _is_count(manifest[key]):
            raise bad(key, "a non-negative integer")
    names = manifest.get("names")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise bad("names", "null or a list of strings")
    shards = manifest["shards"]
    if not isinstance(shards, list):
        raise bad("shards", 'a list of {"file": ...} entries')
    for i, shard in enumerate(shards):
        if not isinstance(shard, dict):
            raise SourceError(f"{path}: shard {i} must be an object with a 'file' field; it is {shard!r}")
        file = shard.get("file")
        if not isinstance(file, str) or not file:
            raise SourceError(f"{path}: shard {i} needs a 'file' field naming its file; it holds {file!r}")
        for key in ("rows", "entries"):
            if key in shard and not _is_count(shard[key]):
                raise SourceError(
                    f"{path}: shard {i}'s {key!r} must be a non-negative integer; it holds {shard[key]!r}"
                )


def _open_shards(directory: Path, what: str) -> Source:
    manifest = read_manifest(directory)
    n, k = int(manifest["n_rows"]), int(manifest["n_columns"])
    files = [inside(directory, s["file"], named_in=directory / MANIFEST) for s in manifest["shards"]]
    for f in files:
        problem = path_problem(f)
        if problem is not None:
            raise SourceError(f"shard {f} listed in {directory / MANIFEST} {problem}")
    names = manifest.get("names")
    if names is not None and len(names) != k:
        raise SourceError(f"{directory / MANIFEST}: {len(names)} names for {k} columns")
    if not files:
        raise EmptyInputError(f"{directory} has no shards")
    if manifest["layout"] == "dense":
        # An empty shard (a batch with no rows) is legal; it contributes nothing.
        opened = [(f, _open_npy(f, what, allow_no_rows=True)) for f in files]
        files = [f for f, a in opened if a.shape[0] > 0]
        arrays = [a for _, a in opened if a.shape[0] > 0]
        if not arrays:
            raise EmptyInputError(f"empty input: the shards in {directory} hold no rows")
        dtypes = {a.dtype for a in arrays}
        if len(dtypes) > 1:
            raise DTypeError(f"the shards in {directory} mix dtypes {sorted(map(str, dtypes))}")
        for f, a in zip(files, arrays, strict=True):
            if a.shape[1] != k:
                raise ShapeError(f"shard {f} has {a.shape[1]} columns; the manifest says {k}")
        total = sum(a.shape[0] for a in arrays)
        if total != n:
            raise ShapeError(f"the shards in {directory} hold {total} rows; the manifest says {n}")
        arrays = [as_matrix(a, what) if a.dtype.type not in _FILE_DTYPES else a for a in arrays]
        all_files = tuple(f for f, _ in opened)  # the fingerprint covers the empty ones too
        return Source("shards", (n, k), arrays, arrays[0].dtype, names, all_files, str(directory))
    if manifest["layout"] == "triplets":
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for f in files:
            try:
                with np.load(f, allow_pickle=False) as z:
                    # the column array may be called "unit" (activations) or "concept"
                    col_key = next((key for key in ("column", "unit", "concept") if key in z.files), "column")
                    row, col, value = z["row"], z[col_key], z["value"]
            except Exception as e:  # zipfile, numpy and pickle refusals: all mean unreadable
                raise SourceError(f"triplet shard {f} is not an .npz with row, column and value arrays: {e}") from e
            where = f"triplet shard {f}"
            for name, arr in (("row", row), (col_key, col), ("value", value)):
                if arr.ndim != 1:
                    raise ShapeError(f"{where}: {name!r} must be a 1-D array; it has shape {arr.shape}")
            parts.append(
                (
                    as_index_array(row, f"{where}: 'row'"),
                    as_index_array(col, f"{where}: {col_key!r}"),
                    _real_values(value, where),
                )
            )
        if len({p[2].dtype for p in parts}) > 1:
            parts = [(r, c, v.astype(np.float64)) for r, c, v in parts]
        rows, cols, values = (np.concatenate([p[i] for p in parts]) for i in range(3))
        src = _from_triplets((n, k), rows, cols, values, what)
        return replace(src, kind="sparse", names=names, files=tuple(files), origin=str(directory))
    raise SourceError(f"{directory / MANIFEST}: unknown layout {manifest['layout']!r} (expected 'dense' or 'triplets')")


DirectoryReader = Callable[[Path], "Source | None"]
_DIRECTORY_READERS: list[DirectoryReader] = []


def register_directory_reader(reader: DirectoryReader) -> None:
    """Let every function that opens sources read another tool's directory layout.

    `reader(path)` returns a `Source` for a directory it recognises and None for any other.
    Readers are tried in the order they were registered, for directories without a shard
    manifest, before the shard-directory reader. `neuroneval.interop` registers delphi's
    latent caches (`neuroneval.interop.read_delphi_cache`).
    """
    if reader not in _DIRECTORY_READERS:
        _DIRECTORY_READERS.append(reader)


def _open(x: Any, what: str) -> Source:
    if isinstance(x, Source):
        return x
    if isinstance(x, (str, os.PathLike)):
        path = Path(x)
        if path.is_dir():
            if not (path / MANIFEST).exists():
                for reader in _DIRECTORY_READERS:
                    found = reader(path)
                    if found is not None:
                        return found
            return _open_shards(path, what)
        input_file(path, f"{what} file")
        if path.suffix == ".npy":
            arr = _open_npy(path, what)
            arr = as_matrix(arr, what) if arr.dtype.type not in _FILE_DTYPES else arr
            return Source("npy", arr.shape, arr, arr.dtype, None, (path,), str(path))
        if path.suffix == ".npz":
            return replace(_from_sparse(_load_npz(path, what), what), files=(path,), origin=str(path))
        raise SourceError(f"cannot read {what} from {path}: expected a .npy or .npz file or a shard directory")
    if _is_sparse(x):
        return _from_sparse(x, what)
    arr = as_matrix(x, what)  # an empty array reaches the core, which names the problem
    return Source("array", arr.shape, arr, arr.dtype)


def open_activations(x: Any, *, unit_names: Any = None) -> Source:
    """The activation source for `x` (see the module docstring for what `x` may be).

    `unit_names` (a sequence, or a text file with one name per line) overrides the names a
    shard manifest carries.
    """
    src = _open(x, "activations")
    names = read_names(unit_names, src.n_columns, "unit_names")
    return replace(src, names=names) if names is not None else src


def open_concepts(x: Any, *, n_inputs: int | None = None, concept_names: Any = None) -> Source:
    """The concept source for `x`: anything `open_activations` takes, or a concept table.

    A `.parquet` or `.csv` path is read by `read_concept_table`, which needs `n_inputs`.
    """
    if isinstance(x, (str, os.PathLike)) and Path(x).suffix in (".parquet", ".csv"):
        if n_inputs is None:
            raise ShapeError("a concept table needs the number of inputs (n_inputs)")
        return read_concept_table(x, n_inputs=n_inputs, concept_names=concept_names)
    src = _open(x, "concepts")
    names = read_names(concept_names, src.n_columns, "concept_names")
    return replace(src, names=names) if names is not None else src


def read_concept_table(path: str | os.PathLike[str], *, n_inputs: int, concept_names: Any = None) -> Source:
    """Concepts from a `.parquet` or `.csv` table with columns `input` (0-based row of the
    activations), `concept` (a name) and `probability` (in [0, 1]; `label` is accepted too).

    Pairs absent from the table are 0. The concept order is `concept_names` (a sequence or a
    file with one name per line) when given, in which case every name in the table must be
    listed; otherwise the table's names, sorted.

    Examples
    --------
    >>> import polars as pl, tempfile, os
    >>> from neuroneval.sources import read_concept_table
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "concepts.csv")
    >>> pl.DataFrame({"input": [0, 2], "concept": ["dog", "cat"], "probability": [1.0, 0.5]}).write_csv(p)
    >>> src = read_concept_table(p, n_inputs=3)
    >>> src.names, src.shape
    (['cat', 'dog'], (3, 2))
    """
    import polars as pl

    path = input_file(path, "concept table")
    try:
        table = (
            pl.read_parquet(path)
            if path.suffix == ".parquet"
            else pl.read_csv(path, schema_overrides={"concept": pl.String})  # names stay text: "007"
        )
    except Exception as e:  # polars raises many kinds; all mean the file is unreadable
        raise SourceError(f"cannot read the concept table {path}: {e}") from e
    value_col = "probability" if "probability" in table.columns else "label"
    missing = [c for c in ("input", "concept") if c not in table.columns]
    if value_col not in table.columns:
        missing.append("probability (or label)")
    if missing:
        raise SourceError(f"concept table {path} lacks the column(s) {', '.join(missing)}; it has {table.columns}")
    table_names = table["concept"].cast(pl.String)
    if table_names.null_count() or table["input"].null_count() or table[value_col].null_count():
        raise SourceError(f"concept table {path} has empty cells")
    if concept_names is None:
        names = sorted(set(table_names.to_list()))
    else:
        names = (
            _names_file(concept_names, "concept_names")
            if isinstance(concept_names, (str, os.PathLike))
            else [str(n) for n in concept_names]
        )
        if len(set(names)) != len(names):
            raise SourceError("concept_names lists a name more than once")
        unknown = set(table_names.to_list()) - set(names)
        if unknown:
            raise SourceError(f"concept table {path} names concepts not in concept_names: {sorted(unknown)[:5]}")
    if not names:
        raise EmptyInputError(f"concept table {path} has no rows and no concept names")
    column_of = {n: i for i, n in enumerate(names)}
    cols = np.array([column_of[n] for n in table_names.to_list()], dtype=np.int64)
    try:
        inputs = table["input"].cast(pl.Float64, strict=True).to_numpy()
        values = table[value_col].cast(pl.Float64, strict=True).to_numpy()
    except Exception as e:
        raise SourceError(f"concept table {path}: 'input' must hold integers and '{value_col}' numbers ({e})") from e
    if not np.all(np.isfinite(inputs) & (inputs == np.round(inputs))):
        bad = inputs[~(np.isfinite(inputs) & (inputs == np.round(inputs)))][0]
        raise SourceError(f"concept table {path}: 'input' must hold whole row numbers; found {bad}")
    outside = np.flatnonzero((inputs < 0) | (inputs >= n_inputs))
    if outside.size:  # before the cast, which would wrap a huge number
        raise ShapeError(
            f"concept table {path}: row index {int(inputs[outside[0]])} is outside 0..{n_inputs} "
            f"(table row {int(outside[0])})"
        )
    rows = inputs.astype(np.int64)
    src = _from_triplets((n_inputs, len(names)), rows, cols, values, f"concept table {path}")
    return replace(src, kind="table", names=names, files=(path,), origin=str(path))


def _names_file(x: str | os.PathLike[str], what: str) -> list[str]:
    """One name per line; trailing blank lines (a final newline) are not names."""
    path = input_file(x, f"{what} file")
    try:
        names = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise SourceError(f"{what} file {path} is not UTF-8 text: {e}") from e
    while names and names[-1].strip() == "":
        names.pop()
    return names


def write_shards(
    directory: str | os.PathLike[str],
    shards: Sequence[Any],
    *,
    names: Sequence[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Writes a dense shard directory: each array in `shards` (rows x K) as `shard-NNNNN.npy`,
    then `manifest.json` (written last, atomically, so a directory with a manifest is whole).

    Examples
    --------
    >>> import numpy as np, tempfile, neuroneval
    >>> from neuroneval.sources import open_activations, write_shards
    >>> d = write_shards(tempfile.mkdtemp(), [np.ones((2, 3), np.float32), np.zeros((1, 3), np.float32)])
    >>> open_activations(d).shape
    (3, 3)
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    k: int | None = None
    for i, shard in enumerate(shards):
        a = np.asarray(shard)
        if a.ndim != 2:
            raise ShapeError(f"shard {i} has shape {a.shape}; expected 2-D")
        if k is not None and a.shape[1] != k:
            raise ShapeError(f"shard {i} has {a.shape[1]} columns; shard 0 has {k}")
        k = a.shape[1]
        name = f"shard-{i:05d}.npy"
        np.save(directory / name, a)
        entries.append({"file": name, "rows": int(a.shape[0])})
    if k is None:
        raise EmptyInputError("write_shards needs at least one shard")
    if names is not None and len(names) != k:
        raise ShapeError(f"{len(names)} names for {k} columns")
    write_manifest(
        directory,
        layout="dense",
        n_rows=sum(int(e["rows"]) for e in entries),
        n_columns=k,
        shards=entries,
        names=names,
        extra={"dtype": str(np.asarray(shards[0]).dtype), **(extra or {})},
    )
    return directory


def write_triplet_shards(
    directory: str | os.PathLike[str],
    shards: Sequence[tuple[Any, Any, Any]],
    *,
    shape: tuple[int, int],
    names: Sequence[str] | None = None,
) -> Path:
    """Writes a sparse shard directory: each `(row, unit, value)` triplet of arrays in
    `shards` as `shard-NNNNN.npz` (rows count inputs over the whole matrix), then
    `manifest.json` last, atomically. Absent entries are zeros.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from neuroneval.sources import open_activations, write_triplet_shards
    >>> d = write_triplet_shards(tempfile.mkdtemp(), [([0, 2], [1, 0], [0.5, 2.0])], shape=(3, 2))
    >>> src = open_activations(d)
    >>> src.kind, src.shape
    ('sparse', (3, 2))
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    n, k = int(shape[0]), int(shape[1])
    if names is not None and len(names) != k:
        raise ShapeError(f"{len(names)} names for {k} columns")
    entries: list[dict[str, Any]] = []
    for i, (row, unit, value) in enumerate(shards):
        row, unit, value = np.asarray(row, np.int64), np.asarray(unit, np.int64), np.asarray(value)
        if not (row.shape == unit.shape == value.shape) or row.ndim != 1:
            raise ShapeError(f"shard {i}: row, unit and value must be 1-D arrays of one length")
        name = f"shard-{i:05d}.npz"
        np.savez(directory / name, row=row, unit=unit, value=value)
        entries.append({"file": name, "entries": int(row.size)})
    write_manifest(directory, layout="triplets", n_rows=n, n_columns=k, shards=entries, names=names)
    return directory


def write_manifest(
    directory: str | os.PathLike[str],
    *,
    layout: str,
    n_rows: int,
    n_columns: int,
    shards: Sequence[dict[str, Any]],
    names: Sequence[str] | None = None,
    extra: dict[str, Any] | None = None,
    file_name: str = MANIFEST,
) -> Path:
    """Writes a shard directory's manifest atomically (the one writer of the format), after
    its shards: a directory whose manifest exists is whole. The manifest holds the format tag,
    the layout (`"dense"` or `"triplets"`), the shape, the column names and the shard list,
    then any `extra` keys. `file_name` lets a writer keep an unfinished run's manifest under
    another name. Returns the manifest's path.

    Examples
    --------
    >>> import tempfile
    >>> path = write_manifest(tempfile.mkdtemp(), layout="dense", n_rows=0, n_columns=2, shards=[])
    >>> read_manifest(path.parent)["n_columns"]
    2
    """
    if layout not in ("dense", "triplets"):
        raise SourceError(f"unknown shard layout {layout!r} (expected 'dense' or 'triplets')")
    if names is not None and len(names) != n_columns:
        raise ShapeError(f"{len(names)} names for {n_columns} columns")
    fields = {
        "format": _FORMAT,
        "version": 1,
        "layout": layout,
        "n_rows": int(n_rows),
        "n_columns": int(n_columns),
        "names": None if names is None else [str(x) for x in names],
        "shards": list(shards),
        **(extra or {}),
    }
    text = json.dumps(fields, indent=1)
    return write_atomic(Path(directory) / file_name, lambda tmp: tmp.write_text(text, encoding="utf-8"))
