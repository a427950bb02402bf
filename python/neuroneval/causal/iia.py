"""Interchange intervention accuracy (IIA) as MIB aggregates it (SPEC section 7).

`hits[d]` holds, for counterfactual dataset d, whether each example's intervened model output the
causal model's counterfactual output, per (layer, position): a bool array ``[L, P, N_d]``;
`keep[d]` (``[N_d]``) marks the examples the model gets right without intervention.

- `unit_iia`: per (layer, position) the mean over the kept examples of each dataset, averaged
  over the datasets;
- `layer_iia`: per layer the max over positions;
- `summarize`: the mean over layers ("average") and the max ("highest");
- `bootstrap_iia`: percentile intervals of both, resampling each dataset's kept examples.

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

__all__ = ["IIA_BOOTSTRAP_OPTIONS", "bootstrap_iia", "layer_iia", "summarize", "unit_iia"]

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
    kept = _checked(hits, keep)
    opts = IIA_BOOTSTRAP_OPTIONS.resolve(n_boot=n_boot, level=level, seed=seed)
    n_boot, level = opts["n_boot"], opts["level"]
    rng = np.random.default_rng(opts["seed"])
    averages, highests = np.empty(n_boot), np.empty(n_boot)
    for r in range(n_boot):
        units = [h[:, :, rng.integers(0, h.shape[2], h.shape[2])].mean(axis=2) for _, h in kept]
        averages[r], highests[r] = summarize(np.mean(units, axis=0))
    tail = (1 - level) / 2 * 100
    bounds = (tail, 100 - tail)
    a, h = np.percentile(averages, bounds), np.percentile(highests, bounds)
    return (float(a[0]), float(a[1])), (float(h[0]), float(h[1]))
