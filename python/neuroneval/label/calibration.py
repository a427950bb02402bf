"""`calibrate`: fit a judge's sigmoid on labelled data, through the cache.

Examples
--------
>>> from neuroneval.label import minilm
>>> texts = ["Goal!", "Rain today.", "The match ended 2-1.", "Stocks fell."]
>>> judge = calibrate(minilm(), texts, ["sports"], [[1], [0], [1], [0]])  # doctest: +SKIP
>>> judge.calibration.a > 0  # doctest: +SKIP
True
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from neuroneval.errors import ShapeError

from .cache import LabelCache
from .judge import Judge, fit_calibration
from .run import label

__all__ = ["calibrate"]


def calibrate(
    judge: Judge,
    inputs: Sequence[Any],
    explanations: Any,
    labels: Any,
    *,
    cache: LabelCache | str | os.PathLike[str] | None = None,
    batch_size: int | None = None,
) -> Judge:
    """The judge with a sigmoid fitted on binary `labels` (N inputs x T explanations) of the
    same inputs and explanations: one slope and offset for all explanations, by maximum
    likelihood (`fit_calibration`). The judge's raw scores come through `cache`, so calibrating
    and then labelling the same pairs judges them once; `batch_size` is `label`'s.
    """
    y = np.asarray(labels, dtype=np.float64)
    raw = label(judge, inputs, explanations, cache=cache, batch_size=batch_size).scores
    if y.ndim == 1 and raw.shape[1] == 1:
        y = y[:, None]
    if y.shape != raw.shape:
        raise ShapeError(f"labels must have shape {raw.shape} (inputs x explanations); got {y.shape}")
    return judge.with_calibration(fit_calibration(raw, y))
