"""Interchange intervention accuracy (IIA) as MIB aggregates it (SPEC section 7).

`hits[d]` holds, for counterfactual dataset d, whether each example's intervened model output the
causal model's counterfactual output, per (layer, position): a bool array ``[L, P, N_d]``;
`keep[d]` (``[N_d]``) marks the examples the model gets right without intervention.

- `unit_iia`: per (layer, position) the mean over the kept examples of each dataset, averaged
  over the datasets;
- `layer_iia`: per layer the max over positions;
- `summarize`: the mean over layers ("average") and the max ("highest");
- `bootstrap_iia`: percentile intervals of both, resampling each dataset's kept examples;
- `bootstrap_difference`: two featurizers' (average, highest) differences on the same examples,
  with paired percentile intervals.

Examples
--------
>>> import numpy as np
>>> hits = {"d1": np.array([[[1, 1, 0, 1], [0, 0, 0, 1]], [[1, 1, 1, 1], [1, 0, 0, 0]]], bool)}
>>> keep = {"d1": np.array([True, True, False, True])}
>>> unit_iia(hits, keep).tolist()
[[1.0, 0.3333333333333333], [1.0, 0.3333333333333333]]
>>> summarize(unit_iia(hits, keep))
(1.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from ..compare.statistics import BOOTSTRAP_OPTIONS
from ..errors import EmptyInputError, ShapeError
from ..options import LEVEL, Options

__all__ = ["IIA_BOOTSTRAP_OPTIONS", "bootstrap_difference", "bootstrap_iia", "layer_iia", "summarize", "unit_iia"]

#: The options of `bootstrap_iia`: replicates, the intervals' level, the seed of the draws.
IIA_BOOTSTRAP_OPTIONS = Options(
    replace(BOOTSTRAP_OPTIONS["n_boot"], low=1, help="bootstrap replicates of each IIA interval"),
    LEVEL,
    BOOTSTRAP_OPTIONS["seed"],
)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def _checked(hits: Mapping[str, BoolArray], keep: Mapping[str, BoolArray]) -> list[tuple[str, BoolArray]]:
    if not hits:
        raise EmptyInputError("IIA needs at least one counterfactual dataset")
    if set(hits) != set(keep):
        raise ShapeError(f"hits name the datasets {sorted(hits)}, keep {sorted(keep)}")
    out, shape = [], None
    for name in hits:
        h, k = np.asarray(hits[name], dtype=bool), np.asarray(keep[name], dtype=bool)
        if h.ndim != 3 or k.shape != (h.shape[2],):
            raise ShapeError(
                f"dataset {name!r}: hits of shape {h.shape} and keep of shape {k.shape}; expected [L, P, N] and [N]"
            )
        if shape is not None and h.shape[:2] != shape:
            raise ShapeError(f"dataset {name!r} has {h.shape[:2]} (layers, positions); another has {shape}")
        shape = h.shape[:2]
        if not k.any():
            raise EmptyInputError(f"dataset {name!r}: the model gets none of its examples right, so it has no IIA")
        out.append((name, h[:, :, k]))
    return out


def unit_iia(hits: Mapping[str, BoolArray], keep: Mapping[str, BoolArray]) -> FloatArray:
    """IIA per (layer, position), ``[L, P]``: each dataset's mean over its kept examples, then
    the mean over datasets."""
    kept = _checked(hits, keep)
    out: FloatArray = np.mean([h.mean(axis=2) for _, h in kept], axis=0)
    return out


def layer_iia(unit: FloatArray) -> FloatArray:
    """Per layer, the best position's IIA."""
    out: FloatArray = np.asarray(unit, dtype=np.float64).max(axis=1)
    return out


def summarize(unit: FloatArray) -> tuple[float, float]:
    """(average, highest): the mean and the max over layers of `layer_iia`."""
    per_layer = layer_iia(unit)
    return float(per_layer.mean()), float(per_layer.max())


def bootstrap_iia(
    hits: Mapping[str, BoolArray],
    keep: Mapping[str, BoolArray],
    *,
    n_boot: int | None = None,
    level: float | None = None,
    seed: int | None = None,
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Percentile intervals of (average, highest): each replicate resamples every dataset's kept
    examples with replacement (the same draw for every layer and position, so a replicate is a
    re-run on another sample of examples). Options: `IIA_BOOTSTRAP_OPTIONS`."""
    opts = IIA_BOOTSTRAP_OPTIONS.resolve(n_boot=n_boot, level=level, seed=seed)
    (summaries,) = _replicates([_checked(hits, keep)], opts["n_boot"], opts["seed"])
    return _interval(summaries[:, 0], opts["level"]), _interval(summaries[:, 1], opts["level"])


def bootstrap_difference(
    first: Mapping[str, BoolArray],
    second: Mapping[str, BoolArray],
    keep: Mapping[str, BoolArray],
    *,
    n_boot: int | None = None,
    level: float | None = None,
    seed: int | None = None,
) -> tuple[tuple[float, tuple[float, float]], tuple[float, tuple[float, float]]]:
    """(average, highest) of `first`'s hits minus `second`'s, on the same examples (`keep` for
    both), each with its paired percentile interval: a replicate draws one resample of every
    dataset's kept examples and summarizes both featurizers on it.

    Raises
    ------
    ShapeError
        The two name other datasets, or hold other (layer, position) grids or examples.
    """
    a, b = _checked(first, keep), _checked(second, keep)
    for (name, x), (other, y) in zip(a, b, strict=False):
        if name != other or x.shape != y.shape:
            raise ShapeError(f"the hits compared differ: dataset {name!r} {x.shape} against {other!r} {y.shape}")
    if len(a) != len(b):
        raise ShapeError(f"the hits compared name {len(a)} and {len(b)} datasets")
    opts = IIA_BOOTSTRAP_OPTIONS.resolve(n_boot=n_boot, level=level, seed=seed)
    ra, rb = _replicates([a, b], opts["n_boot"], opts["seed"])
    point = np.subtract(summarize(unit_iia(first, keep)), summarize(unit_iia(second, keep)))
    delta = ra - rb
    return tuple(  # type: ignore[return-value]
        (float(point[i]), _interval(delta[:, i], opts["level"])) for i in range(2)
    )


def _replicates(sets: list[list[tuple[str, BoolArray]]], n_boot: int, seed: int) -> list[FloatArray]:
    """Per set of kept hits (all on the same examples), ``[n_boot, 2]``: (average, highest) of
    each bootstrap replicate, the same draw of every dataset's examples for every set."""
    rng = np.random.default_rng(seed)
    out = [np.empty((n_boot, 2)) for _ in sets]
    for r in range(n_boot):
        draws = [rng.integers(0, h.shape[2], h.shape[2]) for _, h in sets[0]]
        for summaries, kept in zip(out, sets, strict=True):
            units = [h[:, :, i].mean(axis=2) for (_, h), i in zip(kept, draws, strict=True)]
            summaries[r] = summarize(np.mean(units, axis=0))
    return out


def _interval(values: FloatArray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(values, (tail, 100 - tail))
    return float(low), float(high)
