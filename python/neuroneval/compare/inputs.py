"""The inputs of `compare`: the explanations table (each row's unit as a column index; of one
hookpoint, when it holds several), the concept source with each row's column in it, and the dead
(constant) units."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from .._coerce import as_table
from ..errors import EmptyInputError, ParameterError, ShapeError, SourceError
from ..label.run import Labels, label
from ..sources import Source, input_file, open_concepts
from .statistics import BLOCK, IntArray

__all__ = [
    "HookpointChoiceError",
    "activations_hookpoint",
    "check_duplicates",
    "concept_source",
    "constant_columns",
    "explanation_table",
    "unit_indices",
]

_TABLE_READERS = {
    ".parquet": pl.read_parquet,
    ".csv": lambda p: pl.read_csv(p, infer_schema=False),  # unit names stay text: "007"
    ".jsonl": pl.read_ndjson,
    ".ndjson": pl.read_ndjson,
}


def _ecosystem_export(path: Path) -> bool:
    """A delphi explanations directory or a Neuronpedia export (directory or batch file)."""
    from ..interop import is_neuronpedia_export

    if path.is_file():
        return path.name.endswith(".jsonl.gz")
    return path.is_dir() and (any(path.glob("*_latent*.txt")) or is_neuronpedia_export(path))


def _read_export(path: Path, module: str | None) -> pl.DataFrame:
    from ..interop import read_delphi_explanations, read_neuronpedia_explanations

    if path.is_dir() and any(path.glob("*_latent*.txt")):
        return read_delphi_explanations(path, module=module)
    return read_neuronpedia_explanations(path)


#: A delphi latent cache's split file, ``{start}_{end}.safetensors`` (delphi's ``save_splits``).
_CACHE_SPLIT = re.compile(r"^\d+_\d+\.safetensors$")


def activations_hookpoint(activations: Any) -> str | None:
    """The hookpoint that `activations` name: a delphi latent cache's directory
    (``latents/{hookpoint}``, holding ``{start}_{end}.safetensors`` splits) is named after its
    hookpoint; anything else names none.

    Examples
    --------
    >>> activations_hookpoint("acts.npy") is None
    True
    """
    if not isinstance(activations, (str, os.PathLike)):
        return None
    path = Path(os.path.abspath(activations))
    try:
        if not path.is_dir() or not any(_CACHE_SPLIT.match(p.name) for p in path.iterdir()):
            return None
    except OSError:  # unreadable: open_activations says why
        return None
    return path.name


class HookpointChoiceError(ParameterError):
    """Explanations of several hookpoints (a delphi run's ``explanations/`` directory, or a
    table with a `module` column), none of them chosen: the units of different hookpoints would
    be scored against one set of activations. `hookpoints` lists them; `message(option)` says
    the same naming another option than the `module` parameter (the command line's)."""

    def __init__(self, where: str, hookpoints: list[str], hookpoint: str | None) -> None:
        self.where, self.hookpoints, self.hookpoint = where, hookpoints, hookpoint
        super().__init__(self.message("module="))

    def __reduce__(self) -> tuple[type[HookpointChoiceError], tuple[str, list[str], str | None]]:
        return type(self), (self.where, self.hookpoints, self.hookpoint)

    def message(self, option: str) -> str:
        """The error, naming `option` as the way to choose."""
        shown = ", ".join(self.hookpoints)
        named = (
            f"the activations' hookpoint {self.hookpoint!r} is none of them"
            if self.hookpoint is not None
            else "the activations name none of them (a delphi latent cache directory names its hookpoint)"
        )
        return (
            f"{self.where} holds the explanations of {len(self.hookpoints)} hookpoints ({shown}) and {named}; "
            f"choose one with {option}"
        )


def _one_hookpoint(table: pl.DataFrame, where: str, module: str | None, activations: Any) -> pl.DataFrame:
    """The rows of one hookpoint: `module`'s, else the only one's, else the activations'."""
    if "module" not in table.columns or table["module"].dtype != pl.String:
        if module is not None:
            raise ParameterError(
                f"module={module!r} chooses a hookpoint of delphi explanations, but {where} has no module column"
            )
        return table
    hookpoints = [h for h in dict.fromkeys(table["module"].to_list()) if h is not None]
    if module is None:
        if len(hookpoints) <= 1:
            return table
        hookpoint = activations_hookpoint(activations)
        if hookpoint not in hookpoints:
            raise HookpointChoiceError(where, hookpoints, hookpoint)
        module = hookpoint
    elif module not in hookpoints:
        raise SourceError(f"{where} holds no explanations of hookpoint {module!r}; it holds {', '.join(hookpoints)}")
    return table.filter(pl.col("module") == module)


def explanation_table(explanations: Any, *, module: str | None = None, activations: Any = None) -> pl.DataFrame:
    """The explanations table that `compare` reads, checked: a polars DataFrame (or anything it
    takes), a delphi explanations directory (`neuroneval.interop.read_delphi_explanations`), a
    Neuronpedia export (`neuroneval.interop.read_neuronpedia_explanations`), or a .csv (every
    column read as text), .parquet or .jsonl file, with the columns
    `unit`, `explainer` (text; integers are written as text) and `explanation` (non-empty text),
    none of them missing a value; other columns are kept.

    A delphi run's ``explanations/`` directory (and a table with delphi's `module` column)
    holds the explanations of every hookpoint it explained, each numbered from latent 0: only
    one hookpoint's rows are read, `module`'s, else the only one's, else the hookpoint of
    `activations` when they are a delphi latent cache directory (``latents/{hookpoint}``,
    `activations_hookpoint`); several with none chosen are a `HookpointChoiceError` that lists
    them.

    Examples
    --------
    >>> explanation_table({"unit": [0, 1], "explainer": ["llm", "llm"], "explanation": ["dogs", " "]})
    Traceback (most recent call last):
    ...
    neuroneval.errors.SourceError: explanation row 1 has an empty explanation
    >>> two = {"unit": [0, 0], "module": ["layers.1", "layers.2"], "explainer": ["run", "run"], "explanation": ["a", "b"]}
    >>> explanation_table(two, module="layers.2")["explanation"].to_list()
    ['b']
    >>> explanation_table(two)
    Traceback (most recent call last):
    ...
    neuroneval.compare.inputs.HookpointChoiceError: the explanations table holds the explanations of 2 hookpoints (layers.1, layers.2) and the activations name none of them (a delphi latent cache directory names its hookpoint); choose one with module=
    """
    if module is not None and (not isinstance(module, str) or not module):
        raise ParameterError(f"module must be a hookpoint's name (non-empty text); got {module!r}")
    where = "the explanations table"
    if isinstance(explanations, (str, os.PathLike)) and _ecosystem_export(Path(explanations)):
        where = str(explanations)
        table = _read_export(Path(explanations), module)
    elif isinstance(explanations, (str, os.PathLike)):
        path = input_file(explanations, "explanations file")
        if path.suffix not in _TABLE_READERS:
            raise SourceError(f"explanations must be a .csv, .parquet or .jsonl table; got {path}")
        try:
            table = _TABLE_READERS[path.suffix](path)
        except Exception as e:  # polars raises many kinds; all mean the file is unreadable
            raise SourceError(f"cannot read the explanations table {path}: {' '.join(str(e).split())}") from e
    else:
        table = as_table(explanations, "explanations", "unit, explainer, explanation")
    table = _one_hookpoint(table, where, module, activations)
    missing = [c for c in ("unit", "explainer", "explanation") if c not in table.columns]
    if missing:
        raise SourceError(
            f"the explanations table lacks the column(s) {', '.join(missing)}; it has {', '.join(table.columns) or 'none'}"
        )
    if table.height == 0:
        raise EmptyInputError("the explanations table has no rows")
    for column in ("unit", "explainer", "explanation", *(["concept"] if "concept" in table.columns else [])):
        nulls = table[column].is_null()
        if nulls.any():
            raise SourceError(f"explanation row {int(nulls.arg_true()[0])} has no {column}")
    for column in ("explainer", "explanation"):
        dtype = table[column].dtype
        if column == "explainer" and dtype.is_integer():
            table = table.with_columns(pl.col(column).cast(pl.String))
        elif dtype != pl.String:
            raise SourceError(f"the explanations table's {column!r} column must hold text; it holds {dtype}")
    empty = table["explanation"].str.strip_chars().str.len_chars() == 0
    if empty.any():
        raise SourceError(f"explanation row {int(empty.arg_true()[0])} has an empty explanation")
    empty = table["explainer"].str.strip_chars().str.len_chars() == 0
    if empty.any():
        raise SourceError(f"explanation row {int(empty.arg_true()[0])} has an empty explainer name")
    return table


def unit_indices(column: pl.Series, n_units: int, names: list[str] | None) -> IntArray:
    """Each row's unit as a column index: an integer, or a text that is a name of `names` (the
    first unit of that name); texts that are whole numbers, none of them a name, are indices."""
    dtype = column.dtype
    if dtype.is_integer():
        largest = int(column.max()) if dtype == pl.UInt64 else 0  # type: ignore[arg-type]
        if largest > np.iinfo(np.int64).max:
            raise ShapeError(f"the explanations table names unit {largest}, beyond int64")
        units = column.cast(pl.Int64).to_numpy()
    elif dtype == pl.String:
        values = column.to_list()
        lookup: dict[str, int] = {}
        for i, name in enumerate(names or []):
            lookup.setdefault(name, i)
        whole = all(v.strip().isascii() and v.strip().isdigit() for v in values)
        if names is not None and not (whole and not any(v in lookup for v in values)):
            for row, v in enumerate(values):
                if v not in lookup:
                    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
                    raise SourceError(f"explanation row {row}: unit {v!r} is not a unit name (the units are {shown})")
            units = np.array([lookup[v] for v in values], dtype=np.int64)
        else:  # indices written as text (a CSV reads every column as text)
            for row, v in enumerate(values):
                if not (v.strip().isascii() and v.strip().isdigit()):
                    raise SourceError(
                        f"explanation row {row}: unit {v!r} is not a unit index, and the activations have no unit "
                        "names (pass unit_names)"
                    )
            units = np.array([int(v) for v in values], dtype=np.int64)
    else:
        raise SourceError(
            f"the explanations table's 'unit' column must hold unit indices (integers) or unit names (text); it holds {dtype}"
        )
    outside = np.flatnonzero((units < 0) | (units >= n_units))
    if outside.size:
        row = int(outside[0])
        raise ShapeError(
            f"explanation row {row}: unit {int(units[row])} is outside 0..{n_units - 1} (the activations have {n_units} units)"
        )
    return np.ascontiguousarray(units, dtype=np.int64)


def check_duplicates(units: IntArray, explainers: list[str]) -> None:
    first: dict[tuple[int, str], int] = {}
    for row, key in enumerate(zip(units.tolist(), explainers, strict=True)):
        if key in first:
            raise SourceError(
                f"explainer {key[1]!r} explains unit {key[0]} twice (explanation rows {first[key]} and {row}); "
                "each explainer gives at most one explanation per unit"
            )
        first[key] = row


def concept_source(concepts: Any, table: pl.DataFrame, n_inputs: int) -> tuple[Source, IntArray]:
    """The concept source and each table row's column in it: column e for row e, or, when the
    table has a `concept` column and the source names its columns, the column of that name."""
    e = table.height
    rows = np.arange(e, dtype=np.int64)
    if isinstance(concepts, Labels):
        probabilities = np.asarray(concepts.probabilities)
        if probabilities.ndim != 2 or probabilities.shape[1] != e:
            raise ShapeError(
                f"the labels hold {probabilities.shape} probabilities; expected (inputs, {e}), one column per explanation row"
            )
        if concepts.explanations:
            texts = table["explanation"].to_list()
            if len(concepts.explanations) != e:
                raise ShapeError(
                    f"the labels carry {len(concepts.explanations)} explanation texts for {e} explanation rows"
                )
            for row, (got, want) in enumerate(zip(concepts.explanations, texts, strict=True)):
                if got != want:
                    raise SourceError(f"explanation row {row} is {want!r}, but the labels' column {row} judged {got!r}")
        return open_concepts(probabilities), rows
    names = table["concept"].cast(pl.String).to_list() if "concept" in table.columns else None
    if isinstance(concepts, (str, os.PathLike)) and Path(concepts).suffix in (".csv", ".parquet"):
        # A long (input, concept, probability) table names its concepts: by the `concept`
        # column, else by the explanation row number.
        wanted = list(dict.fromkeys(names)) if names is not None else [str(i) for i in range(e)]
        src = open_concepts(concepts, n_inputs=n_inputs, concept_names=wanted)
        return src, _columns_by_name(names or wanted, src)
    src = open_concepts(concepts)
    if names is not None and src.names is not None:
        return src, _columns_by_name(names, src)
    if src.n_columns != e:
        raise ShapeError(
            f"the concepts have {src.n_columns} columns but the explanations table has {e} rows; column e holds "
            "the concept of explanation row e"
        )
    return src, rows


def _columns_by_name(names: list[str], src: Source) -> IntArray:
    assert src.names is not None
    lookup = {n: i for i, n in enumerate(src.names)}
    for row, name in enumerate(names):
        if name not in lookup:
            raise SourceError(f"explanation row {row}: the concepts have no column named {name!r}")
    return np.array([lookup[n] for n in names], dtype=np.int64)


def constant_columns(src: Source) -> npt.NDArray[np.bool_]:
    """Which columns are constant over the rows (one pass over the data, by row blocks)."""
    k = src.n_columns
    if isinstance(src.core, tuple):  # CSC: stored values, the absent ones zeros
        n, indptr, _, values = src.core
        counts = np.diff(indptr)
        lo, hi = np.zeros(k), np.zeros(k)
        stored = counts > 0
        if stored.any():
            starts = indptr[:-1][stored]
            lo[stored] = np.minimum.reduceat(values.astype(np.float64), starts)
            hi[stored] = np.maximum.reduceat(values.astype(np.float64), starts)
        gaps = counts < n  # an absent entry is a zero
        lo[gaps], hi[gaps] = np.minimum(lo[gaps], 0.0), np.maximum(hi[gaps], 0.0)
        return np.asarray(lo == hi)
    lo, hi = np.full(k, np.inf), np.full(k, -np.inf)
    for chunk in src.row_chunks(max(1, BLOCK // k)):
        if chunk.shape[0]:
            lo = np.minimum(lo, chunk.min(axis=0).astype(np.float64))
            hi = np.maximum(hi, chunk.max(axis=0).astype(np.float64))
    return np.asarray(lo == hi)


def judged_concepts(
    judge: Any, inputs: Any, explanations: Any, **options: Any
) -> tuple[npt.NDArray[np.float64], Labels]:
    """Each explanation row's concept over `inputs`, made by `judge` (`neuroneval.label.label`),
    as the (N, E) `concepts` of `compare`. Explainers often write the same text for several
    units (a lexicon category, "punctuation"): each distinct text is judged once and its column
    shared by its rows.

    `explanations` is the table `compare` reads (or anything `explanation_table` takes);
    `options` go to `label` (``cache``, ``batch_size``, ``progress``). Returns the concepts and
    the `Labels` of the distinct texts (their judging statistics).
    """
    texts = explanation_table(explanations)["explanation"].to_list()
    distinct = list(dict.fromkeys(texts))
    named = pl.DataFrame({"concept": [str(i) for i in range(len(distinct))], "explanation": distinct})
    labels = label(judge, inputs, named, **options)
    column = {text: i for i, text in enumerate(distinct)}
    return np.ascontiguousarray(labels.probabilities[:, [column[t] for t in texts]]), labels
