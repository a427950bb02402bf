"""The `neuroneval crowd` commands (plan, aggregate, estimate, simulate): every file they write
and every number they print against `neuroneval.crowd` called on the same arrays, and every bad
input as one line on stderr with exit code 2 and no file left behind.

All but one case call `neuroneval.cli.main` in-process; one runs the whole chain (plan, ratings
written here by simulated raters, aggregate, estimate) with the installed `neuroneval` script.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from cli_helpers import assert_one_line_error, run
from neuroneval import crowd
from neuroneval.sources import write_shards
from polars.testing import assert_frame_equal

N, K, T = 2000, 4, 3
PAIRS = np.array([[0, 0], [1, 1], [3, 2]])
UNIT_NAMES = ["u0", "u1", "u2", "u3"]
EXPLANATIONS = ["dogs", "cats", "trees"]
RATER_ETAS = {"ann": 0.05, "bob": 0.2, "cy": 0.3}


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Units 0, 1 and 3 detect concepts 0, 1 and 2 (unit 2 is noise); a cheap, imperfect model."""
    rng = np.random.default_rng(5)
    y = (rng.random((N, T)) < [0.05, 0.1, 0.2]).astype(np.float64)
    noise = rng.normal(size=(N, K))
    a = np.column_stack([2 * y[:, 0], y[:, 1], np.zeros(N), 1.5 * y[:, 2]]) + noise
    model = np.clip(0.6 * y + 0.1 + 0.2 * rng.random((N, T)), 0, 1)
    return a.astype(np.float32), y, model


A, Y, MODEL = _data()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "acts": tmp_path / "acts.npy",
        "model": tmp_path / "model.npy",
        "labels": tmp_path / "truth.npy",
        "pairs": tmp_path / "pairs.csv",
        "units": tmp_path / "units.txt",
        "explanations": tmp_path / "explanations.txt",
    }
    np.save(paths["acts"], A)
    np.save(paths["model"], MODEL)
    np.save(paths["labels"], Y)
    pl.DataFrame({"unit": PAIRS[:, 0], "concept": PAIRS[:, 1]}).write_csv(paths["pairs"])
    paths["units"].write_text("\n".join(UNIT_NAMES) + "\n")
    paths["explanations"].write_text("\n".join(EXPLANATIONS) + "\n")
    return paths


def simulated_ratings(plan: crowd.Plan, seed: int = 0) -> pl.DataFrame:
    """Each shown (pair, input) rated by three raters, each wrong with their own rate."""
    rng = np.random.default_rng(seed)
    shown = plan.inputs().join(plan.pairs.select("pair", "concept"), on="pair", how="left", maintain_order="left")
    truth = Y[shown["input"].to_numpy(), shown["concept"].to_numpy()].astype(np.int64)
    frames = []
    for rater, eta in RATER_ETAS.items():
        wrong = (rng.random(shown.height) < eta).astype(np.int64)
        frames.append(shown.select("pair", "input").with_columns(rater=pl.lit(rater), vote=pl.Series(truth ^ wrong)))
    return pl.concat(frames)


def library_plan(**kwargs: Any) -> crowd.Plan:
    options: dict[str, Any] = {"unit_names": UNIT_NAMES, "explanations": EXPLANATIONS, "budget": 90, **kwargs}
    return crowd.plan(PAIRS, A, MODEL, **options)


def assert_same_plan(written: crowd.Plan, expected: crowd.Plan) -> None:
    assert_frame_equal(written.draws, expected.draws)
    assert_frame_equal(written.pairs, expected.pairs)
    assert (written.n_inputs, written.raters_per_input, written.sampling, written.gamma) == (
        expected.n_inputs,
        expected.raters_per_input,
        expected.sampling,
        expected.gamma,
    )


@pytest.fixture
def planned(files: dict[str, Path], tmp_path: Path) -> dict[str, Any]:
    """A plan written by the library, and ratings of all its inputs (parquet)."""
    plan = library_plan()
    plan.write(tmp_path / "plan.parquet")
    ratings = simulated_ratings(plan)
    ratings.write_parquet(tmp_path / "ratings.parquet")
    return {"plan": plan, "ratings": ratings, "plan_file": tmp_path / "plan.parquet"}


# --- plan ------------------------------------------------------------------------------------------


def test_plan_equals_library(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    argv: list[Any] = ["crowd", "plan", files["acts"], files["model"], "--pairs", files["pairs"], "--budget", 100]
    argv += ["--raters", 4, "--gamma", 0.3, "--seed", 5, "--unit-names", files["units"]]
    argv += ["--explanations", files["explanations"], "--batch-size", 7]
    out, tasks = tmp_path / "p.parquet", tmp_path / "tasks.parquet"
    code, stdout, err = run([*argv, "--out", out, "--tasks", tasks], capfd)
    assert code == 0, err
    assert err == ""
    expected = library_plan(budget=100, raters_per_input=4, gamma=0.3, seed=5)
    assert_same_plan(crowd.Plan.read(out), expected)
    assert expected.draws.height == 3 * 25
    assert_frame_equal(pl.read_parquet(tasks), expected.tasks(7))

    lines = stdout.splitlines()
    assert (
        lines[0]
        == "planned 3 pairs over 2,000 inputs by MG-IS (gamma 0.3), seed 5: 25 draws per pair, 4 raters per shown input"
    )
    assert lines[1].split() == ["pair", "unit", "explanation", "distinct", "inputs", "ratings"]
    shown = expected.inputs().group_by("pair", maintain_order=True).len()["len"].to_list()
    for i, (line, inputs) in enumerate(zip(lines[2:5], shown, strict=True)):
        assert line.split() == [
            str(i),
            UNIT_NAMES[PAIRS[i, 0]],
            EXPLANATIONS[PAIRS[i, 1]],
            str(inputs),
            str(4 * inputs),
        ]
    assert lines[5].startswith(
        f"ratings needed: {expected.ratings_needed():,} in all, {4 * min(shown)} to {4 * max(shown)} per pair"
    )
    assert max(shown) * 4 <= 100
    n_tasks = expected.tasks(7)["task"].n_unique()
    assert lines[6:] == [
        f"wrote the plan to {out}",
        f"wrote {n_tasks} tasks (at most 7 inputs each, {sum(shown)} rows) to {tasks}",
    ]
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == ["p.parquet", "tasks.parquet"]


def test_plan_uniform_default_tasks(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run" / "plan.parquet"
    out.parent.mkdir()
    argv = ["crowd", "plan", files["acts"], files["model"], "--pairs", files["pairs"], "--budget", 60, "--uniform"]
    code, stdout, err = run([*argv, "--out", out], capfd)
    assert code == 0, err
    expected = crowd.plan(PAIRS, A, MODEL, 60, sampling="uniform")
    assert_same_plan(crowd.Plan.read(out), expected)
    assert expected.pairs["unit_name"].to_list() == ["unit 0", "unit 1", "unit 3"]
    tasks = out.parent / "plan-tasks.csv"
    assert_frame_equal(pl.read_csv(tasks), expected.tasks(20), check_dtypes=False)
    assert sorted(p.name for p in out.parent.iterdir()) == ["plan-tasks.csv", "plan.parquet"]
    assert "by uniform sampling, seed 0: 20 draws per pair, 3 raters per shown input" in stdout.splitlines()[0]
    assert stdout.splitlines()[-1].endswith(f"to {tasks}")


def test_plan_other_sources(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Sparse activations, shard directories and a concept table give the plan of the dense arrays."""
    a = A.copy()
    a[a < 0.5] = 0.0
    sp.save_npz(tmp_path / "acts.npz", sp.csc_matrix(a))
    write_shards(tmp_path / "acts", [a[:1000], a[1000:]])
    write_shards(tmp_path / "model", [MODEL[:700], MODEL[700:]], names=EXPLANATIONS)  # names from the manifest
    rows, cols = np.nonzero(MODEL)
    table = pl.DataFrame({"input": rows, "concept": [EXPLANATIONS[c] for c in cols], "probability": MODEL[rows, cols]})
    table.write_csv(tmp_path / "model.csv")
    expected = crowd.plan(PAIRS, a, MODEL, 90, explanations=EXPLANATIONS)
    for acts, model, extra in [
        (tmp_path / "acts.npz", tmp_path / "model", []),
        (tmp_path / "acts", tmp_path / "model.csv", ["--explanations", files["explanations"]]),  # the table's order
    ]:
        out = tmp_path / "plan.parquet"
        argv = ["crowd", "plan", acts, model, "--pairs", files["pairs"], "--budget", 90, *extra, "--out", out]
        code, _, err = run(argv, capfd)
        assert code == 0, err
        assert_same_plan(crowd.Plan.read(out), expected)


# --- aggregate ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, kwargs, how",
    [
        ([], {}, "BRAgg (eta 0.23, prior 0.05)"),
        (["--eta", "0.1", "--prior", "0.2"], {"eta": 0.1, "prior": 0.2}, "BRAgg (eta 0.1, prior 0.2)"),
        (["--prior", "model"], {"prior": "model"}, "BRAgg (eta 0.23, prior the concept model's probability)"),
        (["--method", "majority"], {"method": "majority"}, "the majority vote"),
        (["--method", "mean"], {"method": "mean"}, "the mean vote"),
    ],
)
def test_aggregate_equals_library(
    planned: dict[str, Any],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    flags: list[str],
    kwargs: dict[str, Any],
    how: str,
) -> None:
    out = tmp_path / "labels.parquet"
    argv = ["crowd", "aggregate", tmp_path / "ratings.parquet", "--plan", planned["plan_file"], *flags, "--out", out]
    code, stdout, err = run(argv, capfd)
    assert code == 0, err
    expected = crowd.aggregate(planned["ratings"], plan=planned["plan"], **kwargs)
    assert_frame_equal(pl.read_parquet(out), expected)
    assert expected.columns == ["pair", "input", "votes", "positive", "label"]
    positive = int((expected["label"] >= 0.5).sum())
    assert stdout.splitlines() == [
        f"aggregated {planned['ratings'].height:,} votes into {expected.height} labels (3.00 votes per (pair, input)) "
        f"by {how}; {positive} labels >= 0.5",
        f"wrote {out}",
    ]


def test_aggregate_estimated_rater_rates(
    planned: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ratings = tmp_path / "ratings.csv"
    planned["ratings"].write_csv(ratings)
    out, rates = tmp_path / "labels.csv", tmp_path / "rates.parquet"
    argv = ["crowd", "aggregate", ratings, "--plan", planned["plan_file"], "--eta", "estimate", "--prior", "model"]
    code, stdout, err = run([*argv, "--out", out, "--rater-rates", rates], capfd)
    assert code == 0, err
    expected = crowd.aggregate(planned["ratings"], eta="estimate", prior="model", plan=planned["plan"])
    assert_frame_equal(pl.read_csv(out), expected, check_dtypes=False, check_exact=True)
    expected_rates = crowd.rater_error_rates(planned["ratings"], prior="model", plan=planned["plan"])
    assert_frame_equal(pl.read_parquet(rates), expected_rates)
    assert expected_rates["rater"].to_list() == list(RATER_ETAS)
    lines = stdout.splitlines()
    assert "BRAgg (eta fitted per rater, prior the concept model's probability)" in lines[0]
    assert lines[1] == "each rater's fitted error rate (one-coin Dawid-Skene):"
    assert lines[2].split() == ["rater", "eta", "votes"]
    for line, r in zip(lines[3:6], expected_rates.iter_rows(named=True), strict=True):
        assert line.split() == [r["rater"], f"{r['eta']:.4f}", str(r["votes"])]
    # The fit finds the planted order of the raters' error rates.
    etas = expected_rates["eta"].to_list()
    assert etas[0] < etas[1] < etas[2]
    assert lines[6:] == [f"wrote {out} and {rates}"]


def test_aggregate_notes_unrated_inputs(
    planned: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    some = planned["ratings"].filter(pl.col("pair") != 2)
    some.write_parquet(tmp_path / "some.parquet")
    out = tmp_path / "labels.parquet"
    argv = ["crowd", "aggregate", tmp_path / "some.parquet", "--plan", planned["plan_file"], "--out", out]
    code, stdout, err = run(argv, capfd)
    assert code == 0, err
    assert_frame_equal(pl.read_parquet(out), crowd.aggregate(some, plan=planned["plan"]))
    unrated = planned["plan"].inputs().filter(pl.col("pair") == 2).height
    total = planned["plan"].inputs().height
    assert f"note: {unrated} of the plan's {total} (pair, input) have no rating yet" in stdout


# --- estimate ----------------------------------------------------------------------------------------


def test_estimate_equals_library(planned: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    labels = crowd.aggregate(planned["ratings"], plan=planned["plan"])
    labels.write_parquet(tmp_path / "labels.parquet")
    out = tmp_path / "rho.csv"
    argv = ["crowd", "estimate", "--plan", planned["plan_file"], "--labels", tmp_path / "labels.parquet"]
    argv += ["--self-normalised", "--level", "0.9", "--bootstrap", "500", "--seed", "2", "--out", out]
    code, stdout, err = run(argv, capfd)
    assert code == 0, err
    expected = crowd.estimate(planned["plan"], labels, self_normalised=True, level=0.9, bootstrap=500, seed=2)
    assert_frame_equal(pl.read_csv(out), expected, check_dtypes=False, check_exact=True)
    # The options matter: the defaults give other numbers.
    assert expected["rho"].to_list() != crowd.estimate(planned["plan"], labels)["rho"].to_list()
    lines = stdout.splitlines()
    assert lines[0] == (
        "correlation of 3 pairs from MG-IS (gamma 0.2) with self-normalised weights; "
        "90% percentile interval and SE from 500 bootstrap resamples, seed 2"
    )
    assert lines[1].split() == ["unit", "explanation", "rho", "90%", "CI", "SE", "draws", "inputs"]
    for line, r in zip(lines[2:5], expected.iter_rows(named=True), strict=True):
        cells = [r["unit_name"], r["explanation"], f"{r['rho']:.4f}", f"[{r['ci_low']:.4f},", f"{r['ci_high']:.4f}]"]
        assert line.split() == [*cells, f"{r['se']:.4f}", str(r["draws"]), str(r["inputs"])]
    assert lines[5:] == [f"wrote {out}"]


def test_estimate_without_bootstrap(planned: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    labels = crowd.aggregate(planned["ratings"], "majority")
    labels.write_csv(tmp_path / "labels.csv")
    argv = ["crowd", "estimate", "--plan", planned["plan_file"], "--labels", tmp_path / "labels.csv", "--bootstrap", 0]
    code, stdout, err = run(argv, capfd)
    assert code == 0, err
    expected = crowd.estimate(planned["plan"], labels, bootstrap=0)
    lines = stdout.splitlines()
    assert lines[0].endswith("with weights 1 / (N q); no bootstrap")
    for line, r in zip(lines[2:], expected.iter_rows(named=True), strict=True):
        assert line.split() == [r["unit_name"], r["explanation"], f"{r['rho']:.4f}", "-", "-", "30", str(r["inputs"])]
    assert len(lines) == 5  # no file written, none announced
    assert not list(tmp_path.glob("*.parquet.*"))


@pytest.mark.parametrize("estimator", ["debiased", "composite"])
def test_debiased_chain_equals_library(
    planned: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str], estimator: str
) -> None:
    """`aggregate --method debiased|composite` then `estimate --estimator ...`, as the library does."""
    planned["ratings"].write_csv(tmp_path / "ratings.csv")
    labels_file = tmp_path / "labels.csv"
    argv = ["crowd", "aggregate", tmp_path / "ratings.csv", "--plan", planned["plan_file"], "--method", estimator]
    code, stdout, err = run([*argv, "--prior", "model", "--eta", "0.2", "--out", labels_file], capfd)
    assert code == 0, err
    labels = crowd.aggregate(planned["ratings"], estimator, eta=0.2, prior="model", plan=planned["plan"])
    assert_frame_equal(pl.read_csv(labels_file), labels, check_dtypes=False, check_exact=True)
    kind = "debiased BRAgg" if estimator == "debiased" else "BRAgg and debiased BRAgg"
    assert f"by {kind} (eta 0.2, prior the concept model's probability)" in stdout.splitlines()[0]
    out = tmp_path / "rho.csv"
    argv = ["crowd", "estimate", "--plan", planned["plan_file"], "--labels", labels_file, "--estimator", estimator]
    code, stdout, err = run(
        [*argv, "--level", "0.9", "--out", out, *(["--interval", "delta"] * (estimator == "debiased"))], capfd
    )
    assert code == 0, err
    expected = crowd.estimate(
        planned["plan"], pl.read_csv(labels_file), estimator=estimator, interval="delta", level=0.9
    )
    assert_frame_equal(pl.read_csv(out), expected, check_dtypes=False, check_exact=True)
    assert stdout.splitlines()[0] == (
        f"correlation of 3 pairs from MG-IS (gamma 0.2) with weights 1 / (N q), the {estimator} estimator; "
        "90% interval and SE by the delta method"
    )
    # Debiased labels are refused by the plug-in estimator, and the delta interval with self-normalised weights.
    debiased = labels["label" if estimator == "debiased" else "debiased"]
    assert (debiased < 0).any()
    plain = ["crowd", "estimate", "--plan", planned["plan_file"], "--labels", labels_file]
    if estimator == "debiased":
        code, _, err = run(plain, capfd)
        assert code != 0 and "estimator='debiased'" in err
    code, _, err = run([*argv, "--interval", "delta", "--self-normalised"], capfd)
    assert code != 0 and ("plain estimator" in err or "plain weights" in err)


# --- a study round by round ----------------------------------------------------------------------------


def test_round_by_round_study_ends_with_the_library_estimate(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """`plan --rating sequential`, then `rate` (simulated raters) and `next` until no input needs
    a vote, then `aggregate` and `estimate`: the estimate of `simulate_study` with the same seeds."""
    plan_file, labels_file, rho_file = tmp_path / "plan.parquet", tmp_path / "labels.csv", tmp_path / "rho.csv"
    argv = ["crowd", "plan", files["acts"], files["model"], "--pairs", files["pairs"], "--budget", 120]
    rule = ["--rating", "sequential", "--raters", 7, "--prior", "model", "--seed", 3, "--unit-names", files["units"]]
    rule += ["--explanations", files["explanations"]]
    code, out, err = run([*argv, *rule, "--out", plan_file, "--tasks", tmp_path / "tasks-1.csv"], capfd)
    assert code == 0, err
    assert "sequential rating: one vote at a time until BRAgg (eta 0.23, prior the concept model's" in out
    rounds: list[Path] = []
    while True:
        tasks = tmp_path / f"tasks-{len(rounds) + 1}.csv"
        rounds.append(tmp_path / f"ratings-{len(rounds) + 1}.csv")
        code, out, err = run(["crowd", "rate", tasks, files["labels"], "--seed", 8, "--out", rounds[-1]], capfd)
        assert code == 0, err
        following = tmp_path / f"tasks-{len(rounds) + 1}.csv"
        code, out, err = run(["crowd", "next", *rounds, "--plan", plan_file, "--tasks", following], capfd)
        assert code == 0, err
        if "the study is finished" in out:
            assert pl.read_csv(following).height == 0
            break
        assert pl.read_csv(following).height > 0
    assert len(rounds) >= 3
    code, out, err = run(
        ["crowd", "aggregate", *rounds, "--plan", plan_file, "--method", "debiased", "--out", labels_file], capfd
    )
    assert code == 0, err
    assert "the study is finished" in out
    argv = ["crowd", "estimate", "--plan", plan_file, "--labels", labels_file, "--estimator", "debiased"]
    code, out, err = run([*argv, "--out", rho_file], capfd)
    assert code == 0, err

    the_plan = library_plan(budget=120, rating="sequential", raters_per_input=7, prior="model", seed=3)
    assert_same_plan(crowd.Plan.read(plan_file), the_plan)
    ratings = crowd.simulate_study(the_plan, Y, seed=8)
    written = pl.concat([pl.read_csv(r) for r in rounds])
    assert_frame_equal(
        written.sort("pair", "input", "rater"), ratings.sort("pair", "input", "rater"), check_dtypes=False
    )
    labels = crowd.aggregate(ratings, "debiased", plan=the_plan)
    assert_frame_equal(pl.read_csv(labels_file).sort("pair", "input"), labels.sort("pair", "input"), check_dtypes=False)
    expected = crowd.estimate(the_plan, labels, estimator="debiased")
    assert_frame_equal(pl.read_csv(rho_file), expected, check_dtypes=False, check_exact=True)
    assert expected["draws"].min() > 10


@pytest.mark.parametrize(
    ("case", "fragments"),
    [
        ("tasks without rated", ["tasks", "rated"]),
        ("labels not binary", ["binary"]),
        ("input beyond labels", ["outside labels"]),
        ("eta out of range", ["eta"]),
    ],
)
def test_rate_bad_input_is_one_line(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], case: str, fragments: list[str]
) -> None:
    tasks = library_plan().tasks()
    labels, extra = files["labels"], []
    if case == "tasks without rated":
        tasks = tasks.drop("rated")
    elif case == "labels not binary":
        labels = tmp_path / "soft.npy"
        np.save(labels, MODEL)
    elif case == "input beyond labels":
        tasks = tasks.with_columns(pl.lit(N + 5).alias("input"))
    else:
        extra = ["--eta", "0.5"]
    tasks.write_csv(tmp_path / "tasks.csv")
    out = tmp_path / "votes.csv"
    code, stdout, err = run(["crowd", "rate", tmp_path / "tasks.csv", labels, *extra, "--out", out], capfd)
    assert stdout == ""
    assert_one_line_error(code, err, 2, *fragments)
    assert not out.exists()


def test_next_bad_input_is_one_line(planned: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    planned["ratings"].write_csv(tmp_path / "a.csv")
    planned["ratings"].drop("rater").with_columns(pl.lit("x").alias("note")).write_csv(tmp_path / "b.csv")
    out = tmp_path / "next.csv"
    argv = ["crowd", "next", "--plan", planned["plan_file"], "--tasks", out]
    code, stdout, err = run([*argv, tmp_path / "a.csv", tmp_path / "b.csv"], capfd)
    assert_one_line_error(code, err, 2, "do not hold the same columns")
    planned["ratings"].with_columns(pl.lit(N - 1).alias("input")).write_csv(tmp_path / "c.csv")
    code, stdout, err = run([*argv, tmp_path / "c.csv"], capfd)
    assert_one_line_error(code, err, 2, "the plan did not draw")
    assert not out.exists()
    # a fixed plan's one round: all of it before any rating, none after
    code, stdout, err = run([*argv], capfd)
    assert code == 0, err
    assert_frame_equal(pl.read_csv(out), planned["plan"].tasks(), check_dtypes=False)
    code, stdout, err = run([*argv, tmp_path / "a.csv"], capfd)
    assert code == 0 and "the study is finished" in stdout


# --- simulate ----------------------------------------------------------------------------------------


def test_simulate_equals_library(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim"
    argv = ["crowd", "simulate", files["acts"], files["labels"], files["model"], "--pairs", files["pairs"]]
    argv += ["--budgets", "90, 30,90", "--eta", "0.15", "--raters", "3,1,3", "--trials", "4", "--gamma", "0.3"]
    argv += ["--configurations", "uniform+majority,mgis+debiased,uniform+majority"]
    argv += ["--prior", "model", "--target", "0.6", "--seed", "1", "--out", out]
    code, stdout, err = run(argv, capfd)
    assert code == 0, err
    assert err == ""
    expected = crowd.simulate(
        A,
        Y,
        MODEL,
        PAIRS,
        [30, 90],
        configurations=[("uniform", "majority"), ("mgis", "debiased")],
        eta=0.15,
        raters_per_input=[1, 3],
        trials=4,
        gamma=0.3,
        prior="model",
        target=0.6,
        seed=1,
    )
    assert sorted(p.name for p in out.iterdir()) == ["cheapest.csv", "needed.csv", "rce.csv", "rce.png"]
    assert_frame_equal(pl.read_csv(out / "rce.csv"), expected.rce, check_dtypes=False, check_exact=True)
    needed, cheapest = expected.needed(), expected.cheapest()
    assert_frame_equal(pl.read_csv(out / "needed.csv", schema=needed.schema), needed, check_exact=True)
    assert_frame_equal(pl.read_csv(out / "cheapest.csv", schema=cheapest.schema), cheapest, check_exact=True)
    assert (out / "rce.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    lines = stdout.splitlines()
    assert lines[0] == (
        "simulated raters wrong with rate 0.15, 1, 3 per shown input, 3 pairs x 4 trials; "
        "MG-IS gamma 0.3, BRAgg prior the concept model's probability; seed 1"
    )
    assert lines[2].split() == ["configuration", "raters", "30", "90"]
    names = {("uniform", "majority"): "uniform + majority", ("mgis", "debiased"): "MG-IS + debiased"}
    rows = expected.rce.rows(named=True)
    for i, key in enumerate([(s, m, r) for s, m in names for r in (1, 3)]):
        rce = [row["rce"] for row in rows if (row["sampling"], row["aggregation"], row["raters"]) == key]
        assert lines[3 + i].split() == [*names[key[:2]].split(), str(key[2]), *(f"{v:.3f}" for v in rce)]
    assert f"the concept model alone (no rating): RCE {expected.model_rce:.3f}" in lines
    at = next(i for i, line in enumerate(lines) if line.startswith("cheapest ratings per pair for RCE <= 0.6"))
    assert lines[at + 1].split() == ["configuration", "raters", "inputs", "ratings"]
    for row, line in zip(cheapest.iter_rows(named=True), lines[at + 2 : at + 4], strict=True):
        name = names[(row["sampling"], row["aggregation"])]
        if row["needed"] is None:
            assert line.split() == [*name.split(), "-", "-", "not", "within", "90"]
        else:
            assert line.split() == [*name.split(), str(row["raters"]), f"{row['inputs']:,.0f}", f"{row['needed']:,.0f}"]
    assert lines[-1] == f"wrote rce.csv, needed.csv, cheapest.csv, rce.png to {out}"


def test_simulate_sequential_equals_library(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    argv = ["crowd", "simulate", files["acts"], files["labels"], files["model"], "--pairs", files["pairs"]]
    # a budget below the raters per input buys draws of fewer votes sequentially
    argv += ["--budgets", "3,9,60", "--raters", "5,9", "--trials", "3", "--rating", "sequential", "--confidence", "0.9"]
    argv += ["--configurations", "mgis+debiased,uniform+majority", "--prior", "model", "--seed", "2"]
    code, stdout, err = run(argv, capfd)
    assert code == 0, err
    expected = crowd.simulate(
        A, Y, MODEL, PAIRS, [3, 9, 60], configurations=[("mgis", "debiased"), ("uniform", "majority")],
        raters_per_input=[5, 9], trials=3, rating="sequential", confidence=0.9, prior="model", seed=2,
    )  # fmt: skip
    assert stdout.splitlines()[0].startswith(
        "simulated raters wrong with rate 0.23, one at a time until BRAgg is 0.9 sure, at most 5, 9 per shown input"
    )
    rows = expected.rce.rows(named=True)
    assert {(r["raters"], r["budget"]) for r in rows} >= {(9, 3), (5, 3)}
    for row in rows:
        assert row["ratings"] <= row["budget"]
    first = next(line for line in stdout.splitlines() if line.split()[:4] == ["MG-IS", "+", "debiased", "5"])
    assert first.split()[4:] == [f"{r['rce']:.3f}" for r in rows if (r["aggregation"], r["raters"]) == ("debiased", 5)]


def test_simulate_needed_both_ways(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    """A target every configuration reaches at once, and one none reaches."""
    argv = ["crowd", "simulate", files["acts"], files["labels"], files["model"], "--pairs", files["pairs"]]
    argv += ["--budgets", "30,60", "--trials", "2"]
    names = ["uniform + majority", "uniform + BRAgg", "MG-IS + majority", "MG-IS + BRAgg"]
    code, stdout, err = run([*argv, "--target", "100"], capfd)
    assert code == 0, err
    assert [line.split() for line in stdout.splitlines()[-4:]] == [[*n.split(), "3", "10", "30"] for n in names]
    code, stdout, err = run([*argv, "--target", "0.0001"], capfd)
    assert code == 0, err
    assert stdout.count("not within 60") == 4


def test_simulate_concept_tables(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """LABELS and CONCEPT_MODEL as concept tables: the model's columns follow the labels' names
    (even where the model never names a concept the labels have)."""
    names = ["zebra", "apple", "mango"]  # sorted: apple, mango, zebra
    order = np.argsort(names)
    for values, path in [(Y, tmp_path / "labels.csv"), (MODEL, tmp_path / "model.parquet")]:
        rows, cols = np.nonzero(values)
        keep = cols != (1 if path.suffix == ".parquet" else -1)  # the model never names "apple"
        table = pl.DataFrame(
            {
                "input": rows[keep],
                "concept": [names[c] for c in cols[keep]],
                "probability": values[rows[keep], cols[keep]],
            }
        )
        if path.suffix == ".csv":
            table.write_csv(path)
        else:
            table.write_parquet(path)
    model = MODEL.copy()
    model[:, 1] = 0.0
    pairs = np.column_stack([PAIRS[:, 0], np.argsort(order)[PAIRS[:, 1]]])  # the same concepts, in sorted order
    pl.DataFrame({"unit": pairs[:, 0], "concept": pairs[:, 1]}).write_csv(files["pairs"])
    out = tmp_path / "sim"
    argv = [
        "crowd",
        "simulate",
        files["acts"],
        tmp_path / "labels.csv",
        tmp_path / "model.parquet",
        "--pairs",
        files["pairs"],
    ]
    code, _, err = run([*argv, "--budgets", "30,60", "--trials", "2", "--out", out, "--no-chart"], capfd)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["cheapest.csv", "needed.csv", "rce.csv"]
    expected = crowd.simulate(A, Y[:, order], model[:, order], pairs, [30, 60], trials=2)
    assert_frame_equal(pl.read_csv(out / "rce.csv"), expected.rce, check_dtypes=False, check_exact=True)


# --- the whole chain, as a user runs it --------------------------------------------------------------


def test_chain_subprocess(files: dict[str, Path], tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "neuroneval"

    def neuroneval(*argv: Any) -> str:
        proc = subprocess.run([script, *[str(a) for a in argv]], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        return proc.stdout

    plan_file = tmp_path / "plan.parquet"
    neuroneval(
        "crowd",
        "plan",
        files["acts"],
        files["model"],
        "--pairs",
        files["pairs"],
        "--budget",
        150,
        "--unit-names",
        files["units"],
        "--explanations",
        files["explanations"],
        "--seed",
        3,
        "--out",
        plan_file,
    )
    expected_plan = library_plan(budget=150, seed=3)
    assert_same_plan(crowd.Plan.read(plan_file), expected_plan)

    # The raters' answers, as a platform would return them: one row per (task row, rater).
    tasks = pl.read_csv(tmp_path / "plan-tasks.csv")
    assert tasks.height == expected_plan.inputs().height
    rng = np.random.default_rng(9)
    rows = []
    for r in tasks.iter_rows(named=True):
        for rater, eta in RATER_ETAS.items():
            rows.append((r["pair"], r["input"], rater, int(Y[r["input"], r["concept"]]) ^ int(rng.random() < eta)))
    ratings = pl.DataFrame(rows, schema=["pair", "input", "rater", "vote"], orient="row")
    ratings.write_csv(tmp_path / "ratings.csv")

    neuroneval("crowd", "aggregate", tmp_path / "ratings.csv", "--plan", plan_file, "--out", tmp_path / "labels.csv")
    labels = crowd.aggregate(ratings, plan=expected_plan)
    assert_frame_equal(pl.read_csv(tmp_path / "labels.csv"), labels, check_dtypes=False, check_exact=True)

    stdout = neuroneval(
        "crowd", "estimate", "--plan", plan_file, "--labels", tmp_path / "labels.csv", "--out", tmp_path / "rho.parquet"
    )
    expected = crowd.estimate(expected_plan, labels)
    assert_frame_equal(pl.read_parquet(tmp_path / "rho.parquet"), expected, check_exact=True)
    for name, r in zip(UNIT_NAMES[:2] + UNIT_NAMES[3:], expected.iter_rows(named=True), strict=True):
        assert any(line.split()[:3] == [name, r["explanation"], f"{r['rho']:.4f}"] for line in stdout.splitlines())
    # The detectors' estimates are near their exact correlations.
    exact = [np.corrcoef(A[:, k], Y[:, t])[0, 1] for k, t in PAIRS]
    assert np.all(np.abs(expected["rho"].to_numpy() - exact) < 4 * expected["se"].to_numpy())


# --- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case, fragments",
    [
        ("missing activations", ["gone.npy", "does not exist"]),
        ("missing concept model", ["gone.npy", "does not exist"]),
        ("missing pairs", ["pairs file", "does not exist"]),
        ("mismatched N", ["CONCEPT_MODEL has 1,999 inputs", "2,000"]),
        ("unit out of range", ["pair 1 = (4, 1) is out of range: there are 4 units and 3 concepts"]),
        ("concept out of range", ["= (0, 3) is out of range"]),
        ("negative pair", ["= (-1, 0) is out of range"]),
        ("budget below raters", ["--budget must be at least --raters (3); got 2"]),
        ("raters 0", ["invalid parameter raters_per_input = 0: raters_per_input must be an integer >= 1"]),
        ("gamma 0", ["invalid parameter gamma = 0.0: gamma must be a real number with 0 < gamma <= 1"]),
        ("gamma 1.5", ["invalid parameter gamma = 1.5: gamma must be"]),
        ("negative seed", ["seed", "-1"]),
        ("batch size 0", ["invalid parameter batch_size = 0: batch_size must be an integer >= 1"]),
        ("plan suffix", ["--out", ".parquet"]),
        ("tasks suffix", ["--tasks", ".csv or .parquet"]),
        ("tasks is the plan", ["same file"]),
        ("out directory missing", ["output directory", "does not exist"]),
        ("unit names count", ["unit_names has 3 entries for 4 columns"]),
        ("concept out of [0, 1]", ["probabilities must lie in [0, 1]"]),
        ("constant unit", ["constant"]),
    ],
)
def test_plan_bad_input_is_one_line(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], case: str, fragments: list[str]
) -> None:
    acts, model, pairs, out = files["acts"], files["model"], files["pairs"], tmp_path / "plan.parquet"
    extra: list[Any] = []
    if case == "missing activations":
        acts = tmp_path / "gone.npy"
    elif case == "missing concept model":
        model = tmp_path / "gone.npy"
    elif case == "missing pairs":
        pairs = tmp_path / "gone.csv"
    elif case == "mismatched N":
        np.save(files["model"], MODEL[:-1])
    elif case in ("unit out of range", "concept out of range", "negative pair", "constant unit"):
        bad = {"unit out of range": [4, 1], "concept out of range": [0, 3], "negative pair": [-1, 0]}.get(case, [2, 0])
        table = pl.DataFrame({"unit": [0, bad[0]], "concept": [0, bad[1]]})
        table.write_csv(pairs)
        if case == "constant unit":
            a = A.copy()
            a[:, 2] = 1.0
            np.save(acts, a)
    elif case == "budget below raters":
        extra = ["--budget", "2"]
    elif case == "raters 0":
        extra = ["--raters", "0"]
    elif case == "gamma 0":
        extra = ["--gamma", "0"]
    elif case == "gamma 1.5":
        extra = ["--gamma", "1.5"]
    elif case == "negative seed":
        extra = ["--seed", "-1"]
    elif case == "batch size 0":
        extra = ["--batch-size", "0"]
    elif case == "plan suffix":
        out = tmp_path / "plan.csv"
    elif case == "tasks suffix":
        extra = ["--tasks", tmp_path / "tasks.txt"]
    elif case == "tasks is the plan":
        extra = ["--tasks", tmp_path / "x" / ".." / "plan.parquet"]
        (tmp_path / "x").mkdir()
    elif case == "out directory missing":
        out = tmp_path / "no" / "plan.parquet"
    elif case == "unit names count":
        files["units"].write_text("a\nb\nc\n")
        extra = ["--unit-names", files["units"]]
    elif case == "concept out of [0, 1]":
        m = MODEL.copy()
        m[7, 1] = 1.5
        np.save(model, m)
    else:  # pragma: no cover
        raise AssertionError(case)
    argv = ["crowd", "plan", acts, model, "--pairs", pairs, "--budget", 30, *extra, "--out", out]
    before = sorted(tmp_path.rglob("*"))
    code, stdout, err = run(argv, capfd)
    assert_one_line_error(code, err, 2, *fragments)
    assert stdout == ""
    assert sorted(tmp_path.rglob("*")) == before  # no plan, no task table, no temporary file


@pytest.mark.parametrize(
    "case, fragments",
    [
        ("missing ratings", ["ratings file", "does not exist"]),
        ("ratings not a table", ["expected a .csv or .parquet file"]),
        ("unreadable ratings", ["cannot read the ratings file"]),
        ("missing plan", ["plan file", "does not exist"]),
        ("not a plan", ["is not a neuroneval crowd plan"]),
        ("corrupt plan", ["cannot read a plan"]),
        ("unknown pair", ["the plan did not draw", "pair 7"]),
        ("unknown input", ["the plan did not draw"]),
        ("non-binary vote", ["votes must be binary", "vote 2"]),
        ("missing column", ["lack the column(s) ['vote']"]),
        ("eta 0.5", ["invalid parameter eta = 0.5: eta must be a real number with 0 < eta < 0.5 or 'estimate'"]),
        ("eta word", ["--eta", "'often'"]),
        ("prior 1", ["invalid parameter prior = 1.0: prior must be a real number with 0 < prior < 1 or 'model'"]),
        ("estimate without raters", ["--eta estimate needs a rater column"]),
        ("out suffix", ["--out", ".csv or .parquet"]),
        ("rates suffix", ["--rater-rates", ".csv or .parquet"]),
    ],
)
def test_aggregate_bad_input_is_one_line(
    planned: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str], case: str, fragments: list[str]
) -> None:
    ratings_file, plan_file, out = tmp_path / "ratings.parquet", planned["plan_file"], tmp_path / "labels.csv"
    ratings: pl.DataFrame = planned["ratings"]
    extra: list[Any] = []
    if case == "missing ratings":
        ratings_file = tmp_path / "gone.csv"
    elif case == "ratings not a table":
        ratings_file = tmp_path / "ratings.txt"
        ratings_file.write_text("pair,input,vote\n")
    elif case == "unreadable ratings":
        ratings_file.write_bytes(b"not parquet")
    elif case == "missing plan":
        plan_file = tmp_path / "gone.parquet"
    elif case == "not a plan":
        plan_file = ratings_file
    elif case == "corrupt plan":
        plan_file.write_bytes(b"PAR1 broken")
    elif case == "unknown pair":
        ratings.with_columns(
            pl.when(pl.int_range(pl.len()) == 5).then(7).otherwise("pair").alias("pair")
        ).write_parquet(ratings_file)
    elif case == "unknown input":
        ratings.with_columns((pl.col("input") + 1) % N).write_parquet(ratings_file)
    elif case == "non-binary vote":
        ratings.with_columns(
            pl.when(pl.int_range(pl.len()) == 3).then(2).otherwise("vote").alias("vote")
        ).write_parquet(ratings_file)
    elif case == "missing column":
        ratings.drop("vote").write_parquet(ratings_file)
    elif case == "eta 0.5":
        extra = ["--eta", "0.5"]
    elif case == "eta word":
        extra = ["--eta", "often"]
    elif case == "prior 1":
        extra = ["--prior", "1"]
    elif case == "estimate without raters":
        ratings.drop("rater").write_parquet(ratings_file)
        extra = ["--eta", "estimate"]
    elif case == "out suffix":
        out = tmp_path / "labels.txt"
    elif case == "rates suffix":
        extra = ["--eta", "estimate", "--rater-rates", tmp_path / "rates.json"]
    else:  # pragma: no cover
        raise AssertionError(case)
    before = sorted(tmp_path.rglob("*"))
    code, stdout, err = run(["crowd", "aggregate", ratings_file, "--plan", plan_file, *extra, "--out", out], capfd)
    assert_one_line_error(code, err, 2, *fragments)
    assert stdout == ""
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    "case, fragments",
    [
        ("level 1", ["invalid parameter level = 1.0: level must be a real number with 0 < level < 1"]),
        ("negative bootstrap", ["invalid parameter bootstrap = -1: bootstrap must be an integer >= 0"]),
        ("missing labels", ["labels file", "does not exist"]),
        ("unlabelled draw", ["have no label", "pair 1"]),
        ("label out of range", ["labels must lie in [0, 1]"]),
        ("no label column", ["labels lack the column(s) ['label']"]),
        ("not a plan", ["not a neuroneval crowd plan"]),
        ("out suffix", ["--out", ".csv or .parquet"]),
    ],
)
def test_estimate_bad_input_is_one_line(
    planned: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str], case: str, fragments: list[str]
) -> None:
    labels = crowd.aggregate(planned["ratings"], plan=planned["plan"])
    labels_file, plan_file = tmp_path / "labels.parquet", planned["plan_file"]
    labels.write_parquet(labels_file)
    extra: list[Any] = ["--out", tmp_path / "rho.csv"]
    if case == "level 1":
        extra += ["--level", "1"]
    elif case == "negative bootstrap":
        extra += ["--bootstrap", "-1"]
    elif case == "missing labels":
        labels_file = tmp_path / "gone.csv"
    elif case == "unlabelled draw":
        labels.filter(pl.col("pair") != 1).write_parquet(labels_file)
    elif case == "label out of range":
        labels.with_columns(pl.col("label") * 2).write_parquet(labels_file)
    elif case == "no label column":
        labels.drop("label").write_parquet(labels_file)
    elif case == "not a plan":
        plan_file = labels_file
    elif case == "out suffix":
        extra = ["--out", tmp_path / "rho.txt"]
    else:  # pragma: no cover
        raise AssertionError(case)
    before = sorted(tmp_path.rglob("*"))
    code, stdout, err = run(["crowd", "estimate", "--plan", plan_file, "--labels", labels_file, *extra], capfd)
    assert_one_line_error(code, err, 2, *fragments)
    assert stdout == ""
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    "case, fragments",
    [
        ("budgets word", ["--budgets must be comma-separated positive integers", "'many'"]),
        ("budgets empty", ["--budgets is empty"]),
        ("budgets negative", ["--budgets", "'-30'"]),
        ("budget below raters", ["--budgets must all be at least the smallest --raters (3); got 2"]),
        ("eta 0.6", ["invalid parameter eta = 0.6: eta must be a real number with 0 < eta < 0.5"]),
        ("trials 0", ["invalid parameter trials = 0: trials must be an integer >= 1"]),
        ("raters 0", ["invalid parameter raters_per_input = 0: raters_per_input must be an integer >= 1"]),
        ("gamma 0", ["invalid parameter gamma = 0.0: gamma must be"]),
        ("negative target", ["invalid parameter target = -0.5: target must be a finite real number >= 0"]),
        ("prior model word", ["--prior", "'modle'"]),
        ("soft labels", ["binary true labels"]),
        ("mismatched N", ["LABELS has 1,999 inputs"]),
        ("mismatched T", ["CONCEPT_MODEL has 2 explanations (columns) but LABELS has 3"]),
        ("pair out of range", ["= (0, 3) is out of range"]),
        ("zero correlation", ["nonzero true correlation"]),
        ("out is a file", ["is a file"]),
    ],
)
def test_simulate_bad_input_is_one_line(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], case: str, fragments: list[str]
) -> None:
    labels, model, out = files["labels"], files["model"], tmp_path / "sim"
    budgets, extra = "30,60", ["--trials", "2"]
    if case == "budgets word":
        budgets = "30,many"
    elif case == "budgets empty":
        budgets = " , "
    elif case == "budgets negative":
        budgets = "-30"
    elif case == "budget below raters":
        budgets = "2,30"
    elif case == "eta 0.6":
        extra += ["--eta", "0.6"]
    elif case == "trials 0":
        extra += ["--trials", "0"]
    elif case == "gamma 0":
        extra += ["--gamma", "0"]
    elif case == "raters 0":
        extra += ["--raters", "0,3"]
    elif case == "negative target":
        extra += ["--target", "-0.5"]
    elif case == "prior model word":
        extra += ["--prior", "modle"]
    elif case == "soft labels":
        np.save(labels, Y * 0.5)
    elif case == "mismatched N":
        np.save(labels, Y[1:])
    elif case == "mismatched T":
        np.save(model, MODEL[:, :2])
    elif case == "pair out of range":
        pl.DataFrame({"unit": [0], "concept": [3]}).write_csv(files["pairs"])
    elif case == "zero correlation":
        a, y = A.copy(), Y.copy()
        a[:, 0] = np.tile([1.0, -1.0], N // 2)  # mean 0; the only positive inputs sit at +1 and -1
        y[:, 0] = 0.0
        y[:2, 0] = 1.0
        np.save(files["acts"], a)
        np.save(labels, y)
    elif case == "out is a file":
        out.write_text("mine")
    else:  # pragma: no cover
        raise AssertionError(case)
    argv = ["crowd", "simulate", files["acts"], labels, model, "--pairs", files["pairs"], "--budgets", budgets]
    before = sorted(tmp_path.rglob("*"))
    code, stdout, err = run([*argv, *extra, "--out", out], capfd)
    assert_one_line_error(code, err, 2, *fragments)
    assert stdout == ""
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["crowd"], "required: STEP"),
        (["crowd", "plan", "ACTS", "MODEL", "--pairs", "p.csv", "--out", "p.parquet"], "--budget"),
        (
            [
                "crowd",
                "plan",
                "ACTS",
                "MODEL",
                "--pairs",
                "p.csv",
                "--budget",
                "9",
                "--out",
                "p.parquet",
                "--uniform",
                "--gamma",
                "0.5",
            ],
            "argument --gamma: not allowed with argument --uniform",
        ),
        (
            [
                "crowd",
                "aggregate",
                "r.csv",
                "--plan",
                "p.parquet",
                "--out",
                "l.csv",
                "--method",
                "mean",
                "--eta",
                "0.1",
            ],
            "--eta: only for --method bragg",
        ),
        (
            ["crowd", "aggregate", "r.csv", "--plan", "p.parquet", "--out", "l.csv", "--method", "vote"],
            "invalid choice: 'vote'",
        ),
        (
            ["crowd", "aggregate", "r.csv", "--plan", "p.parquet", "--out", "l.csv", "--rater-rates", "r.csv"],
            "--rater-rates needs --eta estimate",
        ),
        (["crowd", "estimate", "--plan", "p.parquet"], "--labels"),
        (["crowd", "simulate", "ACTS", "Y", "MODEL", "--pairs", "p.csv"], "--budgets"),
    ],
)
def test_usage_errors(
    files: dict[str, Path], capfd: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    argv = [str(files["acts"]) if a == "ACTS" else str(files["model"]) if a == "MODEL" else a for a in argv]
    code, out, err = run(argv, capfd)
    assert out == ""
    assert_one_line_error(code, err, 2, fragment, "neuroneval crowd")


def test_failed_write_leaves_no_files(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan and its task table, the labels and the rater rates, the simulation's files: all or none."""

    def full_disk(self: pl.DataFrame, path: Any, *args: Any, **kwargs: Any) -> None:
        Path(path).write_bytes(b"half a table")
        raise OSError(28, "No space left on device")

    before = sorted(tmp_path.rglob("*"))
    argv = ["crowd", "plan", files["acts"], files["model"], "--pairs", files["pairs"], "--budget", 30]
    with monkeypatch.context() as m:
        m.setattr(pl.DataFrame, "write_csv", full_disk)  # the task table fails after the plan was written aside
        code, stdout, err = run([*argv, "--out", tmp_path / "plan.parquet"], capfd)
        assert_one_line_error(code, err, 1, "no space left")
        assert sorted(tmp_path.rglob("*")) == before
        argv = ["crowd", "simulate", files["acts"], files["labels"], files["model"], "--pairs", files["pairs"]]
        code, _, err = run([*argv, "--budgets", "30", "--trials", "2", "--out", tmp_path / "sim" / "deep"], capfd)
        assert_one_line_error(code, err, 1, "no space left")
        assert sorted(tmp_path.rglob("*")) == before
    with monkeypatch.context() as m:
        m.setattr(pl.DataFrame, "write_parquet", full_disk)  # the plan itself fails: no task table either
        argv = ["crowd", "plan", files["acts"], files["model"], "--pairs", files["pairs"], "--budget", 30]
        code, _, err = run([*argv, "--out", tmp_path / "p.parquet", "--tasks", tmp_path / "t.csv"], capfd)
        assert_one_line_error(code, err, 1, "no space left")
        assert sorted(tmp_path.rglob("*")) == before


def test_interrupted(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(crowd, "simulate", interrupted)
    argv = ["crowd", "simulate", files["acts"], files["labels"], files["model"], "--pairs", files["pairs"]]
    code, out, err = run([*argv, "--budgets", "30", "--out", tmp_path / "sim"], capfd)
    assert (code, out, err) == (130, "", "neuroneval: interrupted\n")
    assert not (tmp_path / "sim").exists()


def test_help(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["crowd", "--help"], capfd)
    assert code == 0
    for step in ["plan", "next", "rate", "aggregate", "estimate", "simulate"]:
        assert step in out
    expected = {
        "plan": [
            "--pairs",
            "--budget",
            "--raters",
            "--gamma",
            "--uniform",
            "--seed",
            "--unit-names",
            "--explanations",
            "--batch-size",
            "--rating",
            "--confidence",
            "--out",
            "--tasks",
        ],
        "aggregate": ["--plan", "--method", "--eta", "--prior", "--out", "--rater-rates"],
        "next": ["--plan", "--tasks", "--batch-size"],
        "rate": ["--eta", "--seed", "--out"],
        "estimate": ["--plan", "--labels", "--self-normalised", "--level", "--bootstrap", "--seed", "--out"],
        "simulate": [
            "--pairs",
            "--budgets",
            "--eta",
            "--raters",
            "--trials",
            "--gamma",
            "--prior",
            "--target",
            "--seed",
            "--out",
            "--no-chart",
        ],
    }
    for step, flags in expected.items():
        code, out, _ = run(["crowd", step, "--help"], capfd)
        assert code == 0
        for flag in flags:
            assert flag in out, (step, flag)
    code, out, _ = run(["--help"], capfd)
    assert "crowd" in out
