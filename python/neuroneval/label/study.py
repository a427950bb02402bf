"""Judges as raters in the crowd study (SPEC section 6): an expensive judge (an LLM) labels only the
inputs that an MG-IS plan draws from a cheap judge's proposal (an embedding judge), and
`neuroneval.crowd.estimate` turns those labels into each pair's correlation with an interval.

It is the CVPR 2026 pipeline with an LLM in the human's place: the target is the correlation
of each unit with the expensive judge's c(x) over all N inputs, which would cost N judgements
per explanation; the plan asks for `budget` per pair, and pairs that share an explanation share
its judgements (the cache).

Examples
--------
>>> import numpy as np
>>> from neuroneval.label import judge_names
>>> judge_names()[:3]
('minilm', 'e5', 'smollm2')
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import polars as pl

from neuroneval import crowd
from neuroneval.errors import ParameterError, ShapeError
from neuroneval.options import SCORE_OPTIONS, Option, Options

from .cache import LabelCache
from .judge import Judge
from .run import LabelStats, explanations_table, label

__all__ = ["STUDY_OPTIONS", "JudgedStudy", "judged_correlations"]

#: The options of `judged_correlations` of its own (its sampling plan's and interval's other
#: options are `neuroneval.crowd`'s, its labelling's `LABEL_OPTIONS`).
STUDY_OPTIONS = Options(
    Option(
        "estimator",
        "choice",
        "pearson",
        "the correlation estimator: the draws' weighted Pearson correlation (Fisher's interval), or SPEC's "
        "self-normalised plug-in (the bootstrap's)",
        choices=("pearson", "plug-in"),
    ),
    SCORE_OPTIONS["seed"],
    Option("verify", "flag", False, "also judge every input with the expensive judge and report coverage"),
)


@dataclass
class JudgedStudy:
    """The result of `judged_correlations`.

    Attributes
    ----------
    table : polars.DataFrame
        One row per pair: pair, unit, concept, unit_name, explanation, rho, se, ci_low, ci_high,
        draws, inputs (the crowd estimate), and with ``verify=True`` also rho_all (the
        correlation with the expensive judge's labels on all N inputs) and covered (rho_all
        inside the interval).
    plan : neuroneval.crowd.Plan
    cheap : LabelStats
        The cheap judge's cost (all N inputs of every explanation used).
    expensive : LabelStats
        The expensive judge's cost for the estimate (the drawn inputs only).
    n_inputs : int
    explanations_used : int
    verification : LabelStats or None
        With ``verify=True``, the expensive judge's cost of judging every input (the drawn ones
        come from the cache); else None.
    """

    table: pl.DataFrame
    plan: crowd.Plan
    cheap: LabelStats
    expensive: LabelStats
    n_inputs: int
    explanations_used: int
    verification: LabelStats | None = None

    @property
    def expensive_fraction(self) -> float:
        """Expensive judgements made, as a share of judging every input under every explanation used."""
        return self.expensive.pairs / (self.n_inputs * self.explanations_used)

    def coverage(self) -> float:
        """The share of pairs whose interval holds rho_all (``verify=True`` only)."""
        if "covered" not in self.table.columns:
            raise ParameterError("coverage needs a study run with verify=True")
        return float(self.table["covered"].mean())  # type: ignore[arg-type]


def judged_correlations(
    activations: Any,
    pairs: Any,
    inputs: Sequence[Any],
    explanations: Any,
    *,
    cheap: Judge,
    expensive: Judge,
    budget: int,
    sampling: Literal["mgis", "uniform"] | None = None,
    gamma: float | None = None,
    level: float | None = None,
    estimator: Literal["pearson", "plug-in"] | None = None,
    seed: int | None = None,
    cache: LabelCache | str | os.PathLike[str] | None = None,
    verify: bool | None = None,
    unit_names: Sequence[str] | None = None,
    batch_size: int | None = None,
    progress: bool = False,
) -> JudgedStudy:
    """Each (unit, explanation) pair's correlation with the expensive judge's labels, estimated
    from `budget` of them per pair.

    Parameters
    ----------
    activations : array_like, shape (N, K)
        The units' activations over the N inputs.
    pairs : array_like, shape (M, 2)
        (unit, explanation) indices into the columns of `activations` and the rows of `explanations`.
    inputs : sequence
        The N inputs, of the judges' kind.
    explanations : sequence of str or table
        The T explanations (`neuroneval.label.explanations_table`).
    cheap, expensive : Judge
        The cheap judge's probabilities on all N inputs are the concept model of the MG-IS
        plan; the expensive judge labels the drawn inputs, and its probability is each drawn
        input's (soft) label.
    budget : int
        Expensive judgements drawn per pair (with replacement; a repeated input is judged once).
    sampling, gamma, level : optional
        The plan's sampling and MG-IS mixing weight (`neuroneval.crowd.plan`) and the interval's
        level (`neuroneval.crowd.estimate`); None is the default declared there.
    estimator : str, optional
        `STUDY_OPTIONS` (as are `seed` and `verify`). "pearson": the draws' weighted Pearson
        correlation, which a judge's soft labels (probabilities near its base rate, with a small
        spread) need; "plug-in": SPEC's S1 / sqrt(M2 - M1^2), self-normalised, which those labels
        blow up at small budgets (`docs/labels.md` measures both). The interval is Fisher's for
        pearson, the bootstrap's for plug-in.
    verify : bool, optional
        Also judge every input with the expensive judge (N per explanation used) and report
        rho_all and whether each interval covers it: a check of the method, not part of it.
    cache : LabelCache or path, optional
        Shared by both judges (their keys differ). The estimate's cost is counted before the
        verification's judgements, so ``expensive`` is what the estimate alone needs.

    Returns
    -------
    JudgedStudy
    """
    options = STUDY_OPTIONS.resolve(estimator=estimator, seed=seed, verify=verify)
    estimator, seed = options["estimator"], options["seed"]
    table = explanations_table(explanations)
    texts = table["explanation"].to_list()
    a = np.asarray(activations, dtype=np.float64)
    if a.ndim != 2:
        raise ShapeError(f"activations must be 2-D (inputs x units); got shape {a.shape}")
    values = expensive.check_inputs(inputs)
    cheap.check_inputs(values)
    if a.shape[0] != len(values):
        raise ShapeError(f"activations have {a.shape[0]} inputs (rows) but {len(values)} inputs were given")
    pair_array = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    used = sorted({int(t) for t in pair_array[:, 1]})
    if used and (used[0] < 0 or used[-1] >= len(texts)):
        raise ShapeError(
            f"a pair names explanation {used[-1] if used[-1] >= len(texts) else used[0]}, outside 0..{len(texts)}"
        )
    store = LabelCache(cache) if cache is not None and not isinstance(cache, LabelCache) else cache
    try:
        used_table = table[used, :]
        model = np.zeros((len(values), len(texts)))
        cheap_labels = label(cheap, values, used_table, cache=store, batch_size=batch_size, progress=progress)
        model[:, used] = cheap_labels.probabilities
        plan = crowd.plan(
            pair_array,
            a,
            model,
            budget,
            raters_per_input=1,
            gamma=gamma,
            sampling=sampling,
            seed=seed,
            unit_names=unit_names,
            explanations=texts,
        )
        shown = plan.inputs().join(plan.pairs.select("pair", "concept"), on="pair")
        spent = LabelStats()
        label_of: dict[tuple[int, int], float] = {}
        for t in used:
            rows = sorted(set(shown.filter(pl.col("concept") == t)["input"].to_list()))
            got = label(
                expensive,
                [values[i] for i in rows],
                table[[t], :],
                cache=store,
                batch_size=batch_size,
                progress=progress,
            )
            for i, p in zip(rows, got.probabilities[:, 0], strict=True):
                label_of[(t, i)] = float(p)
            for field in ("pairs", "calls", "hits", "tokens", "cost"):
                setattr(spent, field, getattr(spent, field) + getattr(got.stats, field))
        labels = shown.with_columns(
            pl.Series("label", [label_of[(t, i)] for t, i in zip(shown["concept"], shown["input"], strict=True)])
        ).select("pair", "input", "label")
        result = crowd.estimate(
            plan, labels, estimator=estimator, level=level, self_normalised=estimator == "plug-in", seed=seed
        )
        verification = None
        if options["verify"]:
            full = label(expensive, values, used_table, cache=store, batch_size=batch_size, progress=progress)
            verification = full.stats
            column = {t: c for c, t in enumerate(used)}
            rho_all = [
                float(np.corrcoef(a[:, k], full.probabilities[:, column[t]])[0, 1])
                for k, t in zip(result["unit"], result["concept"], strict=True)
            ]
            result = result.with_columns(pl.Series("rho_all", rho_all)).with_columns(
                ((pl.col("ci_low") <= pl.col("rho_all")) & (pl.col("rho_all") <= pl.col("ci_high"))).alias("covered")
            )
    finally:
        if store is not None and store is not cache:
            store.close()
    return JudgedStudy(
        table=result,
        plan=plan,
        cheap=cheap_labels.stats,
        expensive=spent,
        n_inputs=len(values),
        explanations_used=len(used),
        verification=verification,
    )
