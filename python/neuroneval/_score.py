"""The one entry point to the core: `compute` returns raw arrays, `score` a polars table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from . import _core
from ._coerce import as_pairs
from .errors import ShapeError
from .params import ScoreParams, metric_list
from .sources import Source, open_activations, open_concepts, read_names

__all__ = ["compute", "score", "scores"]

Array = npt.NDArray[np.float64]


def compute(
    activations: Any,
    concepts: Any,
    metrics: str | Sequence[str] | None = None,
    *,
    alpha: float | None = None,
    lam: float | None = None,
    k: int | None = None,
    top_alpha: float | None = None,
    seed: int | None = None,
    pairs: Any = None,
) -> dict[str, Array]:
    """Scores of each metric: a (K, T) float64 array, or (M,) for `pairs`.

    One call shares every unit's transforms (sort, top-alpha set, moments) between all metrics.

    Parameters
    ----------
    activations : array_like, path or sparse matrix, shape (N, K)
        One column per unit: numpy or torch (float16/bfloat16/float32/float64, any strides),
        a `.npy` file or shard directory, or a `scipy.sparse` matrix (`neuroneval.sources`).
    concepts : array_like, path or sparse matrix, shape (N, T)
        Concept probabilities in [0, 1], one column per explanation; also a `.parquet` or
        `.csv` table of (input, concept, probability) rows.
    metrics : str or sequence of str, optional
        Names from `neuroneval.METRICS`; all of them when omitted.
    alpha, lam, k, top_alpha, seed : optional
        The scoring parameters, declared in the core (`neuroneval.ScoreParams()` shows the
        defaults, `neuroneval score --help` the defaults and domains); None stands for the
        default.
    pairs : array_like, shape (M, 2), optional
        Score only these (unit, concept) index pairs.

    Examples
    --------
    >>> import numpy as np, neuroneval
    >>> a = np.array([[0.9], [0.1], [0.8], [0.2]])
    >>> c = np.array([[1.0], [0.0], [1.0], [0.0]])
    >>> neuroneval.compute(a, c, ["correlation", "auprc"], alpha=0.5)["auprc"]
    array([[1.]])
    """
    acts, conc = _inputs(activations, concepts)
    names = metric_list(metrics)
    params = ScoreParams(alpha=alpha, lam=lam, k=k, top_alpha=top_alpha, seed=seed)
    return scores(acts, conc, names, params, None if pairs is None else as_pairs(pairs))


def _inputs(activations: Any, concepts: Any) -> tuple[Source, Source]:
    acts = open_activations(activations)
    conc = open_concepts(concepts, n_inputs=acts.n_rows)
    if acts.n_rows != conc.n_rows:
        raise ShapeError(f"activations have {acts.n_rows} inputs (rows) but concepts have {conc.n_rows}")
    return acts, conc


def scores(
    acts: Source,
    conc: Source,
    names: list[str],
    params: ScoreParams,
    pairs: Any = None,
    *,
    binary_units: bool = False,
    reference_values: bool = False,
) -> dict[str, Array]:
    """Each metric of `names` for two opened sources: (K, T) arrays, or (M,) for an (M, 2)
    int64 `pairs` array. The one call into the core's scoring, for `compute`, `score` and the
    compat drop-ins (which alone set the NeuronEval reference's conventions: `binary_units`,
    units already binary; `reference_values`, its values where SPEC's are undefined)."""
    conventions = {"binary_units": binary_units, "reference_values": reference_values}
    if pairs is None:
        values = _core.score_matrix(acts.core, conc.core, names, params, **conventions)
    else:
        values = _core.score_pairs(acts.core, conc.core, pairs, names, params, **conventions)
    return dict(zip(names, values, strict=True))


def score(
    activations: Any,
    concepts: Any,
    metrics: str | Sequence[str] | None = None,
    *,
    alpha: float | None = None,
    lam: float | None = None,
    k: int | None = None,
    top_alpha: float | None = None,
    seed: int | None = None,
    unit_names: Sequence[str] | None = None,
    concept_names: Sequence[str] | None = None,
    pairs: Any = None,
) -> pl.DataFrame:
    """A tidy table: one row per (unit, concept) pair, one float64 column per metric.

    Takes the arguments of `compute`, plus names for the units and concepts (integer
    indices when omitted). Rows come unit-major (all concepts of unit 0 first), or in the
    order of `pairs`.

    Examples
    --------
    >>> import numpy as np, neuroneval
    >>> a = np.array([[0.9, 0.1], [0.1, 0.8], [0.8, 0.3], [0.2, 0.9]])
    >>> c = np.array([[1.0], [0.0], [1.0], [0.0]])
    >>> neuroneval.score(a, c, ["correlation"], concept_names=["dog"]).shape
    (2, 3)
    """
    acts, conc = _inputs(activations, concepts)
    n_units, n_concepts = acts.n_columns, conc.n_columns
    unit_names = read_names(unit_names, n_units, "unit_names") or acts.names
    concept_names = read_names(concept_names, n_concepts, "concept_names") or conc.names
    pair_array = None if pairs is None else as_pairs(pairs)
    names = metric_list(metrics)
    params = ScoreParams(alpha=alpha, lam=lam, k=k, top_alpha=top_alpha, seed=seed)
    values = scores(acts, conc, names, params, pair_array)
    if pair_array is None:
        unit_idx = np.repeat(np.arange(n_units), n_concepts)
        concept_idx = np.tile(np.arange(n_concepts), n_units)
    else:
        unit_idx, concept_idx = pair_array[:, 0], pair_array[:, 1]
    columns: dict[str, Any] = {
        "unit": _labels(unit_idx, unit_names),
        "concept": _labels(concept_idx, concept_names),
    }
    for name, v in values.items():
        columns[name] = v.reshape(-1)
    return pl.DataFrame(columns)


def _labels(index: npt.NDArray[Any], names: Sequence[str] | None) -> Any:
    if names is None:
        return index.astype(np.int64)
    return pl.Series([str(n) for n in names], dtype=pl.String).gather(index.astype(np.int64))
