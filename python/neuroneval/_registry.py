"""What each metric is: its parameters, its range, and the paper's sanity-check verdict."""

from __future__ import annotations

from dataclasses import dataclass

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


_UNIT = (0.0, 1.0)
_SIGNED = (-1.0, 1.0)

METRICS: dict[str, MetricInfo] = {
    m.name: m
    for m in [
        MetricInfo(
            "recall", True, False, False, _UNIT, False, "TP / |b|: share of top-activating inputs that show the concept"
        ),
        MetricInfo(
            "precision", True, False, False, _UNIT, False, "TP / |y|: share of concept inputs that are top-activating"
        ),
        MetricInfo("f1", True, False, False, _UNIT, True, "2TP / (2TP + FP + FN)"),
        MetricInfo("iou", True, False, False, _UNIT, True, "TP / (|b| + |y| - TP)"),
        MetricInfo("accuracy", True, False, False, _UNIT, False, "(TP + TN) / N"),
        MetricInfo("balanced_accuracy", True, False, False, _UNIT, False, "mean of the rates on b = 1 and b = 0"),
        MetricInfo(
            "inverse_balanced_accuracy", True, False, False, _UNIT, False, "mean of the rates on y = 1 and y = 0"
        ),
        MetricInfo("auc", True, False, False, _UNIT, False, "ROC AUC, label b, score c"),
        MetricInfo("inverse_auc", False, False, False, _UNIT, False, "ROC AUC, label y, score a"),
        MetricInfo("auprc", True, False, False, _UNIT, True, "average precision, label b, score c"),
        MetricInfo("inverse_auprc", False, False, False, _UNIT, False, "average precision, label y, score a"),
        MetricInfo("correlation", False, False, False, _SIGNED, True, "Pearson r(a, c) over all inputs"),
        MetricInfo("spearman", False, False, False, _SIGNED, False, "Pearson r of the midranks of a and c"),
        MetricInfo("cosine", False, False, False, _SIGNED, True, "<a, c> / (|a| |c|)"),
        MetricInfo("wpmi", True, True, False, None, False, "mean log c over b minus lambda log mean c"),
        MetricInfo("mad", False, False, False, None, False, "mean a on y = 1 minus mean a on y = 0"),
        MetricInfo(
            "correlation_top_random", False, False, True, _SIGNED, False, "Pearson r on k top + k random inputs"
        ),
        MetricInfo("spearman_top_random", False, False, True, _SIGNED, False, "Spearman on k top + k random inputs"),
        MetricInfo("combined_auc", True, False, False, _UNIT, False, "harmonic mean of auc and inverse_auc"),
        MetricInfo(
            "combined_balanced_accuracy",
            True,
            False,
            False,
            _UNIT,
            False,
            "harmonic mean of balanced_accuracy and inverse_balanced_accuracy",
        ),
        MetricInfo("recall_auc", True, False, False, _UNIT, False, "harmonic mean of recall and auc"),
        MetricInfo("recall_inverse_auc", True, False, False, _UNIT, False, "harmonic mean of recall and inverse_auc"),
        MetricInfo(
            "precision_balanced_accuracy",
            True,
            False,
            False,
            _UNIT,
            False,
            "harmonic mean of precision and balanced_accuracy",
        ),
        MetricInfo(
            "precision_inverse_balanced_accuracy",
            True,
            False,
            False,
            _UNIT,
            False,
            "harmonic mean of precision and inverse_balanced_accuracy",
        ),
    ]
}

PASSING_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS.values() if m.passes_sanity)
