"""`neuroneval.compare`: every pair's metrics against `neuroneval.compute` on the pair alone and a
scipy Pearson loop; the summary, the paired differences, win and tie rates against slow loops
over the same resamples; the paired interval's width and its coverage of a planted difference;
the baselines as defined; coverage counts on adversarial data; bad input; thread counts; the
files written and the SAEBench eval output against its JSON Schema; the warning of small top sets."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import neuroneval
import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
import scipy.stats
from neuroneval.compare import (
    BASELINE_RANDOM,
    BASELINE_SHUFFLED,
    COMPARE_OPTIONS,
    COMPARISON_FILES,
    DEFAULT_METRICS,
    EVAL_TYPE_ID,
    MIN_TOP_SET,
    Comparison,
    bootstrap_mean,
    compare,
    paired_difference,
    resample_indices,
    stream_seed,
    unpaired_difference,
)
from neuroneval.errors import ParameterError, ShapeError, SourceError, UnknownMetricError
from neuroneval.label import Labels

SCHEMA = json.loads((Path(__file__).parent / "saebench_eval_schema.json").read_text(encoding="utf-8"))
ALPHA = 0.05
N_BOOT = 200
N, K = 300, 10
DEAD = 4  # a unit constant over the inputs
UNEXPLAINED = 9  # a unit no explainer explains
CONSTANT = (3, "partial")  # a pair whose concept is constant: correlation undefined


def make_data(seed: int = 0) -> tuple[np.ndarray, pl.DataFrame, np.ndarray]:
    """Activations with real signal; three explainers, rows shuffled; the concept of each row."""
    rng = np.random.default_rng(seed)
    truth = (rng.random((N, K)) < 0.25).astype(np.float64)
    acts = truth * rng.uniform(1.0, 2.0, K) + 0.8 * rng.normal(size=(N, K))
    acts[:, DEAD] = 0.5
    rows: list[tuple[int, str, str, np.ndarray]] = []
    for k in range(9):
        rows.append((k, "exact", f"concept {k}", np.clip(truth[:, k] + 0.1 * rng.normal(size=N), 0, 1)))
    same = rows[8][3]  # vague explains unit 8 with exact's very concept: every metric ties
    for k in range(7):
        c = np.full(N, 0.3) if (k, "partial") == CONSTANT else truth[:, k] * (rng.random(N) < 0.5)
        rows.append((k, "partial", f"part of {k}", c))
    for k in (0, 1, 2, 3, 4, 6, 7, 8):
        rows.append((k, "vague", "something", same if k == 8 else rng.random(N)))
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    table = pl.DataFrame(
        {"unit": [r[0] for r in rows], "explainer": [r[1] for r in rows], "explanation": [r[2] for r in rows]}
    )
    return acts, table, np.column_stack([r[3] for r in rows])


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, pl.DataFrame, np.ndarray]:
    return make_data()


@pytest.fixture(scope="module")
def result(data: tuple[np.ndarray, pl.DataFrame, np.ndarray]) -> Comparison:
    acts, table, concepts = data
    return compare(acts, table, concepts, alpha=ALPHA, n_boot=N_BOOT, seed=7)


def slow_interval(
    a: np.ndarray, b: np.ndarray | None, n_boot: int, confidence: float, seed: int
) -> tuple[float, float]:
    """The percentile interval of mean(a) (or mean(a) - mean(b), on the same resampled units), in loops."""
    idx = resample_indices(a.size, n_boot, seed)
    means = []
    for row in idx:
        ma = sum(float(a[i]) for i in row) / row.size
        mb = 0.0 if b is None else sum(float(b[i]) for i in row) / row.size
        means.append(ma - mb)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


# --------------------------------------------------------------------------- the pairs


def test_pairs_equal_compute_on_each_pair_and_a_scipy_pearson(
    data: tuple[np.ndarray, pl.DataFrame, np.ndarray], result: Comparison
) -> None:
    acts, table, concepts = data
    pairs = result.pairs
    assert pairs.columns == ["unit", "unit_name", "explainer", "explanation", "row", "dead", *DEFAULT_METRICS]
    real = pairs.filter(~pl.col("explainer").str.starts_with("baseline:"))
    assert real.height == table.height
    assert real["row"].to_list() == list(range(table.height))  # table order, row e with its concept column e
    assert real.select("unit", "explainer", "explanation").equals(table.select("unit", "explainer", "explanation"))
    for r in pairs.iter_rows(named=True):
        k, e = r["unit"], r["row"]
        c = concepts[:, e]
        if r["explainer"] == BASELINE_SHUFFLED:  # the definition: unit k's own permutation of the rows
            c = c[np.random.default_rng(stream_seed(7, "shuffled", str(k))).permutation(N)]
        alone = neuroneval.compute(acts[:, [k]], c[:, None], list(DEFAULT_METRICS), alpha=ALPHA)
        for m in DEFAULT_METRICS:
            np.testing.assert_allclose(r[m], alone[m][0, 0], rtol=1e-12, atol=1e-15, err_msg=f"{r} {m}")
        assert r["dead"] == (k == DEAD)
        if k != DEAD and np.ptp(c) > 0:
            assert r["correlation"] == pytest.approx(scipy.stats.pearsonr(acts[:, k], c).statistic, abs=1e-10)
        else:
            assert math.isnan(r["correlation"])


def test_baselines_as_defined(data: tuple[np.ndarray, pl.DataFrame, np.ndarray], result: Comparison) -> None:
    _, table, _ = data
    unit_of_row = table["unit"].to_numpy()
    explained = sorted(set(unit_of_row.tolist()))
    rand = result.pairs.filter(pl.col("explainer") == BASELINE_RANDOM)
    shuf = result.pairs.filter(pl.col("explainer") == BASELINE_SHUFFLED)
    for b in (rand, shuf):
        assert b["unit"].to_list() == explained  # every explained unit once, ascending
        assert b["explanation"].to_list() == [table["explanation"][r] for r in b["row"].to_list()]
    # r(k): one of unit k's own explanations; random: the reference explanation of another unit
    # (a derangement: each reference explanation used once, none by its own unit).
    assert (unit_of_row[shuf["row"].to_numpy()] == shuf["unit"].to_numpy()).all()
    assert (unit_of_row[rand["row"].to_numpy()] != rand["unit"].to_numpy()).all()
    assert sorted(rand["row"].to_list()) == sorted(shuf["row"].to_list())
    # Seeded: the same seed draws the same baselines, another seed others.
    acts, table, concepts = data
    again = compare(acts, table, concepts, alpha=ALPHA, n_boot=0, seed=7)
    assert again.pairs.equals(result.pairs)
    other = compare(acts, table, concepts, alpha=ALPHA, n_boot=0, seed=8)
    assert not other.pairs.filter(pl.col("explainer") == BASELINE_RANDOM)["row"].equals(rand["row"])
    real = other.pairs.filter(~pl.col("explainer").str.starts_with("baseline:"))
    assert real.equals(result.pairs.filter(~pl.col("explainer").str.starts_with("baseline:")))


def test_shuffled_and_random_baselines_near_zero_on_real_signal() -> None:
    rng = np.random.default_rng(3)
    n, k = 2000, 40
    truth = (rng.random((n, k)) < 0.3).astype(np.float64)
    acts = truth + 0.6 * rng.normal(size=(n, k))
    table = pl.DataFrame(
        {"unit": list(range(k)), "explainer": ["exact"] * k, "explanation": [f"c{j}" for j in range(k)]}
    )
    r = compare(acts, table, truth, metrics=["correlation"], n_boot=100)
    means = dict(zip(r.summary["explainer"], r.summary["correlation_mean"], strict=True))
    assert means["exact"] > 0.5  # real signal, which the baselines break
    sd_of_mean = 1 / math.sqrt(n) / math.sqrt(k)  # a correlation of independent vectors: sd 1/sqrt(n)
    assert abs(means[BASELINE_SHUFFLED]) < 5 * sd_of_mean
    assert abs(means[BASELINE_RANDOM]) < 5 * sd_of_mean
    assert r.summary.filter(pl.col("explainer") == "exact")["correlation_rank"].item() == 1


# --------------------------------------------------------------------------- summary and differences


def test_summary_and_coverage_against_loops(
    data: tuple[np.ndarray, pl.DataFrame, np.ndarray], result: Comparison
) -> None:
    _, table, _ = data
    s = {r["explainer"]: r for r in result.summary.iter_rows(named=True)}
    order = list(dict.fromkeys(table["explainer"].to_list()))  # explainers by first appearance, baselines last
    assert sorted(order) == ["exact", "partial", "vague"]
    assert list(s) == [*order, BASELINE_RANDOM, BASELINE_SHUFFLED] == result.explainers
    assert [r["baseline"] for r in s.values()] == [False, False, False, True, True]
    explained = {
        "exact": set(range(9)),
        "partial": set(range(7)),
        "vague": {0, 1, 2, 3, 4, 6, 7, 8},
        BASELINE_RANDOM: set(range(9)),
        BASELINE_SHUFFLED: set(range(9)),
    }
    assert result.dead_units == [DEAD]
    for name, units in explained.items():
        r = s[name]
        assert (r["units_total"], r["units_explained"], r["units_unexplained"]) == (K, len(units), K - len(units))
        assert r["units_dead"] == int(DEAD in units)
        rows = [p for p in result.pairs.iter_rows(named=True) if p["explainer"] == name and p["unit"] != DEAD]
        assert r["pairs_with_nan"] == sum(any(math.isnan(p[m]) for m in DEFAULT_METRICS) for p in rows)
        for m in DEFAULT_METRICS:
            values = np.array([p[m] for p in rows if not math.isnan(p[m])])
            assert r[f"{m}_n"] == values.size and r[f"{m}_nan"] == len(rows) - values.size
            assert r[f"{m}_mean"] == pytest.approx(sum(values) / values.size, rel=1e-12)
            assert r[f"{m}_median"] == pytest.approx(float(np.median(values)), rel=1e-12)
            low, high = slow_interval(values, None, N_BOOT, 0.95, stream_seed(7, "mean", name, m))
            assert (r[f"{m}_ci_low"], r[f"{m}_ci_high"]) == pytest.approx((low, high), rel=1e-9, abs=1e-12)
    # The constant concept: correlation undefined, the other metrics defined.
    assert s["partial"]["correlation_nan"] == 1 and s["partial"]["cosine_nan"] == 0
    assert s["partial"]["pairs_with_nan"] == 1
    # Ranks: by mean, highest first.
    for m in DEFAULT_METRICS:
        by_mean = sorted(s, key=lambda e: -s[e][f"{m}_mean"])
        assert [s[e][f"{m}_rank"] for e in by_mean] == [1, 2, 3, 4, 5]


def test_differences_against_loops(result: Comparison) -> None:
    value = {(p["explainer"], p["unit"]): p for p in result.pairs.iter_rows(named=True) if not p["dead"]}
    names = result.explainers
    diffs = result.differences
    assert diffs.columns == [
        "explainer_a",
        "explainer_b",
        "metric",
        "n_units",
        "mean_difference",
        "ci_low",
        "ci_high",
        "win_rate",
        "tie_rate",
    ]
    assert diffs.height == len(DEFAULT_METRICS) * len(names) * (len(names) - 1) // 2
    ties_seen = 0
    for d in diffs.iter_rows(named=True):
        a_name, b_name, m = d["explainer_a"], d["explainer_b"], d["metric"]
        assert names.index(a_name) < names.index(b_name)
        common = [
            u
            for u in range(K)
            if (a_name, u) in value
            and (b_name, u) in value
            and not math.isnan(value[(a_name, u)][m])
            and not math.isnan(value[(b_name, u)][m])
        ]
        a = np.array([value[(a_name, u)][m] for u in common])
        b = np.array([value[(b_name, u)][m] for u in common])
        assert d["n_units"] == len(common)
        assert d["mean_difference"] == pytest.approx(sum(a - b) / len(common), rel=1e-9, abs=1e-14)
        wins = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x, y in zip(a, b, strict=True))
        ties = sum(x == y for x, y in zip(a, b, strict=True))
        assert d["win_rate"] == pytest.approx(wins / len(common)) and d["tie_rate"] == pytest.approx(ties / len(common))
        ties_seen += ties
        low, high = slow_interval(a, b, N_BOOT, 0.95, stream_seed(7, "difference", a_name, b_name, m))
        assert (d["ci_low"], d["ci_high"]) == pytest.approx((low, high), rel=1e-9, abs=1e-12)
    assert ties_seen > 0  # the binary metrics tie (both 0, say): the rule was exercised


def test_win_and_tie_rates_with_many_ties() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 3, 500).astype(float)
    b = rng.integers(0, 3, 500).astype(float)
    a[::50] = np.nan  # left out of both
    d = paired_difference(a, b, n_boot=0)
    keep = [(x, y) for x, y in zip(a, b, strict=True) if not math.isnan(x)]
    assert d.n == len(keep)
    assert d.win_rate == pytest.approx(sum((x > y) + 0.5 * (x == y) for x, y in keep) / len(keep))
    assert d.tie_rate == pytest.approx(sum(x == y for x, y in keep) / len(keep))
    assert math.isnan(d.low) and math.isnan(d.high)  # no resamples: no interval
    assert paired_difference([1.0], [0.0]).n == 1 and math.isnan(paired_difference([1.0], [0.0]).low)
    assert paired_difference([np.nan], [0.0]).n == 0


# --------------------------------------------------------------------------- the paired bootstrap


def test_paired_interval_is_the_bootstrap_of_the_differences() -> None:
    rng = np.random.default_rng(2)
    n = 200
    base = rng.normal(size=n)  # units differ a lot; A and B move together
    a = base + 0.05 * rng.normal(size=n) + 0.02
    b = base + 0.05 * rng.normal(size=n)
    paired = paired_difference(a, b, n_boot=2000, seed=11)
    low, high = slow_interval(a, b, 2000, 0.95, 11)
    assert (paired.low, paired.high) == pytest.approx((low, high), rel=1e-9)
    # Unpaired (A and B resampled independently): the units' spread does not cancel.
    ma = a[resample_indices(n, 2000, 1)].mean(axis=1)
    mb = b[resample_indices(n, 2000, 2)].mean(axis=1)
    unpaired = np.quantile(ma - mb, [0.025, 0.975])
    width = paired.high - paired.low
    assert width < 0.2 * (unpaired[1] - unpaired[0])
    # And its width is the normal one of a mean of n differences: 2 z sd(d) / sqrt(n).
    analytic = 2 * scipy.stats.norm.ppf(0.975) * np.std(a - b, ddof=1) / math.sqrt(n)
    assert width == pytest.approx(analytic, rel=0.12)
    one = bootstrap_mean(a, n_boot=2000, seed=11)
    assert (one.low, one.high) == pytest.approx(slow_interval(a, None, 2000, 0.95, 11), rel=1e-9)


def test_paired_interval_covers_a_planted_difference() -> None:
    """300 seeded replications of 60 units where A - B has mean 0.1 (skewed noise): the 95%
    interval holds 0.1 in about 95% of them (a binomial band around 0.95)."""
    delta, n, reps = 0.1, 60, 300
    held = 0
    for rep in range(reps):
        rng = np.random.default_rng([2024, rep])
        unit = rng.normal(size=n)
        a = unit + delta + rng.gamma(2.0, 0.15, n) - 0.3  # gamma(2, 0.15) has mean 0.3
        b = unit + 0.2 * rng.normal(size=n)
        d = paired_difference(a, b, n_boot=1000, seed=rep)
        held += d.low <= delta <= d.high
    coverage = held / reps
    print(f"coverage of the planted difference: {coverage:.3f} over {reps} replications")
    assert 0.90 <= coverage <= 0.985, coverage


def test_unpaired_difference_against_loops_and_its_coverage() -> None:
    """Two different sets of units (neurons against latents): win and tie rates against a loop
    over all cross pairs, the interval against independent resamples, and coverage of a
    planted difference of means over 300 replications."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 4, 70).astype(float)
    b = rng.integers(0, 4, 40).astype(float)
    a[3] = np.nan
    d = unpaired_difference(a, b, n_boot=1500, seed=9)
    x = a[np.isfinite(a)]
    cross = [(p, q) for p in x for q in b]
    assert d.win_rate == pytest.approx(sum((p > q) + 0.5 * (p == q) for p, q in cross) / len(cross))
    assert d.tie_rate == pytest.approx(sum(p == q for p, q in cross) / len(cross))
    assert d.mean_difference == pytest.approx(x.mean() - b.mean()) and d.n == 40
    ma = x[resample_indices(x.size, 1500, 9)].mean(axis=1)
    mb = b[resample_indices(b.size, 1500, stream_seed(9, "unpaired", "b"))].mean(axis=1)
    assert (d.low, d.high) == pytest.approx(tuple(np.quantile(ma - mb, [0.025, 0.975])), rel=1e-9)
    held, reps = 0, 300
    for rep in range(reps):
        r = np.random.default_rng([77, rep])
        first = r.gamma(2.0, 0.1, 80)  # mean 0.2, skewed
        second = r.normal(0.1, 0.15, 50)  # mean 0.1
        e = unpaired_difference(first, second, n_boot=1000, seed=rep)
        held += e.low <= 0.1 <= e.high
    assert 0.90 <= held / reps <= 0.985, held / reps
    assert math.isnan(unpaired_difference([1.0], [0.0, 2.0]).low)
    assert unpaired_difference([np.nan], [0.0]).n == 0


# --------------------------------------------------------------------------- inputs


def test_sources_files_names_and_labels(
    tmp_path: Path, data: tuple[np.ndarray, pl.DataFrame, np.ndarray], result: Comparison
) -> None:
    acts, table, concepts = data
    kw: dict[str, Any] = {"alpha": ALPHA, "n_boot": N_BOOT, "seed": 7}
    np.save(tmp_path / "acts.npy", acts)
    np.save(tmp_path / "concepts.npy", concepts)
    for suffix, write in ((".csv", table.write_csv), (".parquet", table.write_parquet), (".jsonl", table.write_ndjson)):
        path = tmp_path / f"explanations{suffix}"
        write(path)
        got = compare(tmp_path / "acts.npy", path, tmp_path / "concepts.npy", **kw)
        assert got.summary.equals(result.summary) and got.differences.equals(result.differences), suffix
    # Sparse activations: the same numbers, dead units found among the stored values.
    sparse = compare(sp.csr_matrix(acts), table, sp.csc_matrix(concepts), **kw)
    assert sparse.summary.equals(result.summary)
    # Units by name, from unit_names.
    names = [f"L3/{k:03d}" for k in range(K)]
    named = table.with_columns(pl.col("unit").map_elements(lambda k: names[k], return_dtype=pl.String))
    by_name = compare(acts, named, concepts, unit_names=names, **kw)
    assert by_name.summary.equals(result.summary)
    assert by_name.pairs["unit_name"].to_list() == [names[k] for k in result.pairs["unit"].to_list()]
    # Indices written as text (a CSV), none of them a name: still indices, named by unit_names.
    by_text = compare(acts, tmp_path / "explanations.csv", concepts, unit_names=names, **kw)
    assert by_text.summary.equals(result.summary) and by_text.pairs.equals(by_name.pairs)
    # A long concept table, each row's concept named by a `concept` column.
    long = tmp_path / "concepts.parquet"
    rows, cols = np.nonzero(concepts)
    pl.DataFrame(
        {"input": rows, "concept": [f"k{c}" for c in cols], "probability": concepts[rows, cols]}
    ).write_parquet(long)
    with_names = table.with_columns(pl.Series("concept", [f"k{e}" for e in range(table.height)]))
    assert compare(acts, with_names, long, **kw).summary.equals(result.summary)
    # ... or by the row number when there is none.
    numbered = tmp_path / "numbered.csv"
    pl.DataFrame({"input": rows, "concept": cols.astype(str), "probability": concepts[rows, cols]}).write_csv(numbered)
    assert compare(acts, table, numbered, **kw).summary.equals(result.summary)
    # Labels from a judge: their probabilities, their texts checked against the table's.
    texts = table["explanation"].to_list()
    labels = Labels(
        scores=concepts, probabilities=concepts, concepts=[str(i) for i in range(len(texts))], explanations=texts
    )
    assert compare(acts, table, labels, **kw).summary.equals(result.summary)
    wrong = Labels(scores=concepts, probabilities=concepts, concepts=[], explanations=texts[::-1])
    with pytest.raises(SourceError, match="explanation row 0 is .* but the labels' column 0 judged"):
        compare(acts, table, wrong, **kw)
    with pytest.raises(ShapeError, match="one column per explanation row"):
        compare(acts, table, Labels(concepts, concepts[:, :3], [], []), **kw)


def test_adversarial_coverage() -> None:
    """All-zero and constant units (dense and sparse), an explainer whose every unit is dead,
    a concept with no positive label, a unit that only one explainer explains."""
    rng = np.random.default_rng(4)
    n = 120
    acts = rng.normal(size=(n, 6))
    acts[:, 1] = 0.0
    acts[:, 2] = -3.0
    table = pl.DataFrame(
        {
            "unit": [0, 1, 2, 3, 1, 2, 0, 3],
            "explainer": ["a", "a", "a", "a", "dead-only", "dead-only", "b", "b"],
            "explanation": ["x", "y", "z", "w", "y", "z", "x2", "empty"],
        }
    )
    concepts = (rng.random((n, 8)) < 0.3).astype(float)
    concepts[:, 7] = 0.0  # b's explanation of unit 3 labels nothing
    for activations in (acts, sp.csc_matrix(acts)):
        r = compare(activations, table, concepts, alpha=0.1, n_boot=50)
        assert r.dead_units == [1, 2]
        s = {x["explainer"]: x for x in r.summary.iter_rows(named=True)}
        assert (s["a"]["units_explained"], s["a"]["units_dead"], s["a"]["correlation_n"]) == (4, 2, 2)
        assert (s["a"]["units_unexplained"], s[BASELINE_RANDOM]["units_explained"]) == (2, 4)
        dead_only = s["dead-only"]
        assert (dead_only["units_dead"], dead_only["correlation_n"], dead_only["correlation_nan"]) == (2, 0, 0)
        assert math.isnan(dead_only["correlation_mean"]) and math.isnan(dead_only["correlation_ci_low"])
        assert dead_only["correlation_rank"] == len(s)  # NaN ranks last
        # The empty concept: correlation, cosine undefined; f1, iou 0; auprc defined.
        assert (s["b"]["correlation_nan"], s["b"]["cosine_nan"], s["b"]["f1_nan"], s["b"]["pairs_with_nan"]) == (
            1,
            1,
            0,
            1,
        )
        d = r.differences.filter((pl.col("explainer_a") == "a") & (pl.col("explainer_b") == "dead-only"))
        assert d["n_units"].to_list() == [0] * len(DEFAULT_METRICS)
        assert d["mean_difference"].is_nan().all() and d["win_rate"].is_nan().all()
        assert "2 dead units excluded" in r.ranking()


def test_bad_input_is_refused(data: tuple[np.ndarray, pl.DataFrame, np.ndarray]) -> None:
    acts, table, concepts = data
    t = table.to_dict(as_series=False)

    def with_(**changes: Any) -> pl.DataFrame:
        return pl.DataFrame({**t, **changes})

    first = t["unit"][0]
    cases: list[tuple[Any, Any, dict[str, Any], type[Exception], str]] = [
        (
            with_(unit=[first] + t["unit"][1:], explainer=[t["explainer"][0]] * len(t["unit"])),
            concepts,
            {},
            SourceError,
            "explains unit .* twice",
        ),
        (with_(unit=[K + 3] + t["unit"][1:]), concepts, {}, ShapeError, rf"unit {K + 3} is outside 0\.\.{K - 1}"),
        (
            with_(unit=["nope"] + [str(u) for u in t["unit"][1:]]),
            concepts,
            {},
            SourceError,
            "'nope' is not a unit index",
        ),
        (with_(unit=[float(u) for u in t["unit"]]), concepts, {}, SourceError, "must hold unit indices"),
        (with_(explanation=["  "] + t["explanation"][1:]), concepts, {}, SourceError, "row 0 has an empty explanation"),
        (with_(explanation=[None] + t["explanation"][1:]), concepts, {}, SourceError, "row 0 has no explanation"),
        (table.drop("explainer"), concepts, {}, SourceError, "lacks the column.* explainer"),
        (table.head(0), concepts, {}, Exception, "no rows"),
        (table, concepts[:, :-1], {}, ShapeError, "columns but the explanations table has"),
        (table, concepts[:-1], {}, ShapeError, "inputs"),
        (with_(explainer=[BASELINE_RANDOM] + t["explainer"][1:]), concepts, {}, ParameterError, "name of a baseline"),
        (table, concepts, {"metrics": ["correlation", "correlation"]}, ParameterError, "more than once"),
        (table, concepts, {"metrics": ["nope"]}, UnknownMetricError, "unknown metric"),
        (table, concepts, {"unit_names": ["a"] * 3}, ShapeError, "unit_names has 3 entries"),
    ]
    # each declared option (COMPARE_OPTIONS; its domain is tested in test_declared_options) is checked here:
    # the value just past its domain, or one of another type
    for name, option in COMPARE_OPTIONS.items():
        bad = option.boundaries()[1][-1] if option.kind != "flag" else "no"
        cases.append((table, concepts, {name: bad}, ParameterError, re.escape(f"invalid parameter {name} = ")))
    for tab, conc, kw, error, message in cases:
        with pytest.raises(error, match=message):
            compare(acts, tab, conc, **kw)
    names = [f"u{k}" for k in range(K)]
    with pytest.raises(SourceError, match="'u99' is not a unit name"):
        compare(acts, with_(unit=["u99"] + [names[u] for u in t["unit"][1:]]), concepts, unit_names=names)
    one = pl.DataFrame({"unit": [0], "explainer": ["a"], "explanation": ["x"]})
    with pytest.raises(ParameterError, match="at least two explained units"):
        compare(acts, one, concepts[:, :1], alpha=ALPHA)
    assert compare(acts, one, concepts[:, :1], alpha=ALPHA, baselines=False, n_boot=10).summary.height == 1
    with pytest.raises(SourceError, match="does not exist"):
        compare(acts, "/no/such/explanations.csv", concepts)
    with pytest.raises(ParameterError, match="was not compared"):
        compare(acts, table, concepts, metrics="f1", alpha=ALPHA, n_boot=0).ranking("correlation")


def test_results_do_not_depend_on_the_thread_count(
    data: tuple[np.ndarray, pl.DataFrame, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    acts, table, concepts = data
    out = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("NEURONEVAL_NUM_THREADS", threads)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # 3 > the CPUs of a 2-CPU machine
            out.append(compare(acts, table, concepts, alpha=ALPHA, n_boot=N_BOOT, seed=7))
    for other in out[1:]:
        for name in ("pairs", "summary", "differences"):
            assert getattr(other, name).equals(getattr(out[0], name)), name


# --------------------------------------------------------------------------- text, files, SAEBench


def test_ranking_text(result: Comparison) -> None:
    lines = result.ranking("auprc").splitlines()
    assert lines[0].startswith("auprc: mean over units with a 95% bootstrap interval (200 resamples)")
    body = [line.split() for line in lines[2:]]
    expected = result.summary.sort("auprc_rank")
    assert [row[1] for row in body] == expected["explainer"].to_list()
    assert [row[3] for row in body] == [f"{v:.3f}" for v in expected["auprc_mean"]]
    assert [row[0] for row in body] == [str(i) for i in range(1, expected.height + 1)]


def test_write_and_read_back(tmp_path: Path, result: Comparison) -> None:
    written = result.write(tmp_path / "new" / "cmp", eval_id="fixed", datetime_epoch_millis=5)
    assert sorted(p.name for p in written) == sorted(COMPARISON_FILES.values())
    d = tmp_path / "new" / "cmp"
    assert sorted(p.name for p in d.iterdir()) == sorted(COMPARISON_FILES.values())  # nothing else left behind
    assert pl.read_parquet(d / COMPARISON_FILES["pairs"]).equals(result.pairs)
    assert pl.read_csv(d / COMPARISON_FILES["summary"]).equals(result.summary)
    assert pl.read_csv(d / COMPARISON_FILES["differences"]).equals(result.differences)
    config = json.loads((d / COMPARISON_FILES["config"]).read_text())
    assert config["format"] == "neuroneval-comparison" and config["metrics"] == list(DEFAULT_METRICS)
    assert config["dead_units"] == [DEAD] and config["n_units"] == K and config["n_inputs"] == N
    # SAEBench's BaseEvalOutput.to_json_file: json.dump(asdict(self), f, indent=2, default=str)
    text = (d / COMPARISON_FILES["saebench"]).read_text()
    assert text == json.dumps(result.to_saebench(eval_id="fixed", datetime_epoch_millis=5), indent=2) + "\n"


def test_saebench_document_follows_the_schema(result: Comparison) -> None:
    """The schema rebuilt from SAEBench's code (its description says how); tests/test_compare_saebench.py
    loads the file in classes built on SAEBench's base classes' rules, and reads it as its results reader does."""
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    cfg = {"architecture": "jumprelu", "d_sae": 16384, "d_in": 2304}
    doc = json.loads(
        json.dumps(result.to_saebench(sae_lens_release_id="rel", sae_lens_id="blocks.0", sae_cfg_dict=cfg))
    )
    validator.validate(doc)
    assert list(doc) == [  # BaseEvalOutput's 12 fields, in its order
        "eval_type_id",
        "eval_config",
        "eval_id",
        "datetime_epoch_millis",
        "eval_result_metrics",
        "eval_result_details",
        "sae_bench_commit_hash",
        "sae_lens_id",
        "sae_lens_release_id",
        "sae_lens_version",
        "sae_cfg_dict",
        "eval_result_unstructured",
    ]
    assert doc["eval_type_id"] == EVAL_TYPE_ID and doc["sae_cfg_dict"] == cfg
    categories = {"exact": "exact", "partial": "partial", "vague": "vague"}
    categories |= {BASELINE_RANDOM: "baseline_random", BASELINE_SHUFFLED: "baseline_shuffled"}
    assert doc["eval_result_unstructured"]["categories"] == {v: k for k, v in categories.items()}
    assert list(doc["eval_result_metrics"]) == [categories[e] for e in result.explainers]
    exact = doc["eval_result_metrics"]["exact"]
    row = result.summary.filter(pl.col("explainer") == "exact").row(0, named=True)
    assert exact["correlation_mean"] == row["correlation_mean"] and exact["correlation_n_units"] == row["correlation_n"]
    assert len(doc["eval_result_details"]) == result.differences.height
    assert doc["eval_config"]["n_boot"] == N_BOOT and doc["eval_result_unstructured"]["dead_units"] == [DEAD]
    assert doc["eval_result_metrics"]["partial"]["correlation_nan"] == 1
    # An undefined value is NaN, a float (SAEBench's float fields refuse null): an explainer of dead units only.
    rng = np.random.default_rng(2)
    acts = rng.normal(size=(100, 3))
    acts[:, 2] = 1.0
    table = pl.DataFrame({"unit": [0, 1, 2, 2], "explainer": ["a", "a", "a", "dead"], "explanation": list("wxyz")})
    dead = json.loads(json.dumps(compare(acts, table, rng.random((100, 4)), alpha=0.1, n_boot=10).to_saebench()))
    validator.validate(dead)
    assert math.isnan(dead["eval_result_metrics"]["dead"]["correlation_mean"])
    a_dead = [d for d in dead["eval_result_details"] if (d["explainer_a"], d["explainer_b"]) == ("a", "dead")]
    assert a_dead and all(d["n_units"] == 0 and math.isnan(d["win_rate"]) for d in a_dead)  # no live unit in common
    # The schema rejects what SAEBench's classes reject or drop.
    broken: list[dict[str, Any]] = []
    for change in (
        lambda x: x.pop("sae_lens_version"),
        lambda x: x.__setitem__("datetime_epoch_millis", "yesterday"),
        lambda x: x.__setitem__("datetime_epoch_millis", 10**13),
        lambda x: x["eval_result_metrics"]["exact"].__setitem__("nested", {"a": 1}),  # metrics are flat
        lambda x: x["eval_result_metrics"]["exact"].__setitem__("correlation_mean", "NaN"),
        lambda x: x["eval_result_metrics"]["exact"].__setitem__("correlation_mean", None),  # float rejects null
        lambda x: x["eval_result_metrics"].__setitem__("baseline:random", x["eval_result_metrics"]["exact"]),
        lambda x: x["eval_result_metrics"].__setitem__("class", x["eval_result_metrics"]["exact"]),
        lambda x: x["eval_result_details"][0].pop("win_rate"),
        lambda x: x["eval_result_details"][0].__setitem__("ci_low", None),
        lambda x: x["eval_config"].__setitem__("confidence", 1.5),
        lambda x: x["eval_config"].__setitem__("dropped", 1),  # no field of the config class: dropped
        lambda x: x["sae_cfg_dict"].pop("architecture"),
        lambda x: x["sae_cfg_dict"].__setitem__("d_sae", "16k"),
        lambda x: x.__setitem__("eval_type_id", "core"),
    ):
        copy = json.loads(json.dumps(doc))
        change(copy)
        broken.append(copy)
    for b in broken:
        assert not validator.is_valid(b), b


def test_saebench_sae_fields_are_checked(result: Comparison) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"sae_lens_release_id": "rel"}, "give both the SAE's release"),
        ({"sae_lens_id": "blocks.0"}, "give both the SAE's release"),
        ({"sae_lens_release_id": "", "sae_lens_id": "x"}, "sae_lens_release_id must be a non-empty text"),
        ({"sae_cfg_dict": {"d_sae": K}}, "lacks 'architecture', which SAEBench's results reader reads"),
        ({"sae_cfg_dict": {}}, "lacks 'architecture' and 'd_sae'"),
        ({"sae_cfg_dict": {"architecture": "topk", "d_sae": 0}}, "'d_sae' must be a positive integer"),
        ({"sae_cfg_dict": {"architecture": "topk", "d_sae": True}}, "'d_sae' must be a positive integer"),
        ({"sae_cfg_dict": {"architecture": 3, "d_sae": 4}}, "'architecture' must be a non-empty text"),
        ({"sae_cfg_dict": [1]}, "must be a JSON object"),
        ({"sae_lens_version": 6}, "sae_lens_version must be a text"),
    ]
    for kw, message in cases:
        with pytest.raises(ParameterError, match=re.escape(message)):
            result.to_saebench(**kw)
        with pytest.raises(ParameterError, match=re.escape(message)):
            result.write("/nonexistent/never-written", **kw)


# --------------------------------------------------------------------------- small top sets


def test_a_top_set_of_a_handful_of_inputs_is_warned_of() -> None:
    """The issue's case: N = 60 at the default alpha is a top set of ceil(0.3) = 1 input, with which
    f1 and iou can rank a baseline first."""
    rng = np.random.default_rng(5)
    n, k = 60, 8
    truth = (rng.random((n, k)) < 0.3).astype(float)
    acts = truth + 0.8 * rng.normal(size=(n, k))
    table = pl.DataFrame({"unit": list(range(k)), "explainer": ["x"] * k, "explanation": [f"c{j}" for j in range(k)]})
    with pytest.warns(UserWarning) as caught:
        compare(acts, table, truth, n_boot=20)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert caught[0].filename == __file__  # the caller's line
    assert message.startswith(
        "alpha = 0.005 of 60 inputs makes each unit's top set 1 input: the top-set metrics auprc, f1, iou"
    )
    assert "raise alpha to at least 0.167 (a top set of 10)" in message
    assert math.ceil(0.167 * n) >= MIN_TOP_SET
    with pytest.warns(UserWarning, match="top set 9 inputs: the top-set metrics wpmi rest on"):
        compare(acts, table, truth, metrics=["correlation", "wpmi"], alpha=0.15, n_boot=0)
    with pytest.warns(UserWarning, match="top set 8 inputs: .*; probe more inputs$"):
        compare(acts[:8], table, truth[:8], metrics="f1", alpha=1.0, n_boot=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compare(acts, table, truth, metrics=["correlation", "cosine", "inverse_auc"], n_boot=0)  # no top set
        compare(acts, table, truth, alpha=10 / n, n_boot=0)  # ceil(10 / 60 * 60) = 10: enough
