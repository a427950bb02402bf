"""Paper-like sanity-check settings: a CNN on two-digit composites of scikit-learn's digits.

The NeuronEval paper's experimental settings are ImageNet-scale: 1,000 classes that each hold
0.1% of the probing inputs, superclass units, concept-bottleneck outputs with attributes at a
few percent, and hidden units matched to their argmax-IoU concept. This module builds their
analogues from the 1,797 8x8 digit images that ship inside scikit-learn (nothing is downloaded):

- **data**: the images are split in half, stratified (`probe_composites`). A composite is an
  8x16 image: a left digit (the tens digit) beside a right digit (the units digit), each drawn
  from one half's images under the 45 shifts and rotations of `neuroneval.experiments.digits`
  (`augment`). Its class is the two-digit number, 100 classes. The CNN trains on composites of
  the training half; the probe set is `PROBE_INPUTS` composites of the held-out half, exactly
  1% per class (an ImageNet class is 0.1% of its validation set; a CUB attribute a few
  percent).
- **CNN**: conv 1->16, conv 16->32, max-pool, linear 1024->128, linear 128->100, trained with
  Adam for `EPOCHS` epochs on `TRAIN_INPUTS` random composites (well under a minute on two
  CPUs).
- **concepts** (`CONCEPTS`): every concept is a set of the 100 numbers, so its vector is exact:
  the 100 classes (1% each), 64 superclasses (the tens digit, the units digit, "contains
  digit d", the digit sum, the tens minus the units digit: 2-19%) and 80 attributes (one
  digit's value together with the other digit's half: small 0-4, large 5-9, even or odd;
  5% each).
- **settings** (`sanity_settings`), each unit with its correct concept:

  - class units: the 100 softmax outputs (computed in float64 from the logits) with their
    class, against the 100 class concepts;
  - superclass units: the sums of member class probabilities of the 64 superclasses, against
    the 64 superclass concepts (the paper's ImageNet superclass units);
  - concept probes: 80 sigmoid outputs of a multi-label logistic probe on the 128 units of the
    hidden layer (fc1), trained on composites of the training half, one per attribute (the
    analogue of CUB's concept-bottleneck outputs), against the 80 attributes;
  - hidden units: the live units of conv1, conv2 (channel means) and fc1, each matched to its
    argmax-IoU concept among all 244 at alpha = 0.005, and tested at that fixed alpha, as the
    reference implementation does (nothing tuned).

  The tuned settings keep at least `VALIDATION_UNITS` units for tuning alpha and lambda
  (`validation_share`).

Everything is seeded; torch runs single-threaded and deterministic on the CPU.

Examples
--------
>>> from neuroneval.experiments import composite
>>> len(composite.CONCEPTS), composite.CONCEPTS[0], composite.CONCEPTS[100], composite.CONCEPTS[-1]
(244, 'number 00', 'tens digit 0', 'units digit 9, tens digit odd')
>>> composite.concept_members("digit sum 3")
[3, 12, 21, 30]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from neuroneval.torch import capture

from .digits import ANGLES, SHIFTS, _deterministic_torch, _network, _train, augment

__all__ = [
    "ATTRIBUTES",
    "CLASSES",
    "CONCEPTS",
    "SUPERCLASSES",
    "VALIDATION_UNITS",
    "CompositeProbe",
    "Setting",
    "compose",
    "concept_matrix",
    "concept_members",
    "probe_composites",
    "sanity_settings",
    "sigmoid_probes",
    "validation_share",
]

#: Composites of the held-out images in the probe set: 500 per class.
PROBE_INPUTS = 50_000
#: Random composites of the training images the CNN is trained on.
TRAIN_INPUTS = 60_000
#: Composites of the training images the concept probes are fitted on.
PROBE_FIT_INPUTS = 20_000
EPOCHS = 2
BATCH = 128
LEARNING_RATE = 3e-3
HIDDEN = 128
#: The fewest validation units of a tuned setting.
VALIDATION_UNITS = 20
#: The reference implementation's fixed alpha for hidden units (and for their argmax-IoU concepts).
HIDDEN_ALPHA = 0.005

_HALVES: dict[str, tuple[int, ...]] = {
    "small": (0, 1, 2, 3, 4),
    "large": (5, 6, 7, 8, 9),
    "even": (0, 2, 4, 6, 8),
    "odd": (1, 3, 5, 7, 9),
}


def _catalogue() -> dict[str, tuple[int, ...]]:
    """Every concept and its member numbers (tens digit * 10 + units digit), in column order."""
    numbers = [(n, n // 10, n % 10) for n in range(100)]
    out: dict[str, tuple[int, ...]] = {f"number {n:02d}": (n,) for n in range(100)}
    for d in range(10):
        out[f"tens digit {d}"] = tuple(n for n, t, _ in numbers if t == d)
    for d in range(10):
        out[f"units digit {d}"] = tuple(n for n, _, u in numbers if u == d)
    for d in range(10):
        out[f"contains digit {d}"] = tuple(n for n, t, u in numbers if d in (t, u))
    for s in range(1, 18):  # sums 0 and 18 are the single numbers 00 and 99
        out[f"digit sum {s}"] = tuple(n for n, t, u in numbers if t + u == s)
    for d in range(-8, 9):  # differences -9 and 9 are the single numbers 09 and 90
        out[f"tens minus units {d}"] = tuple(n for n, t, u in numbers if t - u == d)
    for d in range(10):
        for half, members in _HALVES.items():
            out[f"tens digit {d}, units digit {half}"] = tuple(n for n, t, u in numbers if t == d and u in members)
    for d in range(10):
        for half, members in _HALVES.items():
            out[f"units digit {d}, tens digit {half}"] = tuple(n for n, t, u in numbers if u == d and t in members)
    return out


_CATALOGUE = _catalogue()
#: All concepts, in column order: the classes, the superclasses, the attributes.
CONCEPTS: tuple[str, ...] = tuple(_CATALOGUE)
#: The 100 class concepts ("number 00" .. "number 99").
CLASSES: tuple[str, ...] = CONCEPTS[:100]
#: The 64 superclass concepts (tens digit, units digit, contains digit, digit sum, tens minus units).
SUPERCLASSES: tuple[str, ...] = CONCEPTS[100:164]
#: The 80 attribute concepts of the concept probes (one digit, and a half of the other one).
ATTRIBUTES: tuple[str, ...] = CONCEPTS[164:]


def concept_members(name: str) -> list[int]:
    """The numbers (10 * tens digit + units digit) of a concept of `CONCEPTS`.

    Examples
    --------
    >>> concept_members("tens digit 7, units digit even")
    [70, 72, 74, 76, 78]
    """
    return list(_CATALOGUE[name])


def concept_matrix(numbers: npt.ArrayLike, names: Sequence[str] = CONCEPTS) -> npt.NDArray[np.float64]:
    """The (N, len(names)) binary concept matrix of inputs whose two-digit numbers are `numbers`.

    Examples
    --------
    >>> concept_matrix([35, 53], ["number 35", "contains digit 3", "digit sum 8"]).tolist()
    [[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]]
    """
    n = np.asarray(numbers, dtype=np.int64)
    member = np.zeros((len(names), 100), dtype=bool)
    for j, name in enumerate(names):
        member[j, list(_CATALOGUE[name])] = True
    return np.ascontiguousarray(member[:, n].T.astype(np.float64))


def _member_matrix(names: Sequence[str]) -> npt.NDArray[np.float64]:
    """(100, len(names)): 1 where the number is a member of the concept."""
    return concept_matrix(np.arange(100), names)


def compose(
    halves: torch.Tensor, digits: npt.NDArray[np.int64], numbers: npt.NDArray[np.int64], rng: np.random.Generator
) -> torch.Tensor:
    """(len(numbers), 1, 8, 16) composites: for each number, a random image of its tens digit
    beside a random image of its units digit, both from `halves` ((M, 8, 8) images of `digits`).

    Examples
    --------
    >>> halves = torch.arange(3 * 64, dtype=torch.float32).reshape(3, 8, 8)
    >>> x = compose(halves, np.array([4, 2, 7]), np.array([27, 74]), np.random.default_rng(0))
    >>> x.shape, bool(torch.equal(x[0, 0, :, :8], halves[1])), bool(torch.equal(x[1, 0, :, 8:], halves[0]))
    (torch.Size([2, 1, 8, 16]), True, True)
    """
    by_digit = [np.flatnonzero(digits == d) for d in range(10)]
    tens, units = numbers // 10, numbers % 10
    left = np.empty(numbers.size, dtype=np.int64)
    right = np.empty(numbers.size, dtype=np.int64)
    for d in range(10):
        pool = by_digit[d]
        at = tens == d
        left[at] = pool[rng.integers(0, pool.size, int(at.sum()))]
        at = units == d
        right[at] = pool[rng.integers(0, pool.size, int(at.sum()))]
    return torch.cat([halves[torch.from_numpy(left)], halves[torch.from_numpy(right)]], dim=2).unsqueeze(1)


def sigmoid_probes(
    train: npt.ArrayLike,
    labels: npt.ArrayLike,
    inputs: npt.ArrayLike,
    *,
    l2: float = 1e-4,
    iterations: int = 200,
    seed: int = 0,
) -> npt.NDArray[np.float64]:
    """A multi-label logistic probe: one sigmoid output per label column, fitted on `train`.

    The features are standardised with the training mean and standard deviation; one linear
    layer with a sigmoid per label is fitted by L-BFGS on the mean binary cross-entropy plus
    `l2` times the squared weights, in float64, single-threaded and deterministic. Returns the
    (len(inputs), labels) probabilities on `inputs`.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(400, 3)); y = np.stack([x[:, 0] > 0, x[:, 1] > 1], axis=1).astype(float)
    >>> p = sigmoid_probes(x[:300], y[:300], x[300:])
    >>> p.shape, bool(((p > 0.5) == (y[300:] > 0.5)).mean() > 0.9)
    ((100, 2), True)
    """
    x = torch.as_tensor(np.asarray(train, dtype=np.float64))
    y = torch.as_tensor(np.asarray(labels, dtype=np.float64))
    z = torch.as_tensor(np.asarray(inputs, dtype=np.float64))
    mean = x.mean(dim=0)
    std = x.std(dim=0).clamp(min=1e-6)
    x = (x - mean) / std
    z = (z - mean) / std
    with _deterministic_torch(seed):
        weight = torch.zeros(x.shape[1], y.shape[1], dtype=torch.float64, requires_grad=True)
        bias = torch.zeros(y.shape[1], dtype=torch.float64, requires_grad=True)
        optimiser = torch.optim.LBFGS([weight, bias], max_iter=iterations, line_search_fn="strong_wolfe")
        loss_fn = nn.BCEWithLogitsLoss()

        def closure() -> float:
            optimiser.zero_grad()
            loss = loss_fn(x @ weight + bias, y) + l2 * (weight * weight).sum()
            loss.backward()
            return float(loss.detach())

        optimiser.step(closure)  # type: ignore[no-untyped-call]
        with torch.no_grad():
            out = torch.sigmoid(z @ weight + bias).numpy()
    return np.ascontiguousarray(out)


@dataclass(frozen=True)
class CompositeProbe:
    """The composite-digits CNN, observed on its probe set.

    Attributes
    ----------
    activations : dict of str to ndarray
        (N, K) float32 activations of conv1, conv2 (channel means of the ReLU maps), fc1 (its
        ReLU) and the logits.
    numbers : ndarray of int64, shape (N,)
        Each probe input's class, 10 * tens digit + units digit (each 1% of the inputs).
    probabilities : ndarray of float64, shape (N, 100)
        The softmax of the logits, in float64 (no float32 saturation at 1).
    bottleneck : ndarray of float64, shape (N, len(ATTRIBUTES))
        The concept probes' sigmoid outputs (`sigmoid_probes` on fc1).
    accuracy : float
        Share of probe inputs whose argmax class is their number.
    probe_auc : ndarray of float64, shape (len(ATTRIBUTES),)
        Each concept probe's ROC AUC for its attribute on the probe set.
    n_train, n_probe : int
        Training and held-out images (the probe composites draw on the held-out ones only).
    """

    activations: dict[str, npt.NDArray[np.float32]]
    numbers: npt.NDArray[np.int64]
    probabilities: npt.NDArray[np.float64]
    bottleneck: npt.NDArray[np.float64]
    accuracy: float
    probe_auc: npt.NDArray[np.float64]
    n_train: int
    n_probe: int

    def concepts(self, names: Sequence[str] = CONCEPTS) -> npt.NDArray[np.float64]:
        """The binary concept matrix of the probe inputs (`concept_matrix`)."""
        return concept_matrix(self.numbers, names)

    def superclass_units(self) -> npt.NDArray[np.float64]:
        """(N, 64) superclass units: for each of `SUPERCLASSES`, the sum of its member class probabilities."""
        return np.ascontiguousarray(self.probabilities @ _member_matrix(SUPERCLASSES))

    def hidden_units(self) -> npt.NDArray[np.float32]:
        """The live units of conv1, conv2 and fc1 (a unit constant on the probe set is dead and left out)."""
        hidden = np.concatenate([self.activations[layer] for layer in ("conv1", "conv2", "fc1")], axis=1)
        return np.ascontiguousarray(hidden[:, hidden.min(axis=0) < hidden.max(axis=0)])


_LAYERS = {"conv1": "relu1", "conv2": "relu2", "fc1": "relu3", "logits": "fc2"}


def probe_composites(
    seed: int = 0,
    *,
    probe_inputs: int = PROBE_INPUTS,
    train_inputs: int = TRAIN_INPUTS,
    fit_inputs: int = PROBE_FIT_INPUTS,
    epochs: int = EPOCHS,
) -> CompositeProbe:
    """Train the composite CNN and its concept probes, and observe them on held-out composites.

    The 1,797 images are split in half (stratified by digit, seeded); each half is seen under
    the 45 transforms of `augment`. The CNN trains on `train_inputs` composites of random
    numbers from the training half, the concept probes on `fit_inputs` more; the probe set is
    `probe_inputs` composites of the held-out half, every number equally often (`probe_inputs`
    must be a multiple of 100). Deterministic for a given seed.
    """
    from scipy.special import softmax
    from sklearn.datasets import load_digits
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split

    if probe_inputs <= 0 or probe_inputs % 100:
        raise ValueError(f"probe_inputs must be a positive multiple of 100; got {probe_inputs}")
    digits = load_digits()
    images = torch.from_numpy(np.asarray(digits.images, dtype=np.float32) / 16.0).unsqueeze(1)
    labels = np.asarray(digits.target, dtype=np.int64)
    train_idx, probe_idx = train_test_split(np.arange(labels.size), test_size=0.5, stratify=labels, random_state=seed)
    copies = len(ANGLES) * len(SHIFTS) ** 2  # transforms per image (`augment`)
    train_halves, train_digits = augment(images[train_idx])[:, 0], np.tile(labels[train_idx], copies)
    probe_halves, probe_digits = augment(images[probe_idx])[:, 0], np.tile(labels[probe_idx], copies)

    rng = np.random.default_rng([seed, 1])
    train_numbers = rng.integers(0, 100, train_inputs)
    fit_numbers = rng.integers(0, 100, fit_inputs)
    numbers = rng.permutation(np.repeat(np.arange(100), probe_inputs // 100))
    x_train = compose(train_halves, train_digits, train_numbers, rng)
    x_fit = compose(train_halves, train_digits, fit_numbers, rng)
    x_probe = compose(probe_halves, probe_digits, numbers, rng)

    with _deterministic_torch(seed):
        net = _network(16, HIDDEN, 100)
        _train(net, x_train, torch.from_numpy(train_numbers), seed, epochs, BATCH, LEARNING_RATE)
        modules = list(_LAYERS.values())
        captured = capture(net, x_probe, modules, reduce="mean", batch_size=1000)
        fitted = capture(net, x_fit, ["relu3"], batch_size=1000)["relu3"]
    acts = {layer: captured[module] for layer, module in _LAYERS.items()}
    probabilities = softmax(acts["logits"].astype(np.float64), axis=1)
    accuracy = float((acts["logits"].argmax(axis=1) == numbers).mean())
    bottleneck = sigmoid_probes(fitted, concept_matrix(fit_numbers, ATTRIBUTES), acts["fc1"], seed=seed)
    truth = concept_matrix(numbers, ATTRIBUTES)
    auc = np.array([roc_auc_score(truth[:, j], bottleneck[:, j]) for j in range(len(ATTRIBUTES))])
    return CompositeProbe(
        acts, numbers, probabilities, bottleneck, accuracy, auc, int(train_idx.size), int(probe_idx.size)
    )


def validation_share(units: int, at_least: int = VALIDATION_UNITS, share: float = 0.05) -> float:
    """The validation share of a setting's units: SPEC's 5%, raised so that at least `at_least`
    units are tuned on (`neuroneval.meta.split_units` rounds share * units).

    Examples
    --------
    >>> validation_share(100), validation_share(1000)
    (0.2, 0.05)
    """
    return max(share, at_least / units)


@dataclass(frozen=True)
class Setting:
    """One experimental setting: units, concepts, each unit's correct concept, how it is run.

    `truth` None means argmax IoU at `truth_alpha`; `alpha` None means tuned on `validation`
    of the units (else fixed for every metric, wpmi's lambda 1). `known` says whether the
    correct concepts are known independently of any metric (so that meta-AUPRC can rank
    metrics on them).
    """

    name: str
    units: npt.NDArray[Any]
    concepts: npt.NDArray[np.float64]
    truth: npt.NDArray[np.int64] | None
    validation: float
    alpha: float | None
    known: bool
    description: str

    def prevalence(self) -> tuple[float, float, float]:
        """Min, median and max share of inputs holding a concept (over the concepts that are some unit's truth when known)."""
        share = self.concepts.mean(axis=0)
        if self.truth is not None:
            share = share[np.unique(self.truth)]
        return float(share.min()), float(np.median(share)), float(share.max())


def sanity_settings(probe: CompositeProbe) -> list[Setting]:
    """The four paper-like settings of the composite CNN (see the module docstring)."""
    classes = np.arange(100, dtype=np.int64)
    supers = np.arange(len(SUPERCLASSES), dtype=np.int64)
    attributes = np.arange(len(ATTRIBUTES), dtype=np.int64)
    hidden = probe.hidden_units()
    return [
        Setting(
            "composite: class units",
            probe.probabilities,
            probe.concepts(CLASSES),
            classes,
            validation_share(100),
            None,
            True,
            "100 softmax outputs; 100 class concepts (1% each)",
        ),
        Setting(
            "composite: superclass units",
            probe.superclass_units(),
            probe.concepts(SUPERCLASSES),
            supers,
            validation_share(len(SUPERCLASSES)),
            None,
            True,
            "64 sums of member class probabilities; 64 superclass concepts (2-19%)",
        ),
        Setting(
            "composite: concept probes",
            probe.bottleneck,
            probe.concepts(ATTRIBUTES),
            attributes,
            validation_share(len(ATTRIBUTES)),
            None,
            True,
            "80 sigmoid probes on fc1; 80 attribute concepts (5% each)",
        ),
        Setting(
            "composite: hidden units (argmax IoU, alpha 0.005)",
            hidden,
            probe.concepts(CONCEPTS),
            None,
            0.05,
            HIDDEN_ALPHA,
            False,
            f"{hidden.shape[1]} live conv1/conv2/fc1 units; all 244 concepts (1-19%)",
        ),
    ]
