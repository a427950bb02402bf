"""Neuronpedia's explanation exports: ``explanations/batch-N.jsonl.gz``, read as an explanations table.

Neuronpedia's exporter (``utils/neuronpedia-utils/neuronpedia_utils/export-data.py``) writes,
per (model, SAE), ``exports/{modelId}/{sourceId}/`` holding ``model.jsonl``, ``source.jsonl``,
``release.jsonl``, ``sourceset.jsonl`` and the folders ``features/``, ``activations/`` and
``explanations/`` of gzipped JSON-lines batches ``batch-N.jsonl.gz`` (1,024 rows each, ordered
by the index as text). Its auto-interp script (``batch-autointerp.py``) writes the same rows as
``batch-N.jsonl`` (or ``.jsonl.gz``) into an output folder of the user's choice, which beside
an export is an ``explanations-*`` folder (``explanations-gpt-4o-mini``). Each row describes one
explanation: ``modelId``, ``layer`` (the SAE's id, e.g. ``6-res-jb``), ``index`` (the latent,
a string: the database column is text), ``description`` (the explanation),
``explanationModelName`` and ``typeName`` (how it was made), plus fields this reader keeps but
does not need (``id``, ``authorId``, ``embedding``, ...).

A latent may have several explanations; each (typeName, explanationModelName) pair is one
*explainer*, so `neuroneval.compare` can rank them. When one explainer explained a latent more
than once, the later rows are named ``explainer#2``, ``explainer#3`` in file order. A row whose
description is empty (Neuronpedia's database holds some) explains nothing: it is skipped,
counted, and reported in one warning.

Examples
--------
>>> import tempfile
>>> from neuroneval.interop.neuronpedia import read_neuronpedia_explanations, write_neuronpedia_explanations
>>> rows = [
...     {"modelId": "gpt2-small", "layer": "6-res-jb", "index": "3", "description": " dogs",
...      "explanationModelName": "gpt-4o-mini", "typeName": "oai_token-act-pair"},
...     {"modelId": "gpt2-small", "layer": "6-res-jb", "index": "3", "description": "canines",
...      "explanationModelName": "claude", "typeName": "np_max-act-logits"},
... ]
>>> d = tempfile.mkdtemp()
>>> _ = write_neuronpedia_explanations(d, rows)
>>> table = read_neuronpedia_explanations(d, width=16)
>>> table.select("unit", "explainer", "explanation").rows()
[(3, 'np_max-act-logits:claude', 'canines'), (3, 'oai_token-act-pair:gpt-4o-mini', ' dogs')]
"""

from __future__ import annotations

import gzip
import json
import os
import re
import warnings
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import ParameterError, SourceError
from ..files import parse_json, write_files_atomic
from ..options import Option, Options
from ._fields import json_string

__all__ = ["is_neuronpedia_export", "read_neuronpedia_explanations", "write_neuronpedia_explanations"]

_BATCH = re.compile(r"^batch-(\d+)\.jsonl(\.gz)?$")
_FOLDER = re.compile(r"^explanations(-.+)?$")  # explanations/ (the exporter's), explanations-*/ (auto-interp runs)
_INDEX = re.compile(r"^[0-9]+$")
_REQUIRED = ("modelId", "layer", "index", "description")
_MAX_INDEX = 2**63 - 1  # the table's unit column is an int64


def _batches(directory: Path) -> list[Path]:
    found = [p for p in directory.iterdir() if p.is_file() and _BATCH.match(p.name)]
    return sorted(found, key=lambda p: (int(_BATCH.match(p.name)[1]), p.name))  # type: ignore[index]


def _explanation_folders(path: Path) -> list[Path]:
    return sorted(d for d in path.iterdir() if d.is_dir() and _FOLDER.match(d.name))


def is_neuronpedia_export(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is what `read_neuronpedia_explanations` reads: a batch file, a folder of
    batches, or an export folder holding ``explanations/`` or ``explanations-*/`` batches."""
    path = Path(path)
    if path.is_file():
        return bool(_BATCH.match(path.name))
    if not path.is_dir():
        return False
    return bool(_batches(path)) or any(_batches(d) for d in _explanation_folders(path))


def _batch_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise SourceError(f"no Neuronpedia export at {path}")
    direct = _batches(path)
    if direct:
        return direct
    folders = _explanation_folders(path)
    files = [f for d in folders for f in _batches(d)]
    if not files:
        where = f"{path} and its folders {[d.name for d in folders]}" if folders else str(path)
        raise SourceError(
            f"{where} hold no Neuronpedia explanation batches (batch-N.jsonl.gz, or explanations/ and "
            "explanations-*/ folders of them)"
        )
    return files


def _rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) of each non-blank line; a file whose name ends in .gz is gunzipped."""
    try:
        with gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}, line {number}"
                row = parse_json(line, where)  # invalid UTF-8 too is a SourceError naming the line
                if not isinstance(row, dict):
                    raise SourceError(f"{where}: not a JSON object")
                yield where, row
    except (OSError, EOFError, zlib.error) as e:  # a truncated gzip stream ends in EOFError
        raise SourceError(f"{path} is not a readable gzip file (truncated?): {e}") from e


def _index(value: Any, where: str) -> int:
    """The latent: a string of ASCII digits, as the exporter writes it (or a JSON integer)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SourceError(f"{where}: index {value!r} is not a latent index")
    number: int
    if isinstance(value, str):
        if not _INDEX.match(value):
            raise SourceError(f"{where}: index {value!r} is not a latent index")
        digits = value.lstrip("0") or "0"
        if len(digits) > 19:  # int() of it may be refused (Python's digit limit) and would not fit anyway
            raise SourceError(f"{where}: index {value[:40]}{'...' if len(value) > 40 else ''} is too large")
        number = int(digits)
    else:
        number = value
    if number < 0 or number > _MAX_INDEX:
        raise SourceError(f"{where}: index {number} is not a latent index (a non-negative 64-bit integer)")
    return number


def read_neuronpedia_explanations(
    path: str | os.PathLike[str],
    *,
    width: int | None = None,
    model_id: str | None = None,
    layer: str | None = None,
) -> pl.DataFrame:
    """Read Neuronpedia explanation batches as a (unit, explainer, explanation) table.

    Parameters
    ----------
    path : path
        A ``batch-N.jsonl.gz`` (or ``batch-N.jsonl``) file, a directory of them, or an export
        directory (``exports/{modelId}/{sourceId}``) holding ``explanations/`` and
        ``explanations-*/`` folders of them (every such folder is read).
    width : int, optional
        The SAE's number of latents: an index outside 0..width-1 is an error naming the file
        and line (an export of another SAE, or a wrong width).
    model_id, layer : str, optional
        Keep only rows of this model and SAE. Without them the batches must hold one
        (modelId, layer) pair; several are an error listing them.

    Returns
    -------
    polars.DataFrame
        Columns `unit`, `explainer` (``typeName:explanationModelName``, or the one that is
        present), `explanation`, `model_id`, `layer`, `explanation_model`, `type_name`,
        `id`; sorted by unit and explainer. Explanation texts are kept as written (Neuronpedia
        often starts them with a space). Rows whose description is empty or blank are left
        out; a `UserWarning` says how many and where the first was.

    Raises
    ------
    SourceError
        A missing field, a field of another JSON type than the exporter writes (``modelId``,
        ``layer``, ``description`` strings; ``typeName``, ``explanationModelName`` strings or
        null), an index that is not a non-negative integer (a string of digits) or is outside
        the width, a batch that is not UTF-8 JSON lines, a truncated or corrupt batch, no rows
        left; each naming the file and line.
    """
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width <= 0):
        raise ParameterError(f"width must be a positive integer; got {width!r}")
    records: list[dict[str, Any]] = []
    pairs: set[tuple[str, str]] = set()
    empty: list[str] = []
    for file in _batch_files(Path(path)):
        for where, row in _rows(file):
            missing = [k for k in _REQUIRED if k not in row]
            if missing:
                raise SourceError(f"{where}: missing the field(s) {missing} of a Neuronpedia explanation")
            model = json_string(row["modelId"], where, "modelId")
            sae = json_string(row["layer"], where, "layer")
            assert model is not None and sae is not None
            if (model_id is not None and model != model_id) or (layer is not None and sae != layer):
                continue
            pairs.add((model, sae))
            index = _index(row["index"], where)
            if width is not None and index >= width:
                raise SourceError(
                    f"{where}: index {index} is outside 0..{width - 1}; is this the export of another SAE?"
                )
            text = json_string(row["description"], where, "description")
            assert text is not None
            if not text.strip():
                empty.append(where)
                continue
            type_name = json_string(row.get("typeName"), where, "typeName", null=True)
            model_name = json_string(row.get("explanationModelName"), where, "explanationModelName", null=True)
            explainer = ":".join(x for x in (type_name, model_name) if x) or "neuronpedia"
            records.append(
                {
                    "unit": index,
                    "explainer": explainer,
                    "explanation": text,
                    "model_id": model,
                    "layer": sae,
                    "explanation_model": model_name,
                    "type_name": type_name,
                    "id": None if row.get("id") is None else str(row["id"]),
                }
            )
    if len(pairs) > 1:
        raise SourceError(
            f"the export holds explanations of several SAEs {sorted(pairs)}; choose one with model_id= and layer="
        )
    if empty:
        warnings.warn(
            f"skipped {len(empty)} Neuronpedia explanation row(s) with an empty description (the first: {empty[0]})",
            UserWarning,
            stacklevel=2,
        )
    if not records:
        skipped = f" ({len(empty)} rows with an empty description were skipped)" if empty else ""
        raise SourceError(
            f"no Neuronpedia explanations in {path}"
            + (" for that model and layer" if model_id or layer else "")
            + skipped
        )
    seen: dict[tuple[int, str], int] = {}
    for r in records:  # a second explanation by the same explainer is another explainer
        key = (r["unit"], r["explainer"])
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            r["explainer"] = f"{r['explainer']}#{seen[key]}"
    schema = {
        "unit": pl.Int64, "explainer": pl.String, "explanation": pl.String, "model_id": pl.String, "layer": pl.String,
        "explanation_model": pl.String, "type_name": pl.String, "id": pl.String,
    }  # fmt: skip
    return pl.DataFrame(records, schema=schema).sort("unit", "explainer")


#: The options of `write_neuronpedia_explanations`.
EXPORT_OPTIONS = Options(Option("batch_size", "integer", 10_000, "explanation rows per batch-N.jsonl.gz file", low=1))


def write_neuronpedia_explanations(
    directory: str | os.PathLike[str], rows: Sequence[dict[str, Any]], *, batch_size: int | None = None
) -> list[Path]:
    """Write explanation rows (dicts with Neuronpedia's field names) as ``batch-N.jsonl.gz``
    files of `batch_size` rows each (`EXPORT_OPTIONS`), all or none."""
    batch_size = EXPORT_OPTIONS.resolve(batch_size=batch_size)["batch_size"]
    files: dict[str, Any] = {}
    for n, start in enumerate(range(0, max(len(rows), 1), batch_size)):
        text = "".join(json.dumps(r) + "\n" for r in rows[start : start + batch_size])
        data = gzip.compress(text.encode("utf-8"), mtime=0)
        files[f"batch-{n}.jsonl.gz"] = lambda p, data=data: p.write_bytes(data)
    return write_files_atomic(directory, files)
