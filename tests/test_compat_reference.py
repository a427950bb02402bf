"""compat.neuron_eval under the NeuronEval reference's own conventions: its signatures,
alpha=False, the top-and-random variants for binary units, ``reference_values``, and the call
patterns of the reference's notebooks (a reduced theoretical sanity test, a meta-AUPRC over
units with empty concepts).

Every expected value comes from `slow`, an independent pair-at-a-time implementation written
out below (sklearn and scipy for the rank statistics, midranks for ties) of the reference's
formulas, with its clamped denominators when ``reference=True`` and NaN where undefined
otherwise.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from neuroneval.compat import neuron_eval as ne
from neuroneval.compat import neuron_eval_reference as ner
from neuroneval.errors import InvalidInputError, ParameterError
from numpy.testing import assert_allclose
from scipy.stats import rankdata
from sklearn.metrics import average_precision_score, roc_auc_score

REQUIRED = inspect.Parameter.empty

#: The reference's metrics.py, every public function with its parameters and defaults, kept as
#: data (REQUIRED: no default).
REFERENCE_SIGNATURES: dict[str, list[tuple[str, Any]]] = {
    "recall": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "precision": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "f1_score": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "iou": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", 0.01)],
    "accuracy": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "balanced_accuracy": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "inverse_balanced_accuracy": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "auc": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "inverse_auc": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED)],
    "correlation": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED)],
    "correlation_top_and_random": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("k", 25), ("alpha", 0.002)],
    "correlation_top_and_random_binary": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("k", 25)],
    "spearman_correlation": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED)],
    "spearman_correlation_top_and_random": [
        ("neuron_act", REQUIRED),
        ("concept_prob", REQUIRED),
        ("k", 25),
        ("alpha", 0.002),
    ],
    "spearman_correlation_top_and_random_binary": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("k", 25)],
    "cos_sim": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED)],
    "wpmi": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED), ("lam", 1)],
    "mad": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED)],
    "auprc": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "inverse_auprc": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED)],
    "combined_auc": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "combined_balanced_acc": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "recall_auc": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "recall_inv_auc": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "precision_bal_acc": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
    "precision_inverse_bal_acc": [("neuron_act", REQUIRED), ("concept_prob", REQUIRED), ("alpha", REQUIRED)],
}

#: The harmonic-mean combinations and their two components.
COMBINATIONS = {
    "combined_auc": ("auc", "inverse_auc"),
    "combined_balanced_acc": ("balanced_accuracy", "inverse_balanced_accuracy"),
    "recall_auc": ("recall", "auc"),
    "recall_inv_auc": ("recall", "inverse_auc"),
    "precision_bal_acc": ("precision", "balanced_accuracy"),
    "precision_inverse_bal_acc": ("precision", "inverse_balanced_accuracy"),
}
TAKES_ALPHA = [n for n, params in REFERENCE_SIGNATURES.items() if params[-1][0] == "alpha" and "random" not in n] + [
    "wpmi"
]
PLAIN = ["inverse_auc", "correlation", "spearman_correlation", "cos_sim", "mad", "inverse_auprc"]


# --- the independent slow implementation ------------------------------------------------------


def _ratio(num: float, den: float, reference: bool) -> float:
    """num / den; the reference clamps den at 1 (its counts' num is then 0), SPEC says NaN."""
    if den == 0:
        return num / 1.0 if reference else math.nan
    return num / den


def _binarised(a: Any, alpha: Any) -> Any:
    """The unit's top set: the unit itself when alpha is False, else the top ceil(alpha N)
    with every tie at the cut."""
    if alpha is False:
        return a == 1
    n_top = max(1, math.ceil(alpha * len(a)))
    return a >= np.sort(a)[::-1][n_top - 1]


def _pearson(x: Any, y: Any, reference: bool) -> float:
    if np.all(x == x[0]) or np.all(y == y[0]):
        return 0.0 if reference else math.nan
    r = float(np.corrcoef(x, y)[0, 1])
    return r * (len(x) - 1) / len(x) if reference else r


def _ranked(statistic: Callable[..., Any], labels: Any, scores: Any, reference: bool) -> float:
    """sklearn's AUC or AP; undefined without a positive (and, for AUC, without a negative):
    0 in the reference (its clamp, torcheval's AP), NaN in SPEC."""
    if not labels.any() or (statistic is roc_auc_score and labels.all()):
        return 0.0 if reference else math.nan
    return float(statistic(labels, scores))


def slow(name: str, a: Any, c: Any, alpha: Any = None, lam: float = 1.0, reference: bool = True) -> float:
    """One (unit, concept) pair by the formulas written out, in float64."""
    a, c = np.asarray(a, np.float64), np.asarray(c, np.float64)
    n = len(a)
    if name in COMBINATIONS:
        x, y = (slow(m, a, c, alpha, lam, reference) for m in COMBINATIONS[name])
        return 2 * x * y / (x + y) if x + y != 0 else math.nan
    y_lab = c >= 0.5
    ny = int(y_lab.sum())
    if name in ("inverse_auc", "inverse_auprc", "correlation", "spearman_correlation", "cos_sim", "mad"):
        if name == "inverse_auc":
            return _ranked(roc_auc_score, y_lab, a, reference)
        if name == "inverse_auprc":
            return _ranked(average_precision_score, y_lab, a, reference)
        if name == "correlation":
            return _pearson(a, c, reference)
        if name == "spearman_correlation":
            return _pearson(rankdata(a), rankdata(c), reference)
        if name == "cos_sim":
            norms = np.linalg.norm(a) * np.linalg.norm(c)
            return float(a @ c / norms) if norms else (0.0 if reference else math.nan)
        # mad
        if ny in (0, n) and not reference:
            return math.nan
        return _ratio(a[y_lab].sum(), ny, True) - _ratio(a[~y_lab].sum(), n - ny, True)
    b = _binarised(a, alpha)
    nb, tp = int(b.sum()), int((b & y_lab).sum())
    tn = int((~b & ~y_lab).sum())
    if name == "recall":
        return _ratio(tp, nb, False)
    if name == "precision":
        return _ratio(tp, ny, reference)
    if name == "f1_score":
        return _ratio(2 * tp, nb + ny, False)
    if name == "iou":
        return _ratio(tp, nb + ny - tp, False)
    if name == "accuracy":
        return (tp + tn) / n
    if name == "balanced_accuracy":
        return (_ratio(tp, nb, reference) + _ratio(tn, n - nb, reference)) / 2
    if name == "inverse_balanced_accuracy":
        return (_ratio(tp, ny, reference) + _ratio(tn, n - ny, reference)) / 2
    if name == "auc":
        return _ranked(roc_auc_score, b, c, reference)
    if name == "auprc":
        return _ranked(average_precision_score, b, c, reference)
    if name == "wpmi":
        if c.mean() == 0 and not reference:
            return math.nan
        log_mean = math.log(c.mean()) if c.mean() > 0 else -math.inf
        mean_log = np.log(np.maximum(c[b], 1e-8)).mean() if nb else (0.0 if reference else math.nan)
        return mean_log - lam * log_mean if lam else (math.nan if math.isinf(log_mean) else mean_log)
    raise AssertionError(name)


def slow_matrix(name: str, acts: Any, concepts: Any, **kw: Any) -> Any:
    return np.array([[slow(name, a, c, **kw) for c in concepts.T] for a in acts.T])


# --- adversarial data ----------------------------------------------------------------------------

N = 40
RNG = np.random.default_rng(16)


def _binary_units() -> Any:
    """Binary units: a few ones, many ones, one one, none at all, all ones."""
    a = np.zeros((N, 5))
    a[:5, 0] = 1
    a[3:30, 1] = 1
    a[17, 2] = 1
    a[:, 4] = 1
    return a


def _real_units() -> Any:
    """Real units with ties (rounded), a constant unit and an all-zero unit."""
    a = np.round(RNG.normal(size=(N, 4)), 1)
    a[:, 2] = 0.7
    a[:, 3] = 0.0
    return a


def _concepts() -> Any:
    """Binary, empty, full and soft concepts (soft values tie and straddle 0.5)."""
    c = np.zeros((N, 5))
    c[:4, 0] = 1
    c[3:9, 1] = 1
    c[10:20, 1] = 0.3
    c[:, 3] = 1
    c[:, 4] = np.round(RNG.random(N), 1)
    return c


BINARY, REAL, CONCEPTS = _binary_units(), _real_units(), _concepts()


def _same(got: Any, want: Any) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    assert np.array_equal(np.isposinf(got), np.isposinf(want)), (got, want)
    finite = np.isfinite(want)
    assert_allclose(got[finite], want[finite], rtol=1e-10, atol=1e-12)


def _alpha_call(module: Any, name: str, a: Any, c: Any, alpha: Any, **kw: Any) -> Any:
    fn = getattr(module, name)
    lam = kw.pop("lam", 1)
    if name == "wpmi":
        return fn(a, c, alpha=alpha, lam=lam, **kw)
    return fn(a, c, alpha=alpha, **kw)


# --- the signatures --------------------------------------------------------------------------


def test_every_reference_function_with_its_signature() -> None:
    assert sorted(ne.__all__) == sorted(REFERENCE_SIGNATURES)
    assert ner.__all__ == ne.__all__
    for module in (ne, ner):
        for name, want in REFERENCE_SIGNATURES.items():
            params = inspect.signature(getattr(module, name)).parameters.values()
            # the reference's own parameters, in its order; neuroneval's additions are keyword-only
            theirs = [(p.name, p.default) for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
            assert theirs == want, name
            added = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
            assert (
                {"paired", "reference_values"} <= added <= {"paired", "reference_values", "seed", "reference_scaling"}
            )
            assert inspect.signature(getattr(module, name)).parameters["reference_values"].default is (module is ner)


# --- alpha=False and reference_values, against the slow implementation -----------------------


@pytest.mark.parametrize("reference", [True, False])
@pytest.mark.parametrize("name", TAKES_ALPHA)
def test_alpha_false_uses_binary_units_as_they_are(name: str, reference: bool) -> None:
    for lam in (1.0, 0.0) if name == "wpmi" else (1.0,):
        want = slow_matrix(name, BINARY, CONCEPTS, alpha=False, lam=lam, reference=reference)
        got = _alpha_call(ne, name, BINARY, CONCEPTS, False, lam=lam, reference_values=reference)
        _same(got, want)
        # bool units, numpy's False and the sibling module say the same
        module_default = _alpha_call(ner if reference else ne, name, BINARY.astype(bool), CONCEPTS, np.False_, lam=lam)
        _same(module_default, want)


@pytest.mark.parametrize("alpha", [0.05, 0.3])
@pytest.mark.parametrize("name", TAKES_ALPHA)
def test_reference_values_of_binarising_metrics(name: str, alpha: float) -> None:
    for units in (REAL, BINARY):
        for reference in (True, False):
            want = slow_matrix(name, units, CONCEPTS, alpha=alpha, reference=reference)
            _same(_alpha_call(ne, name, units, CONCEPTS, alpha, reference_values=reference), want)


@pytest.mark.parametrize("name", PLAIN)
def test_reference_values_of_plain_metrics(name: str) -> None:
    for units in (REAL, BINARY):
        for reference in (True, False):
            want = slow_matrix(name, units, CONCEPTS, reference=reference)
            _same(getattr(ne, name)(units, CONCEPTS, reference_values=reference), want)
            # one pair at a time and paired give the same numbers
            _same(getattr(ne, name)(units[:, 1], CONCEPTS[:, 0], reference_values=reference), want[1, 0])
            paired = getattr(ne, name)(units[:, :4], CONCEPTS[:, :4], paired=True, reference_values=reference)
            _same(paired, np.diag(want[:4, :4]))


def test_reference_values_imply_the_scaling_once() -> None:
    plain = ne.correlation(REAL[:, :2], CONCEPTS)
    both = ne.correlation(REAL[:, :2], CONCEPTS, reference_values=True, reference_scaling=True)
    assert_allclose(both, np.nan_to_num(plain) * (N - 1) / N, rtol=1e-12)


def test_the_sibling_module_is_switched_per_call_too() -> None:
    empty = np.zeros(N)
    assert ner.precision(REAL[:, 0], empty, 0.1) == 0.0
    assert math.isnan(ner.precision(REAL[:, 0], empty, 0.1, reference_values=False))
    assert math.isnan(ne.precision(REAL[:, 0], empty, 0.1))
    assert ne.precision(REAL[:, 0], empty, 0.1, reference_values=True) == 0.0
    assert ner.wpmi(REAL[:, 0], empty, 0.1) == math.inf


def test_alpha_false_refuses_units_that_are_not_binary() -> None:
    units = BINARY.copy()
    units[7, 3] = 0.5
    with pytest.raises(InvalidInputError, match=r"already binary.*neuron_act\[7, 3\] is 0.5"):
        ne.recall(units, CONCEPTS, False)
    with pytest.raises(InvalidInputError, match="already binary"):
        ne.correlation_top_and_random_binary(units, CONCEPTS)
    for bad in (0, 0.0, True, -0.1, math.nan):
        with pytest.raises(ParameterError, match="alpha"):
            ne.recall(BINARY, CONCEPTS, bad)


# --- the top-and-random variants for binary units --------------------------------------------


@pytest.mark.parametrize("reference", [True, False])
@pytest.mark.parametrize("spearman", [False, True])
def test_binary_top_and_random_takes_every_positive_and_k_random(spearman: bool, reference: bool) -> None:
    name = "spearman_correlation_top_and_random_binary" if spearman else "correlation_top_and_random_binary"
    fn = getattr(ne, name)
    # k = N: the random half is every input, so the subset is the unit's positives, then all N
    got = fn(BINARY, CONCEPTS, N, reference_values=reference)
    want = np.empty_like(got)
    for k in range(BINARY.shape[1]):
        subset = np.concatenate([np.flatnonzero(BINARY[:, k] == 1), np.arange(N)])
        for t in range(CONCEPTS.shape[1]):
            x, y = BINARY[subset, k], CONCEPTS[subset, t]
            want[k, t] = _pearson(rankdata(x), rankdata(y), reference) if spearman else _pearson(x, y, reference)
    _same(got, want)
    # k < N: positives plus k draws, seeded; the positives are always in
    small = fn(BINARY, CONCEPTS, 3, seed=5, reference_values=reference)
    _same(small, fn(BINARY, CONCEPTS, 3, seed=5, reference_values=reference))
    assert small.shape == (5, 5)


# --- the reference notebooks' call patterns ---------------------------------------------------


def _theoretical(metrics: dict[str, Callable[..., Any]], n_inputs: int, n_seeds: int) -> dict[str, Any]:
    """A reduced version of the reference's theoretical sanity notebook: its settings and its
    two loops (`fast_sims` one pair at a time, `run_test` on whole matrices with min/max
    normalisation), on float64 tensors, perturbations from one seeded generator. Returns each
    metric's normalised score changes (missing, extra), (seeds, frequencies) each; the
    notebook's Decrease Acc is the percentage of them below -0.001 (`_decrease_acc`)."""
    import torch

    frequencies = torch.tensor([0.499, 0.1, 0.01, 0.002])
    nums = (frequencies * n_inputs).int()
    concepts = torch.zeros(n_inputs, len(frequencies), dtype=torch.float64)
    for i, num in enumerate(nums):
        concepts[:num, i] += 1
    units = concepts.clone()
    correct = torch.nn.functional.one_hot(torch.arange(units.shape[1]), num_classes=concepts.shape[1])
    generator = torch.Generator().manual_seed(2025)

    def missing(c: Any) -> Any:
        return c * (torch.rand(c.shape, generator=generator, dtype=torch.float64) > 0.5)

    def extra(c: Any) -> Any:
        cutoff = torch.sum(c, dim=0, keepdim=True) / (c.shape[0] - torch.sum(c, dim=0, keepdim=True))
        return torch.clamp(c + (torch.rand(c.shape, generator=generator, dtype=torch.float64) < cutoff), max=1)

    def fast_sims(fn: Callable[..., Any], c: Any) -> Any:
        return torch.stack([fn(units[:, i : i + 1], c[:, i : i + 1])[0, 0] for i in range(units.shape[1])])

    def decrease(fn: Callable[..., Any], fast: bool, lo: Any, hi: Any) -> tuple[Any, Any]:
        sims = (lambda c: fast_sims(fn, c)) if fast else (lambda c: torch.sum(fn(units, c) * correct, 1))
        base = sims(concepts)
        missing_diffs, extra_diffs = [], []
        for _ in range(n_seeds):
            miss_c, extra_c = missing(concepts), extra(concepts)
            miss, more = sims(miss_c), sims(extra_c)
            if not fast and lo is None:
                everything = torch.cat([fn(units, concepts), fn(units, miss_c), fn(units, extra_c)], dim=0)
                lo, hi = torch.min(everything), torch.max(everything)
            missing_diffs.append((miss - base) / (hi - lo))
            extra_diffs.append((more - base) / (hi - lo))
        return torch.stack(missing_diffs), torch.stack(extra_diffs)

    out = {}
    for name, fn in metrics.items():
        signed = name in ("correlation", "spearman_correlation", "cos_sim") or "random" in name
        if name in ("wpmi", "mad"):
            out[name] = decrease(fn, False, None, None)
        else:
            out[name] = decrease(fn, True, -1 if signed else 0, 1)
    return out


def _tensor_metrics(module: Any) -> dict[str, Callable[..., Any]]:
    """The notebook's calls: alpha=False where a function takes alpha, k = N for the
    top-and-random variant (a deterministic subset)."""

    def unbinarised(fn: Callable[..., Any], **kw: Any) -> Callable[..., Any]:
        return lambda x, y: fn(x, y, alpha=False, **kw)

    out: dict[str, Callable[..., Any]] = {}
    for name in TAKES_ALPHA:
        out[name] = unbinarised(getattr(module, name), **({"lam": 1} if name == "wpmi" else {}))
    for name in PLAIN:
        out[name] = getattr(module, name)
    out["correlation_top_and_random_binary"] = lambda x, y: module.correlation_top_and_random_binary(x, y, k=len(x))
    return out


class _Slow:
    """`slow` behind the reference's call signatures, tensors in and out."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        import torch

        def fn(x: Any, y: Any, alpha: Any = None, lam: float = 1.0, k: int | None = None) -> Any:
            xs, ys = x.numpy(), y.numpy()
            if name == "correlation_top_and_random_binary":
                values = [
                    [_pearson(np.concatenate([a[a == 1], a]), np.concatenate([c[a == 1], c]), True) for c in ys.T]
                    for a in xs.T
                ]
            else:
                values = slow_matrix(name, xs, ys, alpha=alpha, lam=lam, reference=True)
            return torch.tensor(np.asarray(values), dtype=torch.float64)

        return fn


def _decrease_acc(diffs: Any) -> Any:
    """The notebook's Decrease Acc: the percentage of seeds whose score fell by more than 0.001."""
    return (diffs.numpy() < -0.001).mean(axis=0) * 100


def test_reduced_theoretical_notebook_runs_and_matches_the_slow_implementation() -> None:
    pytest.importorskip("torch")
    got = _theoretical(_tensor_metrics(ner), n_inputs=2_000, n_seeds=4)
    want = _theoretical(_tensor_metrics(_Slow()), n_inputs=2_000, n_seeds=4)
    assert got.keys() == want.keys()
    for name in got:
        for g, w in zip(got[name], want[name], strict=True):
            # the changes themselves (a Decrease Acc can flip on a change of exactly -0.001,
            # as inverse_auprc's 0.999 - 1 is at gamma = 0.499, by one rounding)
            assert_allclose(g.numpy(), w.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
    # not vacuous: recall (|b and y| / |b|) falls with missing labels, never with extra ones;
    # precision the other way round; correlation falls with both
    missing, extra = (_decrease_acc(d) for d in got["recall"])
    assert missing.min() >= 75 and extra.max() == 0
    missing, extra = (_decrease_acc(d) for d in got["precision"])
    assert missing.max() == 0 and extra.min() == 100
    assert _decrease_acc(got["correlation"][0]).min() > 0 and _decrease_acc(got["correlation"][1]).min() > 0


def _ap_nan_first(scores: Any, labels: Any) -> float:
    """Average precision of scores against 0/1 labels with NaN ranked above every number, as
    torcheval's binary_auprc ranks it; tied scores form one threshold."""
    scores = np.where(np.isnan(scores), np.inf, scores)
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order]
    ends = np.flatnonzero(np.r_[s[1:] != s[:-1], True])  # last position of each threshold
    tp = np.cumsum(y)[ends]
    predicted = ends + 1
    recall_steps = np.diff(np.r_[0, tp]) / y.sum()
    return float(np.sum(recall_steps * tp / predicted))


def test_meta_auprc_the_notebooks_way_with_empty_concepts() -> None:
    # softmax units over 6 classes, concepts = class labels, two classes absent from the probe set
    n, classes = 600, 6
    labels = RNG.integers(0, classes - 2, size=n)
    logits = RNG.normal(size=(n, classes)) + 2.0 * np.eye(classes)[labels]
    units = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    concepts = np.eye(classes)[labels]
    correct = np.eye(classes).reshape(-1)
    for name, alpha in (("precision", 0.05), ("mad", None), ("inverse_auc", None), ("correlation", None)):
        kw = {} if alpha is None else {"alpha": alpha}
        ours = getattr(ner, name)(units, concepts, **kw)
        want = slow_matrix(name, units, concepts, **kw, reference=True)
        _same(ours, want)
        assert _ap_nan_first(ours.reshape(-1), correct) == pytest.approx(_ap_nan_first(want.reshape(-1), correct))
        # neuroneval's own NaN is what the reference notebooks cannot take: ranked first, the
        # undefined pairs of the empty concepts take the top of the ranking
        library = getattr(ne, name)(units, concepts, **kw)
        assert np.isnan(library[:, classes - 2 :]).all()
        assert _ap_nan_first(library.reshape(-1), correct) < _ap_nan_first(ours.reshape(-1), correct)
