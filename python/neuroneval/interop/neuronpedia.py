"""Neuronpedia's explanation exports: ``explanations/batch-N.jsonl.gz``, read as an explanations table.

Neuronpedia publishes, per (model, SAE), gzipped JSON-lines batches whose rows describe one
explanation each: ``modelId``, ``layer`` (the SAE's id, e.g. ``6-res-jb``), ``index`` (the
latent, often as a string), ``description`` (the explanation), ``explanationModelName`` and
``typeName`` (how it was made), plus fields this reader keeps but does not need (``id``,
``authorId``, ``createdAt``, ...).

A latent may have several explanations; each (typeName, explanationModelName) pair is one
*explainer*, so `neuroneval.compare` can rank them. When one explainer explained a latent more
than once, the later rows are named ``explainer#2``, ``explainer#3`` in file order.

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
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import ParameterError, SourceError
from ..files import write_files_atomic

__all__ = ["read_neuronpedia_explanations", "write_neuronpedia_explanations"]

_BATCH = re.compile(r"^batch-(\d+)\.jsonl\.gz$")
_REQUIRED = ("modelId", "layer", "index", "description")


def _batch_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise SourceError(f"no Neuronpedia export at {path}")
    inner = path / "explanations"
    directory = inner if inner.is_dir() and not any(path.glob("batch-*.jsonl.gz")) else path
    files = sorted((p for p in directory.iterdir() if _BATCH.match(p.name)), key=lambda p: int(_BATCH.match(p.name)[1]))  # type: ignore[index]
    if not files:
        raise SourceError(f"{directory} holds no Neuronpedia explanation batches (batch-N.jsonl.gz)")
    return files


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise SourceError(f"{path}, line {number}: not a JSON object: {e}") from e
                if not isinstance(row, dict):
                    raise SourceError(f"{path}, line {number}: not a JSON object")
                yield number, row
    except (OSError, EOFError, zlib.error) as e:  # a truncated gzip stream ends in EOFError
        raise SourceError(f"{path} is not a readable gzip file (truncated?): {e}") from e


def _index(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise SourceError(f"{where}: index {value!r} is not a latent index")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise SourceError(f"{where}: index {value!r} is not a latent index")


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
        A ``batch-N.jsonl.gz`` file, a directory of them, or an export directory holding
        ``explanations/``.
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
        often starts them with a space).

    Raises
    ------
    SourceError
        A missing field, an index that is not a non-negative integer or is outside the width,
        an empty description, a truncated or corrupt batch, no rows left.
    """
    if width is not None and (not isinstance(width, int) or width <= 0):
        raise ParameterError(f"width must be a positive integer; got {width!r}")
    records: list[dict[str, Any]] = []
    pairs: set[tuple[str, str]] = set()
    for file in _batch_files(Path(path)):
        for number, row in _rows(file):
            where = f"{file}, line {number}"
            missing = [k for k in _REQUIRED if k not in row]
            if missing:
                raise SourceError(f"{where}: missing the field(s) {missing} of a Neuronpedia explanation")
            model, sae = str(row["modelId"]), str(row["layer"])
            if (model_id is not None and model != model_id) or (layer is not None and sae != layer):
                continue
            pairs.add((model, sae))
            index = _index(row["index"], where)
            if index < 0 or (width is not None and index >= width):
                limit = f"0..{width - 1}" if width is not None else "non-negative"
                raise SourceError(f"{where}: index {index} is outside {limit}; is this the export of another SAE?")
            text = row["description"]
            if not isinstance(text, str) or not text.strip():
                raise SourceError(f"{where}: latent {index} has an empty description")
            type_name, model_name = row.get("typeName"), row.get("explanationModelName")
            explainer = ":".join(str(x) for x in (type_name, model_name) if x) or "neuronpedia"
            records.append(
                {
                    "unit": index,
                    "explainer": explainer,
                    "explanation": text,
                    "model_id": model,
                    "layer": sae,
                    "explanation_model": None if model_name is None else str(model_name),
                    "type_name": None if type_name is None else str(type_name),
                    "id": None if row.get("id") is None else str(row["id"]),
                }
            )
    if len(pairs) > 1:
        raise SourceError(
            f"the export holds explanations of several SAEs {sorted(pairs)}; choose one with model_id= and layer="
        )
    if not records:
        raise SourceError(
            f"no Neuronpedia explanations in {path}" + (" for that model and layer" if model_id or layer else "")
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


def write_neuronpedia_explanations(
    directory: str | os.PathLike[str], rows: Sequence[dict[str, Any]], *, batch_size: int = 10_000
) -> list[Path]:
    """Write explanation rows (dicts with Neuronpedia's field names) as ``batch-N.jsonl.gz``
    files of `batch_size` rows each, all or none."""
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ParameterError(f"batch_size must be a positive integer; got {batch_size!r}")
    files: dict[str, Any] = {}
    for n, start in enumerate(range(0, max(len(rows), 1), batch_size)):
        text = "".join(json.dumps(r) + "\n" for r in rows[start : start + batch_size])
        data = gzip.compress(text.encode("utf-8"), mtime=0)
        files[f"batch-{n}.jsonl.gz"] = lambda p, data=data: p.write_bytes(data)
    return write_files_atomic(directory, files)
