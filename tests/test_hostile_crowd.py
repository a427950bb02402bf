"""Hostile input to `neuroneval.crowd`, `neuroneval.sanity` and `neuroneval.meta`, and to their
commands: every bad argument raises the library's own error (a `NeuronEvalError` that is also a
`ValueError`), of one exact class, with a message naming the argument; never a numpy, polars
or Python TypeError, KeyError or IndexError, and never a silently wrong result (a bool read as
1, a float truncated, a complex number cut to its real part). The commands answer each bad
input with exit status 2 and one line on stderr.

Each case changes one argument of a call that is otherwise valid. The crowd's declared options
(`crowd.PLAN_OPTIONS` and the others) are refused past their domains by the cases that
`test_declared_options.py` generates; here each public function is checked to refuse each of
its options by that declaration, and to take None for the declared default. The last tests
check that the edge values that are valid still work (votes = positive, numpy integers,
bfloat16 tensors).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from cli_helpers import assert_one_line_error, run
from neuroneval import crowd, errors, meta, sanity
from numpy.testing import assert_allclose, assert_array_equal
from option_doors import assert_refused_as_declared, refused_values

# --------------------------------------------------------------------------------------------
# Data: small, valid, shared by every case.

_RNG = np.random.default_rng(20)
N_INPUTS = 60
ACTS = _RNG.normal(size=(N_INPUTS, 3)) + np.array([0.0, 10.0, -3.0])
MODEL = _RNG.random((N_INPUTS, 4))
PLAN = crowd.plan([(0, 0), (1, 2)], ACTS, MODEL, budget=30, seed=0)
RATINGS = pl.concat(
    PLAN.inputs().with_columns(rater=pl.lit(rater), vote=(pl.col("input") + rater) % 2) for rater in range(3)
)
LABELS = crowd.aggregate(RATINGS, "mean", plan=PLAN)
RCE = pl.DataFrame(
    {"sampling": ["mgis"] * 3, "aggregation": ["bragg"] * 3, "budget": [100, 200, 400], "rce": [0.5, 0.3, 0.1]}
)


def _simulation_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    y = (rng.random((120, 2)) < 0.3).astype(np.float64)
    a = 2 * y + rng.normal(size=(120, 2))
    return a, y, np.clip(0.6 * y + 0.2 * rng.random((120, 2)), 0, 1)


SIM_ACTS, SIM_LABELS, SIM_MODEL = _simulation_data()


def _sanity_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    c = (rng.random((200, 4)) < 0.2).astype(np.float64)
    a = np.concatenate([c + 0.3 * rng.random((200, 4))] * 2, axis=1)  # 8 units, unit k explains k % 4
    return a, c, np.arange(8) % 4


UNITS, CONCEPTS, TRUTH = _sanity_data()
HALF = np.full((20, 2), 0.5)
SCORES = np.random.default_rng(5).random((4, 3))
TRUTH4 = np.array([0, 1, 2, 0])
HUGE_UINT = np.array([0, 1, 2, np.iinfo(np.uint64).max], dtype=np.uint64)


def _with(table: pl.DataFrame, **columns: Any) -> pl.DataFrame:
    return table.with_columns(**{k: pl.Series(k, v) if isinstance(v, list) else v for k, v in columns.items()})


def _nan_at(a: np.ndarray, row: int, column: int) -> np.ndarray:
    out = a.astype(np.float64).copy()
    out[row, column] = np.nan
    return out


def _constant_column(a: np.ndarray, column: int) -> np.ndarray:
    out = a.copy()
    out[:, column] = 1.5
    return out


# Callers with one argument to override; the rest valid.
def _plan(**kw: Any) -> Any:
    return crowd.plan(
        kw.pop("pairs", [(0, 0)]),
        kw.pop("activations", ACTS),
        kw.pop("concept_model", MODEL),
        kw.pop("budget", 30),
        **kw,
    )


def _simulate(**kw: Any) -> Any:
    args = {"trials": 2, "progress": False, **kw}
    return crowd.simulate(
        args.pop("activations", SIM_ACTS),
        args.pop("labels", SIM_LABELS),
        args.pop("concept_model", SIM_MODEL),
        args.pop("pairs", [(0, 0)]),
        args.pop("budgets", [30]),
        **args,
    )


def _estimate(**kw: Any) -> Any:
    return crowd.estimate(kw.pop("plan", PLAN), kw.pop("labels", LABELS), **{"bootstrap": 0, **kw})


def _decrease(**kw: Any) -> Any:
    return sanity.decrease_accuracy(
        kw.pop("metric", "f1"),
        kw.pop("activations", UNITS),
        kw.pop("concepts", CONCEPTS),
        kw.pop("truth", TRUTH),
        **{"alpha": 0.1, **kw},
    )


def _experimental(**kw: Any) -> Any:
    return sanity.experimental(
        kw.pop("activations", UNITS),
        kw.pop("concepts", CONCEPTS),
        kw.pop("truth", TRUTH),
        kw.pop("metrics", ["f1"]),
        **{"alpha": 0.1, "validation": 0.25, **kw},
    )


def _theoretical(**kw: Any) -> Any:
    return sanity.theoretical(kw.pop("metrics", ["f1"]), **{"n": 20_000, "seeds": 10, **kw})


def _tune(**kw: Any) -> Any:
    return meta.tune(
        kw.pop("activations", UNITS),
        kw.pop("concepts", CONCEPTS),
        kw.pop("truth", TRUTH),
        kw.pop("metrics", ["f1"]),
        **{"alphas": [0.05, 0.1], "lams": [0.0, 1.0], **kw},
    )


def _meta_evaluate(**kw: Any) -> Any:
    return meta.meta_evaluate(
        kw.pop("activations", UNITS),
        kw.pop("concepts", CONCEPTS),
        kw.pop("truth", TRUTH),
        kw.pop("metrics", ["f1"]),
        **{"validation": 0.25, **kw},
    )


def case(call: Callable[[], Any], error: type[Exception], fragment: str, id: str) -> Any:
    return pytest.param(call, error, fragment, id=id)


B = crowd.bragg_posterior
A0, M0 = ACTS[:, 0], MODEL[:, 0]

CROWD_CASES = [
    # bragg_posterior: counts are integers with 0 <= positive <= votes
    case(lambda: B(5, 3), errors.ParameterError, "positive", "bragg more positive than votes"),
    case(lambda: B([0, 4], [3, 3]), errors.ParameterError, "positive", "bragg array more positive than votes"),
    case(lambda: B(-1, 3), errors.ParameterError, "positive", "bragg negative positive"),
    case(lambda: B(0, -2), errors.ParameterError, "votes", "bragg negative votes"),
    case(lambda: B([0, -1], 3), errors.ParameterError, "positive", "bragg negative in array"),
    case(lambda: B(2.5, 3), errors.ParameterError, "positive", "bragg fractional positive"),
    case(lambda: B(2.0, 3), errors.ParameterError, "positive", "bragg whole float positive"),
    case(lambda: B(1, 3.0), errors.ParameterError, "votes", "bragg float votes"),
    case(lambda: B(np.array([1.0, 2.0]), 3), errors.ParameterError, "positive", "bragg float array"),
    case(lambda: B(True, 3), errors.ParameterError, "positive", "bragg bool positive"),
    case(lambda: B(1, True), errors.ParameterError, "votes", "bragg bool votes"),
    case(lambda: B(np.array([True, False]), 3), errors.ParameterError, "positive", "bragg bool array"),
    case(lambda: B(1j, 3), errors.ParameterError, "positive", "bragg complex positive"),
    case(lambda: B(np.array([1 + 0j]), 3), errors.DTypeError, "positive", "bragg complex array"),
    case(lambda: B("1", 3), errors.ParameterError, "positive", "bragg string positive"),
    case(lambda: B(["1"], 3), errors.DTypeError, "positive", "bragg string array"),
    case(lambda: B(None, 3), errors.ParameterError, "positive", "bragg None positive"),
    case(lambda: B(1, None), errors.ParameterError, "votes", "bragg None votes"),
    case(lambda: B([[1], [1, 2]], 3), errors.ShapeError, "positive", "bragg ragged positive"),
    case(lambda: B([1, 2, 3], [3, 3]), errors.ShapeError, "positive, votes", "bragg shapes do not broadcast"),
    case(lambda: B(1, 3, eta=True), errors.ParameterError, "eta", "bragg bool eta"),
    case(lambda: B(1, 3, eta="0.2"), errors.ParameterError, "eta", "bragg string eta"),
    case(lambda: B(1, 3, eta=0.2j), errors.ParameterError, "eta", "bragg complex eta"),
    case(lambda: B(1, 3, eta=0.5), errors.ParameterError, "eta", "bragg eta 0.5"),
    case(lambda: B([1, 1], 3, eta=[0.2, 0.6]), errors.ParameterError, "eta", "bragg eta array out of range"),
    case(lambda: B(1, 3, eta=np.array([0.2j])), errors.DTypeError, "eta", "bragg complex eta array"),
    case(lambda: B(1, 3, prior=True), errors.ParameterError, "prior", "bragg bool prior"),
    case(lambda: B(1, 3, prior="model"), errors.ParameterError, "prior", "bragg prior word"),
    case(lambda: B(1, 3, prior=0.0), errors.ParameterError, "prior", "bragg prior 0"),
    case(lambda: B(1, 3, prior=np.nan), errors.ParameterError, "prior", "bragg NaN prior"),
    case(lambda: B(1, 3, prior=[[0.5], [0.5, 0.2]]), errors.ShapeError, "prior", "bragg ragged prior"),
    # proposal
    case(lambda: crowd.proposal(A0 + 0j, M0), errors.DTypeError, "activations_k", "proposal complex activations"),
    case(lambda: crowd.proposal(["a"] * 60, M0), errors.DTypeError, "activations_k", "proposal string activations"),
    case(lambda: crowd.proposal([[1, 2], [1]], M0[:2]), errors.ShapeError, "activations_k", "proposal ragged"),
    case(lambda: crowd.proposal(None, M0), errors.DTypeError, "activations_k", "proposal None activations"),
    case(lambda: crowd.proposal(A0, M0 + 0j), errors.DTypeError, "concept_model_probs", "proposal complex model"),
    case(lambda: crowd.proposal(A0, M0[:10]), errors.ShapeError, "concept_model_probs", "proposal short model"),
    case(lambda: crowd.proposal(A0, MODEL), errors.ShapeError, "concept_model_probs", "proposal 2-D model"),
    case(lambda: crowd.proposal(np.full(60, 2.0), M0), errors.ParameterError, "activations", "proposal constant unit"),
    case(lambda: crowd.proposal([], []), errors.EmptyInputError, "activations_k", "proposal empty"),
    # plan
    case(lambda: _plan(budget=True, raters_per_input=1), errors.ParameterError, "budget", "plan bool budget"),
    case(lambda: _plan(budget=30.0), errors.ParameterError, "budget", "plan float budget"),
    case(lambda: _plan(budget="30"), errors.ParameterError, "budget", "plan string budget"),
    case(lambda: _plan(budget=None), errors.ParameterError, "budget", "plan None budget"),
    case(lambda: _plan(budget=2), errors.ParameterError, "budget", "plan budget below raters"),
    case(lambda: _plan(unit_names="abc"), errors.ParameterError, "unit_names", "plan unit_names a string"),
    case(lambda: _plan(unit_names=[1.5, "b", "c"]), errors.ParameterError, "unit_names", "plan unit_names a float"),
    case(lambda: _plan(unit_names=5), errors.ParameterError, "unit_names", "plan unit_names a number"),
    case(lambda: _plan(explanations=["a", "b", "c", None]), errors.ParameterError, "explanations", "plan None name"),
    case(lambda: _plan(pairs=[(0.5, 0)]), errors.DTypeError, "pairs", "plan float pair"),
    case(lambda: _plan(pairs=[(True, False)]), errors.DTypeError, "pairs", "plan bool pair"),
    case(lambda: _plan(pairs=[("a", 0)]), errors.DTypeError, "pairs", "plan string pair"),
    case(lambda: _plan(pairs=[(0, 9)]), errors.PairIndexError, "pair", "plan pair out of range"),
    case(lambda: _plan(activations=ACTS + 0j), errors.DTypeError, "activations", "plan complex activations"),
    case(lambda: _plan(activations=[[1.0, 2.0], [1.0]]), errors.ShapeError, "activations", "plan ragged activations"),
    case(
        lambda: _plan(activations=ACTS[:0], concept_model=MODEL[:0]),
        errors.EmptyInputError,
        "activations",
        "plan no inputs",
    ),
    case(
        lambda: _plan(activations=_nan_at(ACTS, 4, 0)), errors.NonFiniteError, "activations column 0", "plan NaN unit"
    ),
    case(
        lambda: _plan(activations=_constant_column(ACTS, 0)),
        errors.ParameterError,
        "activations column 0",
        "plan constant unit",
    ),
    case(lambda: _plan(concept_model=MODEL * 2), errors.ConceptRangeError, "concept_model column 0", "plan model > 1"),
    case(lambda: _plan(concept_model=MODEL.astype(str)), errors.DTypeError, "concept_model", "plan string model"),
    # Plan methods
    case(lambda: crowd.Plan.read(None), errors.ParameterError, "path", "read None path"),
    case(lambda: PLAN.write(5), errors.ParameterError, "path", "write number path"),
    # aggregate and rater_error_rates
    case(lambda: crowd.aggregate("ratings.csv"), errors.ShapeError, "ratings", "aggregate a string"),
    case(lambda: crowd.aggregate(None), errors.ShapeError, "ratings", "aggregate None"),
    case(lambda: crowd.aggregate(RATINGS.drop("vote")), errors.ShapeError, "vote", "aggregate no vote column"),
    case(
        lambda: crowd.aggregate(_with(RATINGS, vote=pl.lit("yes"))), errors.LabelError, "vote", "aggregate text votes"
    ),
    case(lambda: crowd.aggregate(_with(RATINGS, vote=pl.lit(0.5))), errors.LabelError, "vote", "aggregate half votes"),
    case(lambda: crowd.aggregate(_with(RATINGS, pair=pl.lit(0.0))), errors.LabelError, "pair", "aggregate float pair"),
    case(
        lambda: crowd.aggregate(_with(RATINGS, input=pl.lit("x"))), errors.LabelError, "input", "aggregate text input"
    ),
    case(
        lambda: crowd.aggregate(_with(RATINGS, pair=pl.lit(2**64 - 1, dtype=pl.UInt64))),
        errors.LabelError,
        "pair",
        "aggregate pair beyond int64",
    ),
    case(
        lambda: crowd.aggregate(_with(RATINGS, rater=pl.lit(1.5)), eta="estimate"),
        errors.LabelError,
        "rater",
        "aggregate float rater ids",
    ),
    case(lambda: crowd.aggregate(RATINGS.clear()), errors.EmptyInputError, "rating", "aggregate no rating"),
    case(lambda: crowd.aggregate(RATINGS, "mean", eta=0.7), errors.ParameterError, "eta", "aggregate unused bad eta"),
    case(
        lambda: crowd.aggregate(RATINGS, prior="model"), errors.ParameterError, "plan", "aggregate model prior, no plan"
    ),
    case(lambda: crowd.aggregate(RATINGS, plan="plan.parquet"), errors.ParameterError, "plan", "aggregate plan a path"),
    case(
        lambda: crowd.aggregate(_with(RATINGS, pair=pl.lit(7)), plan=PLAN),
        errors.LabelError,
        "pair 7",
        "aggregate pair the plan did not draw",
    ),
    case(lambda: crowd.rater_error_rates(RATINGS.drop("rater")), errors.ParameterError, "rater", "rates no rater"),
    case(lambda: crowd.rater_error_rates(RATINGS, plan=5), errors.ParameterError, "plan", "rates plan a number"),
    # estimate
    case(lambda: _estimate(plan="plan.parquet"), errors.ParameterError, "plan", "estimate plan a path"),
    case(lambda: _estimate(labels="labels.csv"), errors.ShapeError, "labels", "estimate labels a string"),
    case(
        lambda: _estimate(labels=_with(LABELS, label=pl.lit("a"))), errors.LabelError, "label", "estimate text labels"
    ),
    case(lambda: _estimate(labels=_with(LABELS, pair=pl.lit(0.5))), errors.LabelError, "pair", "estimate float pair"),
    case(
        lambda: _estimate(labels=_with(LABELS, label=pl.lit(1.5))), errors.ConceptRangeError, "labels", "estimate 1.5"
    ),
    case(
        lambda: _estimate(labels=_with(LABELS, label=pl.lit(float("nan")))),
        errors.ConceptRangeError,
        "labels",
        "estimate NaN label",
    ),
    case(lambda: _estimate(labels=LABELS.drop("input")), errors.ShapeError, "input", "estimate no input column"),
    case(
        lambda: _estimate(labels=pl.concat([LABELS, LABELS.head(1)])), errors.LabelError, "label", "estimate duplicate"
    ),
    # simulate
    case(lambda: _simulate(budgets=[30.0]), errors.ParameterError, "budgets", "simulate float budget"),
    case(lambda: _simulate(budgets=[2.5, 30]), errors.ParameterError, "budgets", "simulate fractional budget"),
    case(lambda: _simulate(budgets=[True, 30]), errors.ParameterError, "budgets", "simulate bool budget"),
    case(lambda: _simulate(budgets=30), errors.ParameterError, "budgets", "simulate budgets a number"),
    case(lambda: _simulate(budgets="30"), errors.ParameterError, "budgets", "simulate budgets a string"),
    case(lambda: _simulate(budgets=[]), errors.ParameterError, "budgets", "simulate no budget"),
    case(
        lambda: _simulate(raters_per_input=[3, 0]),
        errors.ParameterError,
        "raters_per_input",
        "simulate raters 0 in a list",
    ),
    case(lambda: _simulate(raters_per_input=[]), errors.ParameterError, "raters_per_input", "simulate no raters"),
    case(lambda: _simulate(progress="no"), errors.ParameterError, "progress", "simulate string progress"),
    case(lambda: _simulate(configurations=[("mgis",)]), errors.ParameterError, "configuration", "simulate 1-tuple"),
    case(lambda: _simulate(configurations="mgis"), errors.ParameterError, "configurations", "simulate string configs"),
    case(lambda: _simulate(configurations=[]), errors.EmptyInputError, "configurations", "simulate no configuration"),
    case(
        lambda: _simulate(configurations=[("mgis", "median")]),
        errors.ParameterError,
        "configuration",
        "simulate unknown aggregation",
    ),
    case(lambda: _simulate(labels=SIM_LABELS * 0.5), errors.LabelError, "labels", "simulate soft labels"),
    case(lambda: _simulate(labels=_nan_at(SIM_LABELS, 2, 1)), errors.LabelError, "labels", "simulate NaN label"),
    case(lambda: _simulate(labels=SIM_LABELS + 0j), errors.DTypeError, "labels", "simulate complex labels"),
    case(lambda: _simulate(pairs=np.zeros((0, 2), int)), errors.EmptyInputError, "pair", "simulate no pair"),
    case(
        lambda: _simulate(activations=_nan_at(SIM_ACTS, 3, 0)),
        errors.NonFiniteError,
        "activations column 0",
        "simulate NaN activation",
    ),
    case(
        lambda: _simulate(concept_model=SIM_MODEL + 1),
        errors.ConceptRangeError,
        "concept_model column 0",
        "simulate model > 1",
    ),
    case(lambda: _simulate(activations=SIM_ACTS[:-1]), errors.ShapeError, "activations", "simulate short activations"),
    # needed_budgets
    case(lambda: crowd.needed_budgets({"x": [1]}, 0.2), errors.ShapeError, "rce", "needed missing columns"),
    case(lambda: crowd.needed_budgets("rce.csv", 0.2), errors.ShapeError, "rce", "needed a string"),
    case(
        lambda: crowd.needed_budgets(_with(RCE, budget=[0, 200, 400]), 0.2), errors.ParameterError, "budget", "needed 0"
    ),
    case(
        lambda: crowd.needed_budgets(_with(RCE, budget=pl.lit("100")), 0.2),
        errors.LabelError,
        "budget",
        "needed text budgets",
    ),
    case(
        lambda: crowd.needed_budgets(_with(RCE, rce=[0.5, None, 0.1]), 0.2),
        errors.LabelError,
        "rce",
        "needed missing rce",
    ),
    case(lambda: crowd.needed_budgets(RCE, None), errors.ParameterError, "target", "needed None target"),
]

SANITY_CASES = [
    case(lambda: sanity.missing_labels(HALF + 0j), errors.DTypeError, "concepts", "missing complex concepts"),
    case(lambda: sanity.extra_labels(HALF + 0j), errors.DTypeError, "concepts", "extra complex concepts"),
    case(lambda: sanity.missing_labels(["a", "b"]), errors.DTypeError, "concepts", "missing string concepts"),
    case(lambda: sanity.extra_labels([[0.5], [0.5, 0.5]]), errors.ShapeError, "concepts", "extra ragged concepts"),
    case(lambda: sanity.missing_labels(None), errors.DTypeError, "concepts", "missing None concepts"),
    case(lambda: sanity.missing_labels(HALF, keep="a"), errors.ParameterError, "keep", "missing string keep"),
    case(lambda: sanity.missing_labels(HALF, keep=True), errors.ParameterError, "keep", "missing bool keep"),
    case(lambda: sanity.missing_labels(HALF, keep=0.5j), errors.ParameterError, "keep", "missing complex keep"),
    case(lambda: sanity.extra_labels(HALF, rate=True), errors.ParameterError, "rate", "extra bool rate"),
    case(lambda: sanity.extra_labels(HALF, rate="2"), errors.ParameterError, "rate", "extra string rate"),
    case(lambda: sanity.extra_labels(HALF, seed=2**64), errors.ParameterError, "seed", "extra seed beyond 64 bits"),
    case(lambda: sanity.SanityResult.concat([]), errors.EmptyInputError, "results", "concat nothing"),
    case(lambda: sanity.SanityResult.concat([5]), errors.ParameterError, "results", "concat a number"),
    case(lambda: _theoretical(seeds=2).to_markdown(paper="no"), errors.ParameterError, "paper", "markdown string flag"),
    case(lambda: _theoretical(seeds=2).write("out", chart="no"), errors.ParameterError, "chart", "write string flag"),
    # decrease_accuracy
    case(lambda: _decrease(metric=["f1"]), errors.UnknownMetricError, "metric", "decrease list metric"),
    case(lambda: _decrease(metric=None), errors.UnknownMetricError, "metric", "decrease None metric"),
    case(lambda: _decrease(truth=TRUTH.astype(float)), errors.LabelError, "truth", "decrease float truth"),
    case(lambda: _decrease(truth=TRUTH % 2 == 0), errors.LabelError, "truth", "decrease bool truth"),
    case(lambda: _decrease(truth=TRUTH + 0j), errors.DTypeError, "truth", "decrease complex truth"),
    case(lambda: _decrease(truth=[[0], [1, 2]]), errors.ShapeError, "truth", "decrease ragged truth"),
    case(lambda: _decrease(truth=np.full(8, 4)), errors.ShapeError, "truth", "decrease truth out of range"),
    case(lambda: _decrease(truth=-TRUTH - 1), errors.LabelError, "truth", "decrease negative truth"),
    case(
        lambda: _decrease(truth=np.full(8, np.iinfo(np.uint64).max, dtype=np.uint64)),
        errors.ShapeError,
        "truth",
        "decrease truth beyond int64",
    ),
    case(lambda: _decrease(truth=["a"] * 8), errors.DTypeError, "truth", "decrease string truth"),
    case(lambda: _decrease(epsilon="x"), errors.ParameterError, "epsilon", "decrease string epsilon"),
    case(lambda: _decrease(epsilon=-0.1), errors.ParameterError, "epsilon", "decrease negative epsilon"),
    case(lambda: _decrease(epsilon=np.nan), errors.ParameterError, "epsilon", "decrease NaN epsilon"),
    case(lambda: _decrease(epsilon=True), errors.ParameterError, "epsilon", "decrease bool epsilon"),
    case(lambda: _decrease(alpha=True), errors.ParameterError, "alpha", "decrease bool alpha"),
    case(lambda: _decrease(k=2.0), errors.ParameterError, "k must", "decrease float k"),
    case(lambda: _decrease(top_alpha=True), errors.ParameterError, "top_alpha", "decrease bool top_alpha"),
    case(lambda: _decrease(activations=UNITS + 0j), errors.DTypeError, "activations", "decrease complex units"),
    case(lambda: _decrease(concepts=CONCEPTS * 2), errors.ConceptRangeError, "concepts", "decrease concepts > 1"),
    case(lambda: _decrease(keep=2), errors.ParameterError, "keep", "decrease keep 2"),
    case(lambda: _decrease(seed=-1), errors.ParameterError, "seed", "decrease negative seed"),
    # experimental
    case(lambda: _experimental(validation=True), errors.ParameterError, "validation", "experimental bool validation"),
    case(lambda: _experimental(validation="0.1"), errors.ParameterError, "validation", "experimental str validation"),
    case(lambda: _experimental(setting=5), errors.ParameterError, "setting", "experimental number setting"),
    case(lambda: _experimental(setting=" "), errors.ParameterError, "setting", "experimental blank setting"),
    case(lambda: _experimental(alpha=None, lam=0.5), errors.ParameterError, "lam", "experimental lam without alpha"),
    case(
        lambda: _experimental(truth=None, truth_alpha=0.0),
        errors.ParameterError,
        "truth_alpha",
        "experimental truth_alpha 0",
    ),
    case(
        lambda: _experimental(truth=None, truth_alpha=True),
        errors.ParameterError,
        "truth_alpha",
        "experimental bool truth_alpha",
    ),
    case(lambda: _experimental(metrics=5), errors.UnknownMetricError, "metrics", "experimental number metrics"),
    case(lambda: _experimental(metrics=[["f1"]]), errors.UnknownMetricError, "metric", "experimental nested metrics"),
    case(lambda: _experimental(activations=UNITS[:, :1]), errors.EmptyInputError, "activations", "experimental 1 unit"),
    case(lambda: _experimental(concepts=CONCEPTS[:-1]), errors.ShapeError, "concepts", "experimental short concepts"),
    case(lambda: _experimental(rate=0.5), errors.ParameterError, "rate", "experimental rate below 1"),
    # theoretical
    case(lambda: _theoretical(n=True), errors.ParameterError, "n must", "theoretical bool n"),
    case(lambda: _theoretical(n=20_000.0), errors.ParameterError, "n must", "theoretical float n"),
    case(lambda: _theoretical(seeds=True), errors.ParameterError, "seeds", "theoretical bool seeds"),
    case(lambda: _theoretical(seeds=10.0), errors.ParameterError, "seeds", "theoretical float seeds"),
    case(lambda: _theoretical(gammas=[True]), errors.ParameterError, "gammas", "theoretical bool gamma"),
    case(lambda: _theoretical(gammas=["0.1"]), errors.ParameterError, "gammas", "theoretical string gamma"),
    case(lambda: _theoretical(gammas=[None]), errors.ParameterError, "gammas", "theoretical None gamma"),
    case(lambda: _theoretical(gammas=0.1), errors.ParameterError, "gammas", "theoretical gammas a number"),
    case(lambda: _theoretical(gammas="0.1"), errors.ParameterError, "gammas", "theoretical gammas a string"),
    case(lambda: _theoretical(keep=True), errors.ParameterError, "keep", "theoretical bool keep"),
    case(lambda: _theoretical(rate="2"), errors.ParameterError, "rate", "theoretical string rate"),
    case(lambda: _theoretical(lam=True), errors.ParameterError, "lam", "theoretical bool lam"),
    case(lambda: _theoretical(epsilon=-1.0), errors.ParameterError, "epsilon", "theoretical negative epsilon"),
    case(lambda: _theoretical(seed=1.5), errors.ParameterError, "seed", "theoretical float seed"),
    case(lambda: _theoretical(metrics=5), errors.UnknownMetricError, "metrics", "theoretical number metrics"),
]

META_CASES = [
    case(lambda: meta.truth_matrix(TRUTH4, (4,)), errors.ShapeError, "shape", "truth_matrix 1-D shape"),
    case(lambda: meta.truth_matrix(TRUTH4, (4, 3.0)), errors.ParameterError, "shape", "truth_matrix float shape"),
    case(lambda: meta.truth_matrix(TRUTH4, "43"), errors.ShapeError, "shape", "truth_matrix string shape"),
    case(lambda: meta.truth_matrix(TRUTH4 + 0j, (4, 3)), errors.DTypeError, "truth", "truth_matrix complex"),
    case(lambda: meta.truth_matrix(TRUTH4.astype(float), (4, 3)), errors.LabelError, "truth", "truth_matrix floats"),
    case(lambda: meta.truth_matrix(TRUTH4 > 0, (4, 3)), errors.LabelError, "truth", "truth_matrix bool indices"),
    case(lambda: meta.truth_matrix([0, 1, 3, 0], (4, 3)), errors.LabelError, "truth", "truth_matrix out of range"),
    case(lambda: meta.truth_matrix(np.full((4, 3), 2), (4, 3)), errors.LabelError, "truth", "truth_matrix not 0/1"),
    case(lambda: meta.truth_matrix(np.full((4, 3), np.nan), (4, 3)), errors.LabelError, "truth", "truth_matrix NaN"),
    case(lambda: meta.truth_matrix([[0], [1, 2]], (4, 3)), errors.ShapeError, "truth", "truth_matrix ragged"),
    case(lambda: meta.truth_matrix(None, (4, 3)), errors.DTypeError, "truth", "truth_matrix None"),
    case(lambda: meta.truth_matrix(["a"] * 4, (4, 3)), errors.DTypeError, "truth", "truth_matrix strings"),
    case(lambda: meta.meta_auprc(SCORES + 1j, TRUTH4), errors.DTypeError, "scores", "meta_auprc complex scores"),
    case(lambda: meta.meta_auprc(SCORES.astype(str), TRUTH4), errors.DTypeError, "scores", "meta_auprc text scores"),
    case(lambda: meta.meta_auprc([[0.1], [0.2, 0.3]], TRUTH4), errors.ShapeError, "scores", "meta_auprc ragged"),
    case(lambda: meta.meta_auprc(SCORES[0], TRUTH4), errors.ShapeError, "scores", "meta_auprc 1-D scores"),
    case(lambda: meta.meta_auprc(None, TRUTH4), errors.DTypeError, "scores", "meta_auprc None scores"),
    case(lambda: meta.meta_auprc(SCORES, [0.0, 1.0, 2.0, 0.0]), errors.LabelError, "truth", "meta_auprc float truth"),
    case(lambda: meta.meta_auprc(SCORES, [True, False] * 2), errors.LabelError, "truth", "meta_auprc bool truth"),
    case(lambda: meta.meta_auprc(SCORES, [0, 1, 5, 0]), errors.LabelError, "truth", "meta_auprc truth out of range"),
    case(lambda: meta.meta_auprc(SCORES, [0, 1, 2]), errors.ShapeError, "truth", "meta_auprc short truth"),
    case(lambda: meta.meta_auprc(SCORES, HUGE_UINT), errors.ShapeError, "truth", "meta_auprc truth beyond int64"),
    case(lambda: meta.split_units(True), errors.EmptyInputError, "n_units", "split bool n_units"),
    case(lambda: meta.split_units("10"), errors.EmptyInputError, "n_units", "split string n_units"),
    case(lambda: meta.split_units(None), errors.EmptyInputError, "n_units", "split None n_units"),
    case(lambda: meta.split_units(10, True), errors.ParameterError, "validation", "split bool validation"),
    case(lambda: meta.split_units(10, "0.1"), errors.ParameterError, "validation", "split string validation"),
    case(lambda: meta.split_units(10, np.nan), errors.ParameterError, "validation", "split NaN validation"),
    case(lambda: meta.split_units(10, 0.1, seed=-1), errors.ParameterError, "seed", "split negative seed"),
    case(lambda: meta.split_units(10, 0.1, seed=1.5), errors.ParameterError, "seed", "split float seed"),
    case(lambda: _tune(alphas=[True]), errors.ParameterError, "alphas", "tune bool alpha"),
    case(lambda: _tune(alphas=["0.1"]), errors.ParameterError, "alphas", "tune string alpha"),
    case(lambda: _tune(alphas=0.1), errors.ParameterError, "alphas", "tune alphas a number"),
    case(lambda: _tune(alphas=[0.0]), errors.ParameterError, "alphas", "tune alpha 0"),
    case(lambda: _tune(alphas=[np.nan]), errors.ParameterError, "alphas", "tune NaN alpha"),
    case(lambda: _tune(metrics=["wpmi"], lams=[-1.0]), errors.ParameterError, "lams", "tune negative lambda"),
    case(lambda: _tune(metrics=["wpmi"], lams=[None]), errors.ParameterError, "lams", "tune None lambda"),
    case(lambda: _tune(lams="01"), errors.ParameterError, "lams", "tune lams a string"),
    case(lambda: _tune(k=True), errors.ParameterError, "k must", "tune bool k"),
    case(lambda: _tune(truth=TRUTH.astype(float)), errors.LabelError, "truth", "tune float truth"),
    case(lambda: _tune(metrics=[["f1"]]), errors.UnknownMetricError, "metric", "tune nested metrics"),
    case(lambda: _tune(activations=UNITS + 0j), errors.DTypeError, "activations", "tune complex activations"),
    case(lambda: _meta_evaluate(lam=0.5), errors.ParameterError, "lam", "meta_evaluate lam without alpha"),
    case(lambda: _meta_evaluate(alpha=True), errors.ParameterError, "alpha", "meta_evaluate bool alpha"),
    case(lambda: _meta_evaluate(alpha="0.1"), errors.ParameterError, "alpha", "meta_evaluate string alpha"),
    case(lambda: _meta_evaluate(validation=1.5), errors.ParameterError, "validation", "meta_evaluate validation"),
    case(lambda: _meta_evaluate(truth=TRUTH.astype(float)), errors.LabelError, "truth", "meta_evaluate float truth"),
    case(lambda: _meta_evaluate(truth=np.full(8, 4)), errors.LabelError, "truth", "meta_evaluate truth out of range"),
    case(
        lambda: _meta_evaluate(activations=UNITS[:, :1]), errors.EmptyInputError, "activations", "meta_evaluate 1 unit"
    ),
    case(lambda: _meta_evaluate(k=0), errors.ParameterError, "k must", "meta_evaluate k 0"),
]


@pytest.mark.parametrize(("call", "error", "fragment"), CROWD_CASES + SANITY_CASES + META_CASES)
def test_bad_argument_raises_a_library_error_naming_it(
    call: Callable[[], Any], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(errors.NeuronEvalError) as info:
        call()
    e = info.value
    assert type(e) is error, f"{type(e).__name__}: {e}"
    assert isinstance(e, ValueError)
    assert fragment.lower() in str(e).lower(), str(e)


# --------------------------------------------------------------------------------------------
# The crowd's declared options: each function checks each of its own by its declaration


ROUTES: list[tuple[str, Callable[..., Any], Any]] = [
    ("plan", _plan, crowd.PLAN_OPTIONS),
    ("tasks", lambda **kw: PLAN.tasks(**kw), crowd.TASK_OPTIONS),
    ("proposal", lambda **kw: crowd.proposal(A0, M0, **kw), crowd.PLAN_OPTIONS.only("gamma")),
    ("aggregate", lambda **kw: crowd.aggregate(RATINGS, **kw), crowd.AGGREGATE_OPTIONS),
    ("rates", lambda **kw: crowd.rater_error_rates(RATINGS, **kw), crowd.AGGREGATE_OPTIONS.only("prior", "max_iter")),
    ("attenuation", lambda **kw: crowd.label_attenuation(0.1, **kw), crowd.ATTENUATION_OPTIONS),
    ("estimate", _estimate, crowd.ESTIMATE_OPTIONS),
    ("simulate", _simulate, crowd.SIMULATE_OPTIONS),
]


@pytest.mark.parametrize(
    ("call", "option"),
    [pytest.param(call, o, id=f"{name} {o.name}") for name, call, group in ROUTES for o in group.values()],
)
def test_each_function_refuses_its_options_by_their_declaration(call: Callable[..., Any], option: Any) -> None:
    for value in refused_values(option):
        assert_refused_as_declared(call, option, value)


def test_none_stands_for_each_declared_default() -> None:
    def nones(group: Any) -> dict[str, None]:
        return dict.fromkeys(group)

    plan = crowd.plan([(0, 0)], ACTS, MODEL, 30, **nones(crowd.PLAN_OPTIONS))
    assert plan.draws.equals(crowd.plan([(0, 0)], ACTS, MODEL, 30, **crowd.PLAN_OPTIONS.defaults()).draws)
    assert plan.tasks(None).equals(plan.tasks(**crowd.TASK_OPTIONS.defaults()))
    assert_array_equal(crowd.proposal(A0, M0, None), crowd.proposal(A0, M0, crowd.PLAN_OPTIONS["gamma"].default))
    labels = crowd.aggregate(RATINGS, **nones(crowd.AGGREGATE_OPTIONS))
    assert labels.equals(crowd.aggregate(RATINGS, **crowd.AGGREGATE_OPTIONS.defaults()))
    eta, prior = crowd.AGGREGATE_OPTIONS["eta"].default, crowd.AGGREGATE_OPTIONS["prior"].default
    assert_array_equal(crowd.bragg_posterior(1, 3, None, None), crowd.bragg_posterior(1, 3, eta, prior))
    assert_array_equal(
        crowd.label_attenuation(0.1, None, None, None, None),
        crowd.label_attenuation(
            0.1, eta, crowd.PLAN_OPTIONS["raters_per_input"].default, crowd.ATTENUATION_OPTIONS["method"].default, prior
        ),
    )
    default = crowd.estimate(PLAN, LABELS, **crowd.ESTIMATE_OPTIONS.defaults() | {"bootstrap": 50})
    assert crowd.estimate(PLAN, LABELS, **nones(crowd.ESTIMATE_OPTIONS) | {"bootstrap": 50}).equals(default)
    sim = _simulate(**nones(crowd.SIMULATE_OPTIONS) | {"trials": 2})
    assert sim.rce.equals(_simulate(**crowd.SIMULATE_OPTIONS.defaults() | {"trials": 2}).rce)
    assert (sim.eta, sim.target, sim.level) == tuple(
        crowd.SIMULATE_OPTIONS[n].default for n in ("eta", "target", "level")
    )


# --------------------------------------------------------------------------------------------
# Files a plan is read from


def _plan_frame() -> pl.DataFrame:
    return PLAN._frame()


PLAN_FILES: dict[str, Callable[[Path], Path]] = {
    "missing": lambda d: d / "gone.parquet",
    "directory": lambda d: _mkdir(d / "plan.parquet"),
    "garbage": lambda d: _write_bytes(d / "plan.parquet", b"PAR1 not a parquet file"),
    "a csv file": lambda d: _write_bytes(d / "plan.parquet", b"pair,input\n0,1\n"),
    "wrong columns": lambda d: _parquet(d, pl.DataFrame({"pair": [0], "input": [1]})),
    "no rows": lambda d: _parquet(d, _plan_frame().clear()),
    "input as text": lambda d: _parquet(d, _plan_frame().with_columns(pl.col("input").cast(pl.String))),
    "weight missing": lambda d: _parquet(d, _plan_frame().with_columns(weight=pl.lit(None, dtype=pl.Float64))),
    "gamma 5": lambda d: _parquet(d, _plan_frame().with_columns(gamma=pl.lit(5.0))),
    "input out of range": lambda d: _parquet(d, _plan_frame().with_columns(input=pl.lit(N_INPUTS))),
    "unknown sampling": lambda d: _parquet(d, _plan_frame().with_columns(sampling=pl.lit("magic"))),
}


def _mkdir(p: Path) -> Path:
    p.mkdir()
    return p


def _write_bytes(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def _parquet(d: Path, frame: pl.DataFrame) -> Path:
    frame.write_parquet(d / "plan.parquet")
    return d / "plan.parquet"


@pytest.mark.parametrize("kind", list(PLAN_FILES))
def test_plan_read_refuses_bad_files(tmp_path: Path, kind: str) -> None:
    path = PLAN_FILES[kind](tmp_path)
    with pytest.raises(errors.SourceError) as info:
        crowd.Plan.read(path)
    assert isinstance(info.value, ValueError)
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------------------------
# The commands: exit status 2 and one line on stderr


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    rng = np.random.default_rng(6)
    n = 300
    y = (rng.random((n, 3)) < [0.1, 0.2, 0.3]).astype(np.float64)
    a = (np.column_stack([2 * y[:, 0], y[:, 1], y[:, 2], rng.random(n)]) + rng.normal(size=(n, 4))).astype(np.float32)
    model = np.clip(0.6 * y + 0.1 + 0.2 * rng.random((n, 3)), 0, 1)
    paths = {name: tmp_path / name for name in ("acts.npy", "model.npy", "y.npy", "truth.npy", "pairs.csv")}
    np.save(paths["acts.npy"], a)
    np.save(paths["model.npy"], model)
    np.save(paths["y.npy"], y)
    np.save(paths["truth.npy"], np.array([0, 1, 2, 2]))
    pl.DataFrame({"unit": [0, 1, 2], "concept": [0, 1, 2]}).write_csv(paths["pairs.csv"])
    plan = crowd.plan([(0, 0), (1, 1)], a, model, budget=30)
    paths["plan.parquet"] = plan.write(tmp_path / "plan.parquet")
    ratings = plan.inputs().with_columns(rater=pl.lit("ann"), vote=pl.col("input") % 2)
    ratings.write_csv(tmp_path / "ratings.csv")
    paths["ratings.csv"] = tmp_path / "ratings.csv"
    crowd.aggregate(ratings, "mean").write_csv(tmp_path / "labels.csv")
    paths["labels.csv"] = tmp_path / "labels.csv"
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("dir.npy", "dir.csv", "dir.parquet", "dir.txt"):
        (bad / name).mkdir()
        paths[name] = bad / name
    for name, data in (
        ("corrupt.npy", b"not an npy file" * 4),
        ("corrupt.parquet", b"PAR1 nope"),
        ("empty.csv", b""),
        ("wrong.csv", b"a,b\n1,2\n"),
        ("float_pairs.csv", b"unit,concept\n0.5,1\n"),
        ("names.txt", b"x\ny\nz\nw\n"),
    ):
        (bad / name).write_bytes(data)
        paths[name] = bad / name
    paths["gone.npy"], paths["gone.csv"], paths["gone.txt"] = bad / "gone.npy", bad / "gone.csv", bad / "gone.txt"
    ratings.with_columns(vote=pl.lit("yes")).write_csv(bad / "text_votes.csv")
    ratings.with_columns(rater=pl.lit(1.5)).write_csv(bad / "float_raters.csv")
    crowd.aggregate(ratings, "mean").with_columns(label=pl.lit("a")).write_csv(bad / "text_labels.csv")
    pl.read_parquet(paths["plan.parquet"]).with_columns(gamma=pl.lit(5.0)).write_parquet(bad / "bad_gamma.parquet")
    np.save(bad / "float_truth.npy", np.array([0.0, 1.0, 2.0, 2.0]))
    np.save(bad / "complex.npy", a.astype(np.complex64))
    np.save(bad / "one_unit.npy", a[:, :1])
    for name in ("text_votes.csv", "float_raters.csv", "text_labels.csv", "bad_gamma.parquet"):
        paths[name] = bad / name
    for name in ("float_truth.npy", "complex.npy", "one_unit.npy"):
        paths[name] = bad / name
    return paths


def _plan_argv(acts: str = "acts.npy", model: str = "model.npy", pairs: str = "pairs.csv", *extra: Any) -> list[Any]:
    return ["crowd", "plan", acts, model, "--pairs", pairs, "--budget", 30, *extra, "--out", "OUT/plan.parquet"]


def _aggregate_argv(ratings: str = "ratings.csv", plan: str = "plan.parquet", *extra: Any) -> list[Any]:
    return ["crowd", "aggregate", ratings, "--plan", plan, *extra, "--out", "OUT/l.csv"]


def _simulate_argv(acts: str = "acts.npy", labels: str = "y.npy", model: str = "model.npy", *extra: Any) -> list[Any]:
    return ["crowd", "simulate", acts, labels, model, "--pairs", "pairs.csv", "--budgets", "30", "--trials", 2, *extra]


def _sanity_argv(acts: str = "acts.npy", concepts: str = "y.npy", *extra: Any) -> list[Any]:
    return ["sanity", acts, concepts, "--metrics", "f1", "--alpha", 0.1, "--validation", 0.25, *extra]


def _meta_argv(acts: str = "acts.npy", concepts: str = "y.npy", truth: str = "truth.npy", *extra: Any) -> list[Any]:
    return ["meta", acts, concepts, "--truth", truth, "--metrics", "f1", "--validation", 0.25, *extra]


COMMAND_CASES = [
    pytest.param(_plan_argv("dir.npy"), ["dir.npy"], id="plan activations a directory"),
    pytest.param(_plan_argv("acts.npy", "corrupt.npy"), ["corrupt.npy"], id="plan corrupt model"),
    pytest.param(_plan_argv("acts.npy", "dir.csv"), ["dir.csv", "directory"], id="plan model .csv a directory"),
    pytest.param(_plan_argv("acts.npy", "wrong.csv"), ["wrong.csv", "column"], id="plan model wrong columns"),
    pytest.param(_plan_argv("complex.npy"), ["complex64"], id="plan complex activations"),
    pytest.param(_plan_argv("acts.npy", "model.npy", "dir.csv"), ["pairs", "directory"], id="plan pairs a directory"),
    pytest.param(_plan_argv("acts.npy", "model.npy", "empty.csv"), ["pairs", "empty"], id="plan empty pairs file"),
    pytest.param(_plan_argv("acts.npy", "model.npy", "wrong.csv"), ["pairs", "column"], id="plan pairs wrong columns"),
    pytest.param(_plan_argv("acts.npy", "model.npy", "float_pairs.csv"), ["pairs", "integer"], id="plan float pairs"),
    pytest.param(
        _plan_argv("acts.npy", "model.npy", "pairs.csv", "--unit-names", "dir.txt"),
        ["dir.txt"],
        id="plan unit names a directory",
    ),
    pytest.param(
        _plan_argv("acts.npy", "model.npy", "pairs.csv", "--explanations", "gone.txt"),
        ["gone.txt", "does not exist"],
        id="plan explanations missing",
    ),
    pytest.param(
        _plan_argv("acts.npy", "model.npy", "pairs.csv", "--budget", 10**15),
        ["--budget", "memory"],
        id="plan huge budget",
    ),
    pytest.param(
        _plan_argv("acts.npy", "model.npy", "pairs.csv", "--seed", 2**64), ["seed"], id="plan seed beyond 64 bits"
    ),
    pytest.param(
        _aggregate_argv("gone.csv"),
        ["gone.csv", "does not exist"],
        id="aggregate ratings missing",
    ),
    pytest.param(
        _aggregate_argv("dir.csv"),
        ["dir.csv", "directory"],
        id="aggregate ratings .csv a directory",
    ),
    pytest.param(
        _aggregate_argv("empty.csv"),
        ["ratings", "empty"],
        id="aggregate empty ratings file",
    ),
    pytest.param(
        _aggregate_argv("wrong.csv"),
        ["ratings lack", "vote"],
        id="aggregate ratings wrong columns",
    ),
    pytest.param(
        _aggregate_argv("text_votes.csv"),
        ["votes must be binary"],
        id="aggregate text votes",
    ),
    pytest.param(
        _aggregate_argv("float_raters.csv", "plan.parquet", "--eta", "estimate"),
        ["rater"],
        id="aggregate float rater ids",
    ),
    pytest.param(
        _aggregate_argv("ratings.csv", "gone.csv"),
        ["plan file", "does not exist"],
        id="aggregate plan missing",
    ),
    pytest.param(
        _aggregate_argv("ratings.csv", "dir.parquet"),
        ["plan file", "directory"],
        id="aggregate plan a directory",
    ),
    pytest.param(
        _aggregate_argv("ratings.csv", "bad_gamma.parquet"),
        ["gamma"],
        id="aggregate plan with bad gamma",
    ),
    pytest.param(
        _aggregate_argv("ratings.csv", "ratings.csv"),
        ["cannot read a plan"],
        id="aggregate plan a csv",
    ),
    pytest.param(
        ["crowd", "estimate", "--plan", "plan.parquet", "--labels", "dir.parquet"],
        ["labels file", "directory"],
        id="estimate labels a directory",
    ),
    pytest.param(
        ["crowd", "estimate", "--plan", "plan.parquet", "--labels", "text_labels.csv"],
        ["label", "numbers"],
        id="estimate text labels",
    ),
    pytest.param(
        ["crowd", "estimate", "--plan", "gone.csv", "--labels", "labels.csv"],
        ["plan file", "does not exist"],
        id="estimate plan missing",
    ),
    pytest.param(
        ["crowd", "estimate", "--plan", "plan.parquet", "--labels", "labels.csv", "--bootstrap", 10**13],
        ["--bootstrap", "memory"],
        id="estimate huge bootstrap",
    ),
    pytest.param(_simulate_argv("acts.npy", "gone.npy"), ["gone.npy", "does not exist"], id="simulate labels missing"),
    pytest.param(_simulate_argv("acts.npy", "y.npy", "dir.npy"), ["dir.npy"], id="simulate model a directory"),
    pytest.param(
        _simulate_argv("acts.npy", "y.npy", "corrupt.parquet"), ["corrupt.parquet"], id="simulate corrupt model table"
    ),
    pytest.param(
        _simulate_argv("acts.npy", "y.npy", "model.npy", "--budgets", f"30,{10**15}"),
        ["--budgets", "memory"],
        id="simulate huge budget",
    ),
    pytest.param(_sanity_argv("gone.npy"), ["gone.npy", "does not exist"], id="sanity activations missing"),
    pytest.param(_sanity_argv("acts.npy", "dir.csv"), ["dir.csv", "directory"], id="sanity concepts .csv a directory"),
    pytest.param(
        _sanity_argv("acts.npy", "y.npy", "--truth", "dir.txt"),
        ["truth file", "directory"],
        id="sanity truth a directory",
    ),
    pytest.param(
        _sanity_argv("acts.npy", "y.npy", "--truth", "float_truth.npy"),
        ["truth file", "integer"],
        id="sanity float truth",
    ),
    pytest.param(
        _sanity_argv("acts.npy", "y.npy", "--concept-names", "gone.txt"),
        ["gone.txt"],
        id="sanity concept names missing",
    ),
    pytest.param(_sanity_argv("complex.npy"), ["complex64"], id="sanity complex activations"),
    pytest.param(_sanity_argv("one_unit.npy"), ["activations", "unit"], id="sanity one unit"),
    pytest.param(
        ["sanity", "--theoretical", "--metrics", "f1", "--seeds", 10**13], ["--seeds", "memory"], id="sanity huge seeds"
    ),
    pytest.param(
        _meta_argv("acts.npy", "y.npy", "gone.npy"), ["truth file", "does not exist"], id="meta truth missing"
    ),
    pytest.param(_meta_argv("acts.npy", "y.npy", "names.txt"), ["truth file", "'x'"], id="meta truth unknown names"),
    pytest.param(_meta_argv("acts.npy", "wrong.csv"), ["wrong.csv", "column"], id="meta concepts wrong columns"),
    pytest.param(_meta_argv("acts.npy", "corrupt.npy"), ["corrupt.npy"], id="meta corrupt concepts"),
    pytest.param(
        _meta_argv("acts.npy", "y.npy", "truth.npy", "--alpha", 0.1, "--lam", -1), ["lam"], id="meta negative lambda"
    ),
]


@pytest.mark.parametrize(("argv", "fragments"), COMMAND_CASES)
def test_command_bad_input_is_one_line(
    inputs: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], argv: list[Any], fragments: list[str]
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    def resolve(x: Any) -> Any:
        if isinstance(x, str) and x.startswith("OUT/"):
            return out_dir / x[4:]
        return inputs.get(x, x) if isinstance(x, str) else x

    code, stdout, err = run([resolve(x) for x in argv], capfd)
    assert_one_line_error(code, err, 2, *fragments)
    assert stdout == ""
    assert list(out_dir.iterdir()) == []  # nothing written


# --------------------------------------------------------------------------------------------
# Valid edge values still work


def test_bragg_accepts_its_edge_values_and_numpy_integers() -> None:
    assert_allclose(crowd.bragg_posterior(3, 3), 0.663849, atol=1e-6)  # positive = votes
    assert_allclose(crowd.bragg_posterior(0, 0, prior=0.3), 0.3)  # no vote leaves the prior
    expected = crowd.bragg_posterior([0, 1, 2, 3], 3)
    assert_array_equal(crowd.bragg_posterior(np.arange(4, dtype=np.uint8), np.int64(3)), expected)
    assert_array_equal(crowd.bragg_posterior(np.arange(4), np.full(4, 3, dtype=np.uint32)), expected)
    assert_array_equal(crowd.bragg_posterior(np.int32(2), 3, eta=np.float32(0.25)), crowd.bragg_posterior(2, 3, 0.25))
    assert crowd.bragg_posterior([], 3).shape == (0,)


def test_bragg_reads_integer_tensors_and_refuses_float_ones() -> None:
    torch = pytest.importorskip("torch")
    assert_array_equal(crowd.bragg_posterior(torch.arange(4), 3), crowd.bragg_posterior(np.arange(4), 3))
    with pytest.raises(errors.ParameterError, match="positive"):
        crowd.bragg_posterior(torch.tensor([1.0, 2.0]), 3)
    with pytest.raises(errors.ParameterError, match="positive"):
        crowd.bragg_posterior(torch.tensor([True]), 3)


def test_plan_and_estimate_accept_numpy_scalars() -> None:
    p = crowd.plan(
        np.array([(0, 0)], dtype=np.int32),
        ACTS,
        MODEL,
        np.int64(30),
        raters_per_input=np.uint8(3),
        gamma=np.float32(0.25),
        seed=np.uint64(4),
    )
    q = crowd.plan([(0, 0)], ACTS, MODEL, 30, gamma=0.25, seed=4)
    assert p.draws.equals(q.draws) and p.raters_per_input == 3
    assert crowd.plan([(0, 0)], ACTS, MODEL, 30, gamma=1).gamma == 1.0  # an integer gamma is a number
    assert p.tasks(np.int64(4)).equals(q.tasks(4))
    labels = q.inputs().with_columns(label=pl.col("input") % 2 == 0)  # bool labels are 0/1
    result = crowd.estimate(q, labels, bootstrap=np.int64(5), seed=np.int32(1), level=np.float64(0.9))
    assert result["draws"][0] == 10 and np.isfinite(result["rho"][0])


def test_aggregate_and_simulate_accept_numpy_scalars() -> None:
    a = crowd.aggregate(RATINGS, eta=np.float32(0.2), prior=np.float64(0.1), max_iter=np.int64(5))
    b = crowd.aggregate(RATINGS, eta=float(np.float32(0.2)), prior=0.1)
    assert_allclose(a["label"].to_numpy(), b["label"].to_numpy())
    sim = crowd.simulate(
        SIM_ACTS, SIM_LABELS, SIM_MODEL, [(0, 0)], np.array([30, 60]), trials=np.int64(2), target=0, progress=False
    )
    assert sim.budgets == (30, 60) and sim.trials == 2
    assert crowd.needed_budgets(RCE, np.float32(0.2))["needed"].round(1).to_list() == [282.8]


def test_sanity_edge_values_still_work() -> None:
    c = np.array([1.0, 0.0, 1.0, 0.5])
    assert_array_equal(sanity.missing_labels(c, keep=1.0), c)  # 1-D in, 1-D out
    assert_array_equal(sanity.missing_labels(c, keep=0), np.zeros(4))
    assert_array_equal(sanity.extra_labels(c, rate=1), c)
    assert_array_equal(
        sanity.missing_labels(c, keep=np.float32(0.5), seed=np.int64(2)), sanity.missing_labels(c, 0.5, 2)
    )
    r = sanity.theoretical(["f1"], n=np.int64(20_000), seeds=np.int32(5), gammas=np.array([0.1, 0.01]), epsilon=0)
    assert r.records.height == 2 * 3


def test_sanity_reads_bfloat16_concepts() -> None:
    torch = pytest.importorskip("torch")
    c = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.bfloat16)
    assert_array_equal(sanity.missing_labels(c, seed=3), sanity.missing_labels(c.float().numpy(), seed=3))


def test_meta_edge_values_still_work() -> None:
    torch = pytest.importorskip("torch")
    expected = meta.meta_auprc(SCORES, TRUTH4)
    bf16 = torch.tensor(SCORES, dtype=torch.bfloat16)
    assert meta.meta_auprc(bf16, torch.tensor(TRUTH4)) == meta.meta_auprc(bf16.float().numpy(), TRUTH4)
    onehot = np.zeros((4, 3))
    onehot[np.arange(4), TRUTH4] = 1.0  # a 0/1 float matrix is a truth matrix
    assert meta.meta_auprc(SCORES, onehot) == expected
    assert meta.meta_auprc(SCORES, TRUTH4.astype(np.uint8)) == expected
    val, test = meta.split_units(np.int64(10), np.float32(0.2), np.uint64(3))
    assert_array_equal(np.concatenate([val, test]).size, 10)
    assert meta.truth_matrix(TRUTH4, (np.int64(4), 3)).sum() == 4
