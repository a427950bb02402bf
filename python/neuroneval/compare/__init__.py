"""`compare`: which explainer explains a model's units better, by how much, with what confidence.

An explanations table holds rows ``(unit, explainer, explanation)``: several explainers (a
lexicon matcher, a top-tokens summary, an LLM), each with at most one explanation per unit; a
concept column over the N probing inputs belongs to each row (a judge's probabilities,
`neuroneval.label`). `compare` scores every (unit, explanation) pair with `neuroneval.compute`
and summarises each explainer over the units it explains, against two baselines scored the same
way, with bootstrap intervals over units (docs/compare.md has the definitions):

- **coverage**: units in all (K), explained, without an explanation, *dead* (constant
  activation over the inputs: every metric is undefined or meaningless, so they are excluded
  from every mean, median, interval and difference, and counted), and per metric the pairs of
  live units whose value is undefined (NaN, e.g. a concept constant over the inputs).
- **summary**: per explainer and metric, the mean and median over its live units with a
  defined value, and a percentile bootstrap interval of the mean.
- **differences**: for every two explainers A, B and metric, over the live units both explain
  with defined values, the mean of A - B with a *paired* percentile bootstrap interval (the
  same resampled units for A and B), and the win rate (the share of units where A > B, ties
  counted half) and tie rate.
- **baselines** (``baselines=True``): each explained unit k has one *reference explanation*
  r(k), drawn uniformly (seeded) from its explanations. ``baseline:random`` pairs unit k with
  the concept of r(sigma(k)), sigma a seeded uniform derangement of the explained units (no
  unit keeps its own); ``baseline:shuffled`` pairs unit k with the concept of r(k) whose input
  rows are permuted by a seeded permutation of its own. Both keep the concepts' prevalence and
  break the link to the unit; an explainer that does not beat them explains nothing.

Every random draw (reference explanations, derangement, permutations, resamples) comes from
`stream_seed` (the `seed` and the draw's names), so results are reproducible bit for bit,
whatever the thread count, and one interval does not change when other explainers are added.

Examples
--------
>>> import numpy as np, polars as pl
>>> from neuroneval.compare import compare
>>> rng = np.random.default_rng(0)
>>> truth = (rng.random((400, 6)) < 0.2).astype(float)         # the concept each unit detects
>>> acts = truth + 0.5 * rng.normal(size=truth.shape)
>>> good = np.clip(truth + 0.2 * rng.normal(size=truth.shape), 0, 1)  # a good explainer's concepts
>>> vague = rng.random(truth.shape)                             # an uninformative one
>>> table = pl.DataFrame({"unit": [*range(6), *range(6)], "explainer": ["good"] * 6 + ["vague"] * 6,
...                       "explanation": [f"concept {k}" for k in range(6)] + ["something"] * 6})
>>> result = compare(acts, table, np.hstack([good, vague]), metrics=["correlation", "auprc"], alpha=0.05, n_boot=200)
>>> result.summary.sort("correlation_rank")["explainer"].to_list()
['good', 'vague', 'baseline:random', 'baseline:shuffled']
>>> d = result.differences.filter(pl.col("metric") == "correlation").row(0, named=True)
>>> d["explainer_a"], d["explainer_b"], d["ci_low"] > 0, d["win_rate"]
('good', 'vague', True, 1.0)
"""

from __future__ import annotations

from .inputs import HookpointChoiceError, activations_hookpoint, explanation_table, judged_concepts
from .result import (
    COMPARISON_FILES,
    COMPARISON_FORMAT,
    EVAL_TYPE_ID,
    Comparison,
    read_sae_config,
    saebench_categories,
    saebench_file_name,
)
from .run import BASELINE_RANDOM, BASELINE_SHUFFLED, BASELINES, COMPARE_OPTIONS, DEFAULT_METRICS, MIN_TOP_SET, compare
from .statistics import (
    BOOTSTRAP_OPTIONS,
    Difference,
    Interval,
    bootstrap_mean,
    paired_difference,
    resample_indices,
    stream_seed,
    unpaired_difference,
)

__all__ = [
    "BASELINES",
    "BASELINE_RANDOM",
    "BASELINE_SHUFFLED",
    "BOOTSTRAP_OPTIONS",
    "COMPARE_OPTIONS",
    "COMPARISON_FILES",
    "COMPARISON_FORMAT",
    "DEFAULT_METRICS",
    "EVAL_TYPE_ID",
    "MIN_TOP_SET",
    "Comparison",
    "Difference",
    "HookpointChoiceError",
    "Interval",
    "activations_hookpoint",
    "bootstrap_mean",
    "compare",
    "explanation_table",
    "judged_concepts",
    "paired_difference",
    "read_sae_config",
    "resample_indices",
    "saebench_categories",
    "saebench_file_name",
    "stream_seed",
    "unpaired_difference",
]
