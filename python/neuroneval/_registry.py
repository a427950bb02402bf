"""What each metric is: its parameters, its range, and the paper's sanity-check verdict.

The facts come from the core, where each metric is declared once; this module gives them
their Python form, `MetricInfo`.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import _core

__all__ = ["MetricInfo", "METRICS", "PASSING_METRICS"]


@dataclass(frozen=True)
class MetricInfo:
    """One metric of SPEC section 3.

    Attributes
    ----------
    name : str
        The metric's name, as `neuroneval.metrics` and `score` spell it.
    uses_alpha : bool
        Whether it binarises the unit at its top-alpha fraction.
    uses_lambda : bool
        Whether it takes wpmi's lambda.
    uses_sampling : bool
        Whether it draws a seeded random subset (k, alpha, seed).
    value_range : tuple of float, or None
        The range the sanity checks normalise by; None for data-ranged metrics.
    passes_sanity : bool
        Whether the NeuronEval paper found it passes both sanity checks.
    description : str
        One line on what it measures.
    """

    name: str
    uses_alpha: bool
    uses_lambda: bool
    uses_sampling: bool
    value_range: tuple[float, float] | None
    passes_sanity: bool
    description: str


# The facts are declared once, in the core (`Metric` in neuroneval-core's metric.rs).
METRICS: dict[str, MetricInfo] = {facts[0]: MetricInfo(*facts) for facts in _core.metric_facts()}

PASSING_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS.values() if m.passes_sanity)
