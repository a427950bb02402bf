"""Index files: the (unit, concept) pairs to score, and each unit's correct concept.

Both are read and checked by type before any work: integers must be integers (a float index
is never truncated), every index must lie inside the matrices.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ._coerce import as_index_array, check_pairs
from .errors import EmptyInputError, PairIndexError, ShapeError, SourceError
from .sources import input_file

__all__ = ["read_pairs", "read_truth"]


def _load_index_npy(p: Path, what: str) -> np.ndarray:
    """An integer index array from a `.npy` file (`what`: "pairs", "truth")."""
    try:
        arr: np.ndarray = np.load(p, allow_pickle=False)
    except Exception as e:  # numpy raises ValueError, OSError, EOFError, ... on corrupt files
        raise SourceError(f"{what} file {p} is not a valid .npy file: {e}") from e
    return arr


def read_pairs(
    path: str | os.PathLike[str], *, n_units: int | None = None, n_concepts: int | None = None
) -> npt.NDArray[np.int64]:
    """(unit, concept) index pairs, in file order, from a CSV file with integer columns `unit`
    and `concept`, or from a `.npy` file holding an (M, 2) integer array.

    With `n_units` and `n_concepts`, the pairs are also checked against that shape: at least
    one pair, every index inside it.

    Examples
    --------
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "pairs.csv")
    >>> _ = open(p, "w").write("unit,concept\\n3,0\\n1,2\\n")
    >>> read_pairs(p).tolist()
    [[3, 0], [1, 2]]
    >>> read_pairs(p, n_units=3, n_concepts=3)
    Traceback (most recent call last):
    ...
    neuroneval.errors.PairIndexError: pairs file ...: pair 0 = (3, 0) is out of range: there are 3 units and 3 concepts
    """
    p = input_file(path, "pairs file")
    if p.suffix == ".npy":
        arr = _load_index_npy(p, "pairs")
        if arr.ndim != 2 or arr.shape[1] != 2 or arr.dtype.kind not in "iu":
            raise SourceError(
                f"pairs file {p} holds a {arr.dtype} array of shape {arr.shape}; expected (M, 2) integers"
            )
        pairs = as_index_array(arr, f"pairs file {p}", PairIndexError)
    elif p.suffix == ".csv":
        import polars as pl

        try:
            table = pl.read_csv(p)
        except Exception as e:  # polars raises many kinds; all mean the file is unreadable
            raise SourceError(f"cannot read the pairs file {p}: {e}") from e
        missing = [c for c in ("unit", "concept") if c not in table.columns]
        if missing:
            raise SourceError(f"pairs file {p} lacks the column(s) {missing}; it has {table.columns}")
        if any(table[c].null_count() for c in ("unit", "concept")):
            raise SourceError(f"pairs file {p} has empty cells")
        columns = []
        for c in ("unit", "concept"):
            # polars' cast would truncate 2.9 to 2: integers are checked as numbers instead
            if not table[c].dtype.is_numeric():
                raise SourceError(f"pairs file {p}: {c!r} must hold integer indices; it holds {table[c].dtype}")
            columns.append(as_index_array(table[c].to_numpy(), f"pairs file {p}: {c!r}", PairIndexError))
        pairs = np.column_stack(columns).reshape(-1, 2)
    else:
        raise SourceError(f"cannot read pairs from {p}: expected a .csv or .npy file")
    if n_units is not None and n_concepts is not None:
        if pairs.shape[0] == 0:
            raise EmptyInputError(f"pairs file {p} holds no pair")
        try:
            check_pairs(pairs, n_units, n_concepts)  # the core's rule: pair i is row i of the file
        except PairIndexError as e:
            raise PairIndexError(f"pairs file {p}: {e}") from None
    return pairs


def read_truth(
    path: str | os.PathLike[str], n_units: int, n_concepts: int, concept_names: Sequence[str] | None = None
) -> npt.NDArray[np.int64]:
    """Each unit's correct concept index, from a `.npy` file of `n_units` integer concept
    indices, or a text file with one line per unit.

    A line that is one of `concept_names` is that concept (names win: a concept may be named
    "3"); otherwise it must be an integer index. Trailing blank lines are ignored. Every index
    must lie in 0..n_concepts - 1.

    Examples
    --------
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "truth.txt")
    >>> _ = open(p, "w").write("dog\\n2\\ncat\\n")
    >>> read_truth(p, 3, 3, ["cat", "dog", "bird"]).tolist()
    [1, 2, 0]
    """
    p = input_file(path, "truth file")
    if p.suffix == ".npy":
        arr = _load_index_npy(p, "truth")
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise SourceError(
                f"truth file {p} holds a {arr.dtype} array of shape {arr.shape}; "
                f"expected ({n_units},) integer concept indices"
            )
        if arr.shape[0] != n_units:
            raise ShapeError(f"truth file {p} has {arr.shape[0]} entries for {n_units} units")
        idx: npt.NDArray[np.int64] = as_index_array(arr, f"truth file {p}")
        place = "entry"
    else:
        idx = _truth_lines(p, n_units, concept_names)
        place = "line"
    bad = (idx < 0) | (idx >= n_concepts)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        where = f"entry {i}" if place == "entry" else f"line {i + 1}"
        raise ShapeError(f"truth file {p} {where}: concept index {idx[i]} is out of range 0..{n_concepts - 1}")
    return idx


def _truth_lines(p: Path, n_units: int, concept_names: Sequence[str] | None) -> npt.NDArray[np.int64]:
    """The concept indices of a truth text file: a concept name or an index per line."""
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise SourceError(f"truth file {p} is not UTF-8 text (or give a .npy file of indices): {e}") from e
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) != n_units:
        raise ShapeError(f"truth file {p} has {len(lines)} lines for {n_units} units")
    column_of = {name: i for i, name in enumerate(concept_names or [])}
    idx = np.empty(len(lines), dtype=np.int64)
    for i, line in enumerate(lines):
        text = line.strip()
        hit = column_of.get(line, column_of.get(text))
        if hit is not None:
            idx[i] = hit
        elif re.fullmatch(r"[+-]?[0-9]+", text):
            idx[i] = int(text)
        elif not text:
            raise SourceError(f"truth file {p} line {i + 1} is empty")
        elif concept_names is None:
            raise SourceError(
                f"truth file {p} line {i + 1}: {text!r} is not a concept index, and the concepts have no "
                "names to match (give --concept-names)"
            )
        else:
            known = ", ".join(repr(n) for n in list(column_of)[:5]) + (", ..." if len(column_of) > 5 else "")
            raise SourceError(f"truth file {p} line {i + 1}: unknown concept name {text!r} (known: {known})")
    return idx
