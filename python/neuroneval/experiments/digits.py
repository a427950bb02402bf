"""End-to-end demo: train a small CNN on scikit-learn's digits, then ask which explanations fit its units.

Run it with ``python -m neuroneval.experiments.digits [--out DIR]`` or ``neuroneval demo``
(``make demo``). It trains a tiny CNN on half of the 1,797 bundled 8x8 digit images (nothing is
downloaded), each seen under 45 small shifts and rotations, and captures its hidden layers and its softmax outputs on the other half
under the same 45 transforms (the probe set: 40,455 inputs, the size of the paper's probing
sets, so that even alpha = 0.0001 selects a handful of inputs). It scores every unit against
17 concepts (the ten digits, six derived ones and heavy ink) with all 24 metrics, and writes
the table to ``DIR/scores.parquet``. The ten class units have a known correct concept (their
digit), so the demo then shows how well each metric finds it: how many class units score their
own digit above every other concept, and the pooled meta-AUPRC of SPEC section 5. Last, it
runs the sanity checks of SPEC section 4 on the class, superclass and hidden units, and the
theoretical test, prints the paper's Table 3 beside ours, and writes it with a bar chart to
``DIR/sanity/``.

Everything is seeded, torch runs single-threaded and deterministic on the CPU, so the printed
numbers are identical on every run (on the same machine and library versions).

Examples
--------
>>> from neuroneval.experiments import digits
>>> digits.main(["--out", "demo-out"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import sys
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import torch
from torch import nn

import neuroneval
import neuroneval.crowd
import neuroneval.sanity
from neuroneval import report
from neuroneval.files import write_atomic
from neuroneval.torch import capture, extract

from . import numbers
from .common import CROWD_TARGET, crowd_summary, sequential_summary, spread_pairs, write_crowd, write_page

__all__ = [
    "CONCEPT_NAMES",
    "DERIVED",
    "LAYERS",
    "DigitsProbe",
    "concepts_for",
    "main",
    "numbers_setting",
    "own_concept_first",
    "probe_digits",
    "run_sanity",
    "sanity_settings",
]

ALPHA = 0.05
EPOCHS = 2
BATCH = 64
LEARNING_RATE = 3e-3
#: Every image is also seen rotated by these angles (degrees) and shifted by these pixels in x and y.
ANGLES: tuple[float, ...] = (-10.0, -5.0, 0.0, 5.0, 10.0)
SHIFTS: tuple[int, ...] = (-1, 0, 1)

#: Layers the demo scores: name in the parquet -> (module name in the probe model, description).
LAYERS: dict[str, tuple[str, str]] = {
    "conv1": ("net.relu1", "ReLU of conv 1->16, channel mean"),
    "conv2": ("net.relu2", "ReLU of conv 16->32, channel mean"),
    "fc1": ("net.relu3", "ReLU of linear 512->64"),
    "class": ("softmax", "softmax of the 10 class outputs"),
}

#: Derived concepts: each is a set of digits. The demo's superclass units sum their members' class probabilities.
DERIVED: dict[str, tuple[int, ...]] = {
    "prime": (2, 3, 5, 7),
    "closed loop": (0, 6, 8, 9),
    "straight strokes": (1, 4, 7),
    "multiple of three": (3, 6, 9),
    "small (0-2)": (0, 1, 2),
    "large (7-9)": (7, 8, 9),
}
# Each covers 30-40% of the inputs: under 50%, the extra-labels check (which adds as many labels
# as there are) still leaves part of the inputs unlabelled, as it does for the paper's superclasses.

CONCEPT_NAMES: tuple[str, ...] = (*(f"digit {d}" for d in range(10)), *DERIVED, "heavy ink")


def concepts_for(labels: npt.ArrayLike, ink: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The (N, 17) binary concept matrix of `CONCEPT_NAMES` for digit labels and total ink.

    "heavy ink" is ink strictly above the 75th percentile of the ink of these inputs.

    Examples
    --------
    >>> concepts_for([0, 3, 9, 7], [10.0, 30.0, 20.0, 5.0]).astype(int)
    array([[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0],
           [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1],
           [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0],
           [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0]])
    """
    y = np.asarray(labels)
    w = np.asarray(ink, dtype=np.float64)
    columns = [y == d for d in range(10)]
    columns += [np.isin(y, members) for members in DERIVED.values()]
    columns.append(w > np.percentile(w, 75))
    return np.stack(columns, axis=1).astype(np.float64)


def own_concept_first(scores: npt.ArrayLike, truth: npt.ArrayLike) -> tuple[int, int]:
    """How many units score their own concept strictly above every other one, and how many tie for first.

    NaN ranks below every number; a unit whose own score is NaN is never first.

    Examples
    --------
    >>> s = np.array([[0.9, 0.1], [0.5, 0.5], [np.nan, 0.2], [0.3, np.nan]])
    >>> own_concept_first(s, [0, 1, 0, 0])
    (2, 1)
    """
    s = np.asarray(scores, dtype=np.float64)
    t = np.asarray(truth, dtype=np.int64)
    filled = np.where(np.isnan(s), -np.inf, s)
    rows = np.arange(s.shape[0])
    own = filled[rows, t]
    others = filled.copy()
    others[rows, t] = -np.inf
    best_other = others.max(axis=1)
    valid = ~np.isnan(s[rows, t])
    first = valid & (own > best_other)
    tied = valid & (own == best_other)
    return int(first.sum()), int(tied.sum())


def _network(width: int = 8, hidden: int = 64, classes: int = 10) -> nn.Sequential:
    """conv16-conv32-pool-fc-fc on 8 x `width` images (the demo's CNN; the composites' at width 16)."""
    return nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(1, 16, 3, padding=1),
            relu1=nn.ReLU(),
            conv2=nn.Conv2d(16, 32, 3, padding=1),
            relu2=nn.ReLU(),
            pool=nn.MaxPool2d(2),
            flatten=nn.Flatten(),
            fc1=nn.Linear(32 * 4 * (width // 2), hidden),
            relu3=nn.ReLU(),
            fc2=nn.Linear(hidden, classes),
        )
    )


def augment(images: torch.Tensor) -> torch.Tensor:
    """Each (N, 1, 8, 8) image under every rotation of `ANGLES` and shift of `SHIFTS`, transform-major.

    Bilinear resampling with zero fill; output (len(ANGLES) * len(SHIFTS)**2 * N, 1, 8, 8), the
    i-th image of every block being input i.

    Examples
    --------
    >>> x = torch.zeros(2, 1, 8, 8); x[:, 0, 3:5, 3:5] = 1.0
    >>> y = augment(x)
    >>> y.shape, bool(torch.equal(y[44], x[0]))   # the identity transform is in the middle
    (torch.Size([90, 1, 8, 8]), True)
    """
    import math

    import torch.nn.functional as F

    blocks = []
    n, _, height, width = images.shape
    for angle in ANGLES:
        t = math.radians(angle)
        for dx in SHIFTS:
            for dy in SHIFTS:
                theta = torch.tensor(
                    [[math.cos(t), -math.sin(t), 2.0 * dx / width], [math.sin(t), math.cos(t), 2.0 * dy / height]],
                    dtype=images.dtype,
                )
                grid = F.affine_grid(theta.expand(n, 2, 3), list(images.shape), align_corners=False)
                blocks.append(F.grid_sample(images, grid, align_corners=False, padding_mode="zeros"))
    return torch.cat(blocks)


def _train(
    net: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    seed: int,
    epochs: int = EPOCHS,
    batch: int = BATCH,
    learning_rate: float = LEARNING_RATE,
) -> None:
    """Adam on the cross-entropy, seeded batches (the demo's CNN and the composites' CNN)."""
    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.Adam(net.parameters(), lr=learning_rate)
    loss_fn = nn.CrossEntropyLoss()
    net.train()
    for _ in range(epochs):
        order = torch.randperm(x.shape[0], generator=generator)
        for start in range(0, x.shape[0], batch):
            idx = order[start : start + batch]
            optimiser.zero_grad()
            loss_fn(net(x[idx]), y[idx]).backward()
            optimiser.step()


@contextmanager
def _deterministic_torch(seed: int) -> Iterator[None]:
    """Seeded, single-threaded, deterministic torch; the caller's settings and RNG are restored."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.set_num_threads(1)
        try:
            torch.use_deterministic_algorithms(True)
        except RuntimeError:  # pragma: no cover - an old or unusual build; the CPU ops are deterministic anyway
            pass
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(deterministic)
            torch.set_num_threads(threads)


@dataclass(frozen=True)
class DigitsProbe:
    """The demo's trained CNN, observed on its probe set.

    Attributes
    ----------
    activations : dict of str to ndarray
        (N, K) float32 activations per layer of `LAYERS` (conv1, conv2, fc1, class).
    labels : ndarray of int64, shape (N,)
        The probe inputs' digits.
    concepts : ndarray of float64, shape (N, len(CONCEPT_NAMES))
    accuracy : float
        Share of probe inputs whose argmax class output is their digit.
    n_train : int
        Images the CNN was trained on (each under `copies` transforms).
    copies : int
        Transforms of each image (`augment`); the probe set has n_images * copies inputs.
    images : ndarray of float32, shape (N, 8, 8)
        The probe inputs (transform-major: input i is held-out image i % n_images).
    """

    activations: dict[str, npt.NDArray[np.float32]]
    labels: npt.NDArray[np.int64]
    concepts: npt.NDArray[np.float64]
    accuracy: float
    n_train: int
    copies: int
    images: npt.NDArray[np.float32]

    def superclass_units(self) -> npt.NDArray[np.float64]:
        """(N, len(DERIVED)) superclass units: sums of their member digits' class probabilities.

        The paper builds ImageNet superclass units the same way; unit j's concept is the j-th
        derived concept.
        """
        probs = self.activations["class"].astype(np.float64)
        return np.stack([probs[:, list(members)].sum(axis=1) for members in DERIVED.values()], axis=1)


def probe_digits(seed: int = 0, store: Path | None = None) -> DigitsProbe:
    """Train the demo's CNN on half of scikit-learn's digits and capture its units on the other half.

    With `store`, the activations are extracted to that directory first (`neuroneval.torch.extract`,
    float32: one shard store per layer, as for a model too large for memory) and read back from it.
    Deterministic for a given seed (single-threaded, deterministic torch on the CPU).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = np.asarray(digits.images, dtype=np.float32) / 16.0
    labels = np.asarray(digits.target, dtype=np.int64)
    train_idx, probe_idx = train_test_split(np.arange(labels.size), test_size=0.5, stratify=labels, random_state=seed)
    x_all = torch.from_numpy(images).unsqueeze(1)
    copies = len(ANGLES) * len(SHIFTS) ** 2
    x_train = augment(x_all[train_idx])
    y_train = torch.from_numpy(labels[train_idx]).repeat(copies)
    x_probe = augment(x_all[probe_idx])
    with _deterministic_torch(seed):
        net = _network()
        _train(net, x_train, y_train, seed)
        probe_model = nn.Sequential(OrderedDict(net=net, softmax=nn.Softmax(dim=1)))
        modules = [m for m, _ in LAYERS.values()]
        if store is None:
            captured = capture(probe_model, x_probe, modules, reduce="mean")
        else:
            stored = extract(
                probe_model, x_probe, modules, store, reduce="mean", dtype="float32", resume=False, progress=False
            )
            captured = {m: stored[m].source.dense() for m in modules}
    acts = {layer: captured[module] for layer, (module, _) in LAYERS.items()}
    probe_labels = np.tile(labels[probe_idx], copies)
    accuracy = float((acts["class"].argmax(axis=1) == probe_labels).mean())
    ink = x_probe.reshape(x_probe.shape[0], -1).sum(dim=1).numpy()
    images_out = x_probe[:, 0].numpy()
    return DigitsProbe(
        acts, probe_labels, concepts_for(probe_labels, ink), accuracy, int(train_idx.size), copies, images_out
    )


def sanity_settings(probe: DigitsProbe) -> list[tuple[str, npt.NDArray[Any], npt.NDArray[np.int64] | None]]:
    """The experimental sanity-check settings of the digits model: (name, units, truth).

    Class units with their digit, superclass units with their derived concept, and the
    hidden units (conv1, conv2, fc1) whose correct concept is found as argmax IoU (truth None).
    Dead hidden units (constant on the probe set) are left out: no concept explains them.
    """
    derived_index = np.array([CONCEPT_NAMES.index(name) for name in DERIVED], dtype=np.int64)
    hidden = np.concatenate([probe.activations[layer] for layer in ("conv1", "conv2", "fc1")], axis=1)
    hidden = hidden[:, hidden.min(axis=0) < hidden.max(axis=0)]
    return [
        ("digits: class units", probe.activations["class"], np.arange(10, dtype=np.int64)),
        ("digits: superclass units", probe.superclass_units(), derived_index),
        ("digits: hidden units (argmax IoU)", hidden, None),
    ]


def run_sanity(probe: DigitsProbe, seed: int = 0, theoretical: bool = True) -> neuroneval.sanity.SanityResult:
    """The experimental sanity checks on every setting of `sanity_settings` (all metrics),
    plus the theoretical test at the paper's size when `theoretical`."""
    results = [
        neuroneval.sanity.experimental(units, probe.concepts, truth, seed=seed, setting=name)
        for name, units, truth in sanity_settings(probe)
    ]
    if theoretical:
        results.append(neuroneval.sanity.theoretical(seed=seed))
    return neuroneval.sanity.SanityResult.concat(results)


#: Ratings per (unit, explanation) pair of the crowd simulation: 60 to 61,440, doubling.
CROWD_BUDGETS: tuple[int, ...] = tuple(60 * 2**i for i in range(11))


def digits_concept_model(probe: DigitsProbe, folds: int = 5, pool: int = 4) -> npt.NDArray[np.float64]:
    """A cheap, imperfect concept model for every concept of `CONCEPT_NAMES` (SigLIP's role).

    One logistic regression per concept on the pool x pool average-pooled pixels (4: 16
    features; 8: all 64 pixels; standardised), cross-fitted: the folds split the held-out
    images, so an input's probability comes from a model that saw none of its image's 45
    transforms. Returns (N, T) probabilities. Deterministic.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from threadpoolctl import threadpool_limits

    n = probe.labels.size
    image = np.arange(n) % (n // probe.copies)
    if pool not in (1, 2, 4, 8):
        raise ValueError(f"pool must divide the 8x8 image: 1, 2, 4 or 8; got {pool!r}")
    side = 8 // pool
    x = probe.images.reshape(n, pool, side, pool, side).mean(axis=(2, 4)).reshape(n, pool * pool).astype(np.float64)
    std = x.std(axis=0)
    x = (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)  # a border pixel may be blank everywhere
    model = np.zeros_like(probe.concepts)
    with threadpool_limits(1):  # one BLAS thread: many small fits run faster without oversubscription
        for t in range(probe.concepts.shape[1]):
            y = probe.concepts[:, t]
            for train, test in GroupKFold(folds).split(x, y, image):
                fit = LogisticRegression(max_iter=300).fit(x[train], y[train])
                model[test, t] = fit.predict_proba(x[test])[:, 1]
    return model


def crowd_pairs(
    probe: DigitsProbe, count: int = 20, min_rho: float = 0.25
) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
    """The live hidden units and `count` (unit, concept) pairs with realistic correlations.

    Each live hidden unit is paired with its most correlated concept (by |r| over all inputs);
    pairs with |r| >= `min_rho` are kept and `count` of them are taken evenly over their
    sorted |r| (from about 0.25 to 0.7 on the demo's CNN).
    """
    hidden = sanity_settings(probe)[2][1]
    corr = neuroneval.compute(hidden, probe.concepts, ["correlation"])["correlation"]
    filled = np.where(np.isnan(corr), 0.0, np.abs(corr))
    best = filled.argmax(axis=1)
    rho = filled[np.arange(hidden.shape[1]), best]
    pick = spread_pairs(rho, count, min_rho)
    return hidden, np.stack([pick, best[pick]], axis=1).astype(np.int64)


def numbers_setting(probe: DigitsProbe, seed: int = 0, pool: int = 4, **kwargs: Any) -> numbers.NumbersSetting:
    """The paper-like crowd setting (`neuroneval.experiments.numbers`) from this CNN: its live
    hidden units on either digit, and `digits_concept_model` (at `pool`) for each digit."""
    hidden = sanity_settings(probe)[2][1]
    model = digits_concept_model(probe, pool=pool)[:, :10]
    return numbers.numbers_setting(probe.labels, hidden, model, seed, **kwargs)


def run_crowd(
    probe: DigitsProbe, seed: int = 0, trials: int = 20, raters: Sequence[int] = (3,)
) -> neuroneval.crowd.Simulation:
    """The crowd simulation on the hidden units with their most correlated concept: RCE of the
    four configurations over `CROWD_BUDGETS` and `raters` per input, raters with eta = 0.23,
    BRAgg with the concept model's prior."""
    hidden, pairs = crowd_pairs(probe)
    return neuroneval.crowd.simulate(
        hidden,
        probe.concepts,
        digits_concept_model(probe),
        pairs,
        CROWD_BUDGETS,
        raters_per_input=raters,
        trials=trials,
        prior="model",
        target=CROWD_TARGET,
        seed=seed,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the process exit status (0)."""
    parser = argparse.ArgumentParser(
        prog="python -m neuroneval.experiments.digits", description="Train a small CNN on digits and score its units."
    )
    parser.add_argument("--out", default="demo-out", type=Path, help="output directory (default: demo-out)")
    parser.add_argument(
        "--seed", default=0, type=int, help="seed of the split, weights, batches and checks (default: 0)"
    )
    parser.add_argument(
        "--text",
        action="store_true",
        help="run the text demo instead (MiniLM over the Lee corpus; needs the text extra)",
    )
    args, rest = parser.parse_known_args(argv)
    if args.text:
        from . import text_demo

        out_args = [] if args.out == Path("demo-out") else ["--out", str(args.out)]
        return text_demo.main([*rest, *out_args, "--seed", str(args.seed)])
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    out: Path = args.out
    seed: int = args.seed

    print(f"neuroneval {neuroneval.__version__} demo (seed {seed}): a small CNN on scikit-learn's digits")
    probe = probe_digits(seed, store=out / "activations")
    n_probe = probe.labels.size
    n_images = n_probe // probe.copies
    print(
        f"data: {probe.n_train + n_images} 8x8 images, {probe.n_train} to train, {n_images} to probe (stratified),"
        f" each under {probe.copies} shifts/rotations: {n_probe:,} probe inputs"
    )
    print(f"CNN conv16-conv32-pool-fc64-fc10, Adam, {EPOCHS} epochs: probe accuracy {100 * probe.accuracy:.1f}%")
    stored = sum(f.stat().st_size for f in (out / "activations").rglob("*") if f.is_file())
    print(f"extracted the 4 layers to {out / 'activations'} ({stored / 1e6:.1f} MB, one shard store per layer)")
    concepts = probe.concepts
    print(f"concepts ({len(CONCEPT_NAMES)}): digit 0 .. digit 9, {', '.join(CONCEPT_NAMES[10:])}")

    tables = []
    for layer, (_, what) in LAYERS.items():
        a = probe.activations[layer]
        print(f"  {layer:<6} {a.shape[1]:>3} units  {what}")
        unit_names = [f"{layer}[{k}]" for k in range(a.shape[1])]
        table = neuroneval.score(a, concepts, None, alpha=ALPHA, unit_names=unit_names, concept_names=CONCEPT_NAMES)
        tables.append(table.select(pl.lit(layer).alias("layer"), pl.all()))
    scores = pl.concat(tables)
    n_units = sum(a.shape[1] for a in probe.activations.values())
    n_metrics = len(neuroneval.METRICS)
    n_concepts = len(CONCEPT_NAMES)

    class_scores = neuroneval.compute(probe.activations["class"], concepts, None, alpha=ALPHA)
    truth = np.arange(10)
    rows = []
    for metric, s in class_scores.items():
        meta = neuroneval.meta_auprc(s, truth)
        first, tied = own_concept_first(s, truth)
        rows.append((meta.value, metric, meta.nan_scores, first, tied))
    rows.sort(key=lambda r: -r[0])  # stable: equal values keep METRICS order

    print()
    print(f"Class units vs their digit ({n_metrics} metrics, alpha={ALPHA}; * = passes the paper's sanity checks):")
    print(
        f"meta-AUPRC pools all 10x{n_concepts} scores (random ~ {1 / n_concepts:.2f}); 'own first' counts class units"
    )
    print(f"whose own digit scores strictly above the {n_concepts - 1} other concepts (ties listed apart, NaN lowest).")
    print(f"    {'metric':<36} {'meta-AUPRC':>10}  own first")
    for value, metric, nans, first, tied in rows:
        mark = "*" if metric in neuroneval.PASSING_METRICS else " "
        extra = (f"  +{tied} tied" if tied else "") + (f"  ({nans} NaN)" if nans else "")
        print(f"  {mark} {metric:<36} {value:>10.3f}  {first:>2}/10{extra}")

    path = out / "scores.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, scores.write_parquet)
    print()
    print(
        f"wrote {path}: {scores.height} rows ({n_units} units x {n_concepts} concepts), "
        f"columns layer, unit, concept + {n_metrics} metrics"
    )

    print()
    print("Sanity checks (SPEC section 4): Decrease Acc % when the correct concept loses half its labels")
    print("(missing) or gains as many wrong ones (extra); experimental = this CNN's class, superclass and")
    print("hidden units (alpha, lambda tuned on 5% of them), theoretical = N=500,000, 5 gammas x 1,000 seeds.")
    print("In parentheses: the paper's Table 3. A metric passes when every cell is >= 90.")
    sanity = run_sanity(probe, seed)
    print(sanity.to_markdown(), end="")
    print("This small CNN's setting is too easy to show the paper's verdicts: its concepts are large (each digit")
    print("is a tenth of the inputs), few units are tested, and alphas tuned on a handful of units tie, so")
    print("metrics the paper trusts can fail here. The paper-like Table 3 (five settings at realistic rarity,")
    print("averaged as the paper's) comes from: python -m neuroneval.experiments.reproduce --out runs/table3")
    print('(see docs/sanity.md, "The experimental test on paper-like settings").')
    written = sanity.write(out / "sanity")
    print(f"wrote {', '.join(str(p) for p in written)}")

    print()
    crowd_setting = numbers_setting(probe, seed)
    rho, prevalence, auc = crowd_setting.rho, crowd_setting.prevalence, crowd_setting.auc
    print(
        f"Crowdsourced correlation (SPEC section 6), a paper-like setting: {crowd_setting.units.shape[0]:,} two-digit"
        f" numbers (pairs of held-out digits), {len(rho)} (hidden unit, number) pairs with true correlations"
    )
    print(
        f"{rho.min():.2f}-{rho.max():.2f}, numbers on {100 * prevalence.min():.1f}-{100 * prevalence.max():.1f}% of"
        f" the inputs, a pixel model of AUC {auc.min():.2f}-{auc.max():.2f} as the concept model (MG-IS proposal,"
        " BRAgg prior),"
    )
    print(
        f"simulated raters wrong 23% of the time, {'/'.join(map(str, numbers.RATERS))} per input; cheapest ratings"
        f" per pair to reach a relative correlation error of {CROWD_TARGET:.1%} (mean of 20 trials):"
    )
    simulation = numbers.run(crowd_setting, seed)
    for line in crowd_summary(simulation):
        print(line)
    csv, png = write_crowd(simulation, out / "crowd" / "rce.csv", out / "crowd" / "rce.png")
    print(f"wrote {csv}, {png}")
    print(
        "The same, raters asked one at a time until BRAgg's posterior is "
        f"{neuroneval.crowd.SEQUENTIAL_OPTIONS['confidence'].default:g} sure either way (at most the cap):"
    )
    sequential = numbers.run_sequential(crowd_setting, seed)
    for line in sequential_summary(sequential, simulation):
        print(line)
    csv, png = write_crowd(sequential, out / "crowd" / "rce-sequential.csv", out / "crowd" / "rce-sequential.png")
    print(f"wrote {csv}, {png}")

    tops = report.top_inputs(probe.activations, k=report.INPUTS_PER_UNIT)
    page_meta = {
        "title": "neuroneval demo: a small CNN on scikit-learn's digits",
        "description": (
            f"{n_units} units of a CNN (probe accuracy {100 * probe.accuracy:.1f}%) over {n_probe:,} probe inputs"
            f" ({n_images} held-out digits x {probe.copies} shifts and rotations), {n_concepts} concepts, all"
            f" {n_metrics} metrics at alpha = {ALPHA}."
        ),
        "layers": {layer: what for layer, (_, what) in LAYERS.items()},
    }
    page = write_page(out, tops, page_meta, images=probe.images)
    print(f"wrote {page} ({page.stat().st_size / 1e3:,.0f} kB): open it in a browser")
    return 0


if __name__ == "__main__":
    sys.exit(main())
