"""The store on disk: the shard directory of each layer, written shard by shard with a
partial manifest while the run is unfinished and closed by ``rows.npy`` and its manifest;
and the finished store as `ActivationStore` and `StoredLayer` read it back."""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from neuroneval.errors import EmptyInputError, ParameterError, ResumeError, SourceError
from neuroneval.files import inside, read_json, write_atomic
from neuroneval.sources import MANIFEST, open_activations, read_manifest, write_manifest

#: The file at the top of an extraction's output directory.
EXTRACT_FILE = "extract.json"
_EXTRACT_FORMAT = "neuroneval-extract"
#: A layer directory's manifest while the run is unfinished (complete shards only).
_PARTIAL = "manifest.partial.json"
#: A layer's row-id table in the finished store.
ROWS_FILE = "rows.npy"

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
        root = Path(path)
        info = _read_json_file(root / EXTRACT_FILE)
        if info is None or info.get("format") != _EXTRACT_FORMAT:
            raise SourceError(f"{root} holds no neuroneval extraction (no valid {EXTRACT_FILE})")
        if not info.get("complete"):
            raise SourceError(
                f"the extraction in {root} is unfinished; run extract again with the same arguments to finish it"
            )
        layers: dict[str, StoredLayer] = {}
        for entry in layer_entries(root, info):
            directory = inside(root, entry["directory"], named_in=root / EXTRACT_FILE)
            try:
                manifest = read_manifest(directory)
                files = [
                    inside(directory, shard["file"], named_in=directory / MANIFEST) for shard in manifest["shards"]
                ]
            except SourceError as e:
                raise SourceError(f"the extraction in {root} is damaged: {e}") from e
            for file in files:
                if not file.is_file():
                    raise SourceError(f"the extraction in {root} is damaged: shard {file} is missing")
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


def layer_entries(root: Path, info: dict[str, Any]) -> list[dict[str, Any]]:
    """The layers listed in `root`'s extract.json, each checked to be an object with a string
    name and directory, else a `SourceError` naming the file."""
    entries = info.get("layers")
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("directory"), str) for e in entries
    ):
        raise SourceError(
            f"the extraction in {root} is damaged: {root / EXTRACT_FILE}'s 'layers' must be a list of objects with a "
            "string 'name' and 'directory'"
        )
    return entries


# --- the layout of a layer ---------------------------------------------------------------------------


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


# --- files -------------------------------------------------------------------------------------------


def _write_json(path: Path, obj: Any) -> None:
    text = json.dumps(obj, indent=1) + "\n"
    write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def _read_json_file(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        value = read_json(path)
    except SourceError:  # unreadable, or not JSON: not a store (the caller says so)
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


# --- a layer's shard directory while the run writes it -----------------------------------------------


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
                if not inside(self.dir, f, named_in=self.dir / _PARTIAL).is_file():
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

    def write_manifest(self, final: bool) -> None:
        """``manifest.json`` of the finished layer, or ``manifest.partial.json`` listing the
        complete shards of an unfinished run (each with where the run resumes after it)."""
        extra: dict[str, Any] = {
            "dtype": self.header["dtype"],
            "model": self.header["model"],
            "layer": self.plan.name,
            "reduce": self.plan.reduce,
            "row_fields": list(self.plan.fields),
            "rows_file": ROWS_FILE,
            "sae": self.header["sae"],
        }
        if not final:
            extra["status"] = "partial"
        write_manifest(
            self.dir,
            layout=self.plan.layout,
            n_rows=self.committed,
            n_columns=self.plan.units,
            names=[f"{self.plan.name or 'model'}[{j}]" for j in range(self.plan.units)],
            shards=[{k: v for k, v in e.items() if k != "next"} if final else e for e in self.entries],
            extra=extra,
            file_name=MANIFEST if final else _PARTIAL,
        )

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
        self.write_manifest(final=False)

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
        self.write_manifest(final=True)

    def clean(self) -> None:
        """Removes what only an unfinished run needs."""
        for i in range(len(self.entries)):
            (self.dir / self.rows_name(i)).unlink(missing_ok=True)
        (self.dir / _PARTIAL).unlink(missing_ok=True)
        _remove_temporaries(self.dir)
