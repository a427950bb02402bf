"""The composite-digits settings (`neuroneval.experiments.composite`) at a small scale, and the
reproduction's per-setting helpers on them: concepts against their definitions, composites
against the images they are made of, probes against an independent fit, determinism."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from neuroneval import meta, sanity  # noqa: E402
from neuroneval.experiments import composite, reproduce  # noqa: E402
from numpy.testing import assert_allclose, assert_array_equal  # noqa: E402


def members_by_rule(name: str) -> set[int]:
    """A concept's numbers from its name, by a separate reading of the names."""
    words = name.split()
    out = set()
    for n in range(100):
        t, u = divmod(n, 10)
        if name.startswith("number "):
            ok = n == int(words[1])
        elif name.startswith("contains digit "):
            ok = int(words[2]) in (t, u)
        elif name.startswith("digit sum "):
            ok = t + u == int(words[2])
        elif name.startswith("tens minus units "):
            ok = t - u == int(words[3])
        elif "," in name:
            first, second = name.split(", ")
            place, digit = first.split()[0], int(first.split()[2])
            half = second.split()[2]
            other = u if place == "tens" else t
            mine = t if place == "tens" else u
            ok = (
                mine == digit
                and {
                    "small": other < 5,
                    "large": other >= 5,
                    "even": other % 2 == 0,
                    "odd": other % 2 == 1,
                }[half]
            )
        elif name.startswith("tens digit "):
            ok = t == int(words[2])
        elif name.startswith("units digit "):
            ok = u == int(words[2])
        else:
            raise AssertionError(name)
        if ok:
            out.add(n)
    return out


def test_concepts_are_what_their_names_say() -> None:
    assert len(composite.CONCEPTS) == len(set(composite.CONCEPTS)) == 244
    assert len(composite.CLASSES) == 100 and len(composite.SUPERCLASSES) == 64 and len(composite.ATTRIBUTES) == 80
    assert composite.CONCEPTS == composite.CLASSES + composite.SUPERCLASSES + composite.ATTRIBUTES
    sets = []
    for name in composite.CONCEPTS:
        members = composite.concept_members(name)
        assert set(members) == members_by_rule(name), name
        assert members == sorted(members) and len(members) >= 1
        sets.append(frozenset(members))
    assert len(set(sets)) == len(sets)  # no two concepts are the same set of numbers
    assert {len(composite.concept_members(n)) for n in composite.CLASSES} == {1}
    assert {len(composite.concept_members(n)) for n in composite.ATTRIBUTES} == {5}
    sizes = [len(composite.concept_members(n)) for n in composite.SUPERCLASSES]
    assert min(sizes) == 2 and max(sizes) == 19


def test_concept_matrix_is_membership() -> None:
    rng = np.random.default_rng(0)
    numbers = rng.integers(0, 100, 300)
    names = list(composite.CONCEPTS[::7])
    got = composite.concept_matrix(numbers, names)
    assert got.shape == (300, len(names)) and got.dtype == np.float64
    for j, name in enumerate(names):
        members = set(composite.concept_members(name))
        assert_array_equal(got[:, j], [float(int(n) in members) for n in numbers])


def test_compose_places_the_tens_digit_left() -> None:
    rng = np.random.default_rng(1)
    halves = torch.from_numpy(rng.random((30, 8, 8)).astype(np.float32))
    digits = np.arange(30) % 10
    numbers = rng.integers(0, 100, 200)
    x = composite.compose(halves, digits, numbers, np.random.default_rng(2))
    assert x.shape == (200, 1, 8, 16)
    flat = halves.reshape(30, -1).numpy()
    for i, n in enumerate(numbers):
        for part, digit in ((x[i, 0, :, :8], n // 10), (x[i, 0, :, 8:], n % 10)):
            (match,) = np.flatnonzero((flat == part.reshape(-1).numpy()).all(axis=1))
            assert digits[match] == digit
    again = composite.compose(halves, digits, numbers, np.random.default_rng(2))
    assert torch.equal(x, again)


def test_sigmoid_probes_equal_an_independent_logistic_fit() -> None:
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(3)
    n, d = 600, 5
    x = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, d) + rng.normal(size=d)
    w = rng.normal(size=(d, 3))
    y = (x @ w + rng.normal(size=(n, 3)) > 0.5).astype(float)
    l2 = 1e-3
    got = composite.sigmoid_probes(x[:400], y[:400], x[400:], l2=l2, iterations=500)
    # The same objective: the mean cross-entropy over 400 x 3 entries plus l2 |W|^2 is, per
    # column, sklearn's 1/2 |w|^2 + C * (sum of cross-entropies) with C = 1 / (2 l2 400 3).
    mean, std = x[:400].mean(axis=0), x[:400].std(axis=0, ddof=1)
    z = (x - mean) / std
    for j in range(3):
        fit = LogisticRegression(C=1 / (2 * l2 * 400 * 3), tol=1e-10, max_iter=10_000).fit(z[:400], y[:400, j])
        assert_allclose(got[:, j], fit.predict_proba(z[400:])[:, 1], atol=2e-4)
    assert ((got >= 0) & (got <= 1)).all()


def test_validation_share_keeps_twenty_units() -> None:
    for units in (21, 44, 64, 80, 100, 191, 399, 400, 1000):
        val, test = meta.split_units(units, composite.validation_share(units), 0)
        assert len(val) >= min(20, units - 1) and len(test) >= 1, units
        if units >= 400:
            assert composite.validation_share(units) == 0.05


@pytest.fixture(scope="module")
def small() -> composite.CompositeProbe:
    return composite.probe_composites(0, probe_inputs=3000, train_inputs=3000, fit_inputs=1500, epochs=1)


def test_probe_composites_small(small: composite.CompositeProbe) -> None:
    n = 3000
    assert_array_equal(np.bincount(small.numbers, minlength=100), np.full(100, n // 100))  # 1% each
    assert small.probabilities.shape == (n, 100) and small.probabilities.dtype == np.float64
    assert_allclose(small.probabilities.sum(axis=1), 1.0, atol=1e-12)
    logits = small.activations["logits"].astype(np.float64)
    want = np.exp(logits - logits.max(axis=1, keepdims=True))
    assert_allclose(small.probabilities, want / want.sum(axis=1, keepdims=True), rtol=1e-12)
    assert small.accuracy == pytest.approx(float((logits.argmax(axis=1) == small.numbers).mean()))
    assert {k: v.shape[1] for k, v in small.activations.items()} == {
        "conv1": 16,
        "conv2": 32,
        "fc1": 128,
        "logits": 100,
    }
    assert small.bottleneck.shape == (n, 80) and ((small.bottleneck > 0) & (small.bottleneck < 1)).all()
    assert small.probe_auc.shape == (80,)
    assert small.n_train + small.n_probe == 1797
    # Superclass units are sums of member class probabilities.
    supers = small.superclass_units()
    for j, name in enumerate(composite.SUPERCLASSES):
        assert_allclose(supers[:, j], small.probabilities[:, composite.concept_members(name)].sum(axis=1), rtol=1e-12)
    hidden = small.hidden_units()
    assert (hidden.min(axis=0) < hidden.max(axis=0)).all()
    assert_array_equal(small.concepts(composite.CLASSES), np.eye(100)[small.numbers])


def test_probe_composites_is_deterministic(small: composite.CompositeProbe) -> None:
    again = composite.probe_composites(0, probe_inputs=3000, train_inputs=3000, fit_inputs=1500, epochs=1)
    for k, v in small.activations.items():
        assert_array_equal(v, again.activations[k])
    assert_array_equal(small.bottleneck, again.bottleneck)
    assert_array_equal(small.numbers, again.numbers)
    with pytest.raises(ValueError, match="multiple of 100"):
        composite.probe_composites(0, probe_inputs=150)


def test_settings_small(small: composite.CompositeProbe) -> None:
    settings = composite.sanity_settings(small)
    assert [s.name.split(": ")[1].split(" (")[0] for s in settings] == [
        "class units",
        "superclass units",
        "concept probes",
        "hidden units",
    ]
    for s in settings:
        n, k = s.units.shape
        assert n == 3000 and s.concepts.shape[0] == 3000
        if s.alpha is None:  # tuned: at least 20 validation units
            val, _ = meta.split_units(k, s.validation, 0)
            assert len(val) >= 20, s.name
            assert s.known and s.truth is not None and s.truth.shape == (k,)
            assert_array_equal(s.truth, np.arange(k))  # unit j explains concept j
            assert s.concepts.shape[1] == k
        else:
            assert s.alpha == 0.005 and s.truth is None and not s.known
            assert s.concepts.shape[1] == 244
    low, median, high = settings[0].prevalence()
    assert low == median == high == 0.01
    assert settings[2].prevalence() == (0.05, 0.05, 0.05)


def test_reproduce_helpers_on_small_settings(small: composite.CompositeProbe) -> None:
    settings = composite.sanity_settings(small)
    probes = settings[2]
    metrics = ["f1", "iou", "auprc", "correlation", "cosine"]
    result = sanity.experimental(
        probes.units, probes.concepts, probes.truth, metrics, validation=probes.validation, seed=0, setting=probes.name
    )
    text = reproduce.setting_markdown(result, probes.name)
    lines = text.strip().splitlines()
    assert len(lines) == 2 + len(metrics)
    for line, row in zip(lines[2:], result.records.filter(perturbation="missing").iter_rows(named=True), strict=True):
        assert line.startswith(f"| {row['metric']} | {row['decrease_acc']:.1f} [{row['ci_low']:.1f}, ")
    # The tie table reruns the test at each tied alpha: its cells are those runs.
    table = reproduce.ties_measured(probes, result, 0, metrics=("f1", "iou", "auprc"))
    records = result.records.filter(pl.col("tied_alphas") > 1, pl.col("decrease_acc") < 90)
    assert (table == "") == (records.filter(pl.col("metric").is_in(["f1", "iou", "auprc"])).height == 0)
    for line in table.splitlines()[4:]:
        alpha = float(line.split("|")[1].split()[0])
        cell = line.split("|")[2].strip()
        if cell:
            again = sanity.experimental(
                probes.units, probes.concepts, probes.truth, ["f1"], alpha=alpha, validation=probes.validation, seed=0
            ).records
            assert cell == " / ".join(f"{v:.1f}" for v in again["decrease_acc"])
    # meta-AUPRC per setting and the ranking over the known ones.
    results = reproduce.meta_results(settings[:2], 0)
    assert results.height == 2 * len(reproduce.TABLE4_METRICS)
    md = reproduce.ranking_markdown(results)
    assert md.count("\n| correlation |") == 2


def test_cosine_rule_predicts_its_decreases() -> None:
    # Units with a baseline: m0 / m1 spread around sqrt(2) - 1.
    rng = np.random.default_rng(5)
    n, k = 20_000, 60
    c = (rng.random((n, k)) < 0.05).astype(float)
    base = rng.uniform(0.0, 0.9, k)
    a = base + (1 - base) * c + 0.05 * rng.random((n, k))
    setting = composite.Setting("toy", a, c, np.arange(k), 0.2, None, True, "toy")
    result = sanity.experimental(a, c, setting.truth, ["cosine"], validation=0.2, seed=0, setting="toy")
    (line,) = reproduce.cosine_measured(setting, result, 0)
    measured_extra = result.records.filter(perturbation="extra")["decrease_acc"][0]
    predicted = float(line.split("extra ")[1].split(" measured, ")[1].split(" predicted")[0])
    assert abs(predicted - measured_extra) < 10
    assert 20 < measured_extra < 90  # the toy really has units on both sides of the rule
    _, test = meta.split_units(k, 0.2, 0)
    m1 = np.array([a[c[:, j] == 1, j].mean() for j in test])
    m0 = np.array([a[c[:, j] == 0, j].mean() for j in test])
    assert predicted == pytest.approx(round(100 * float(np.mean(m0 < (math.sqrt(2) - 1) * m1)), 1))
