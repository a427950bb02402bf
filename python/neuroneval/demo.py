"""End-to-end demo: train a small CNN on scikit-learn's digits, then ask which explanations fit its units.

Run it with ``python -m neuroneval.demo [--out DIR]`` (``make demo``). It trains a tiny CNN on
half of the 1,797 bundled 8x8 digit images (nothing is downloaded), captures its hidden layers
and its softmax outputs on the other half (the probe set), scores every unit against 14
concepts (the ten digits and four derived ones) with all 24 metrics, and writes the table to
``DIR/scores.parquet``. The ten class units have a known correct concept (their digit), so
the demo then shows how well each metric finds it: how many class units score their own
digit above every other concept, and the pooled meta-AUPRC of SPEC section 5.

Everything is seeded, torch runs single-threaded and deterministic on the CPU, so the printed
numbers are identical on every run (on the same machine and library versions).

Examples
--------
>>> from neuroneval import demo
>>> demo.main(["--out", "demo-out"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import numpy.typing as npt
import polars as pl
import torch
from torch import nn

import neuroneval

from .torch import capture

__all__ = ["CONCEPT_NAMES", "LAYERS", "concepts_for", "main", "own_concept_first"]

ALPHA = 0.05
EPOCHS = 12
BATCH = 32
LEARNING_RATE = 3e-3

#: Layers the demo scores: name in the parquet -> (module name in the probe model, description).
LAYERS: dict[str, tuple[str, str]] = {
    "conv1": ("net.relu1", "ReLU of conv 1->16, channel mean"),
    "conv2": ("net.relu2", "ReLU of conv 16->32, channel mean"),
    "fc1": ("net.relu3", "ReLU of linear 512->64"),
    "class": ("softmax", "softmax of the 10 class outputs"),
}

_DERIVED: dict[str, tuple[int, ...]] = {
    "even": (0, 2, 4, 6, 8),
    "prime": (2, 3, 5, 7),
    "closed loop": (0, 4, 6, 8, 9),
}
CONCEPT_NAMES: tuple[str, ...] = (*(f"digit {d}" for d in range(10)), *_DERIVED, "heavy ink")


def concepts_for(labels: npt.ArrayLike, ink: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The (N, 14) binary concept matrix of `CONCEPT_NAMES` for digit labels and total ink.

    "heavy ink" is ink strictly above the median ink of these inputs.

    Examples
    --------
    >>> concepts_for([0, 3, 9], [10.0, 30.0, 20.0]).astype(int)
    array([[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0],
           [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1],
           [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0]])
    """
    y = np.asarray(labels)
    w = np.asarray(ink, dtype=np.float64)
    columns = [y == d for d in range(10)]
    columns += [np.isin(y, members) for members in _DERIVED.values()]
    columns.append(w > np.median(w))
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


def _network() -> nn.Sequential:
    return nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(1, 16, 3, padding=1),
            relu1=nn.ReLU(),
            conv2=nn.Conv2d(16, 32, 3, padding=1),
            relu2=nn.ReLU(),
            pool=nn.MaxPool2d(2),
            flatten=nn.Flatten(),
            fc1=nn.Linear(32 * 4 * 4, 64),
            relu3=nn.ReLU(),
            fc2=nn.Linear(64, 10),
        )
    )


def _train(net: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.Adam(net.parameters(), lr=LEARNING_RATE)
    loss_fn = nn.CrossEntropyLoss()
    net.train()
    for _ in range(EPOCHS):
        order = torch.randperm(x.shape[0], generator=generator)
        for start in range(0, x.shape[0], BATCH):
            idx = order[start : start + BATCH]
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


def _write_parquet_atomic(table: pl.DataFrame, path: Path) -> None:
    """Write to a fresh temporary file next to `path`, then rename it over `path` (atomic on POSIX)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        table.write_parquet(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the process exit status (0)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    parser = argparse.ArgumentParser(
        prog="python -m neuroneval.demo", description="Train a small CNN on digits and score its units."
    )
    parser.add_argument("--out", default="demo-out", type=Path, help="directory for scores.parquet (default: demo-out)")
    parser.add_argument("--seed", default=0, type=int, help="seed of the split, weights and batches (default: 0)")
    args = parser.parse_args(argv)
    out: Path = args.out
    seed: int = args.seed

    digits = load_digits()
    images = np.asarray(digits.images, dtype=np.float32) / 16.0
    labels = np.asarray(digits.target, dtype=np.int64)
    train_idx, probe_idx = train_test_split(np.arange(labels.size), test_size=0.5, stratify=labels, random_state=seed)
    print(f"neuroneval {neuroneval.__version__} demo (seed {seed}): a small CNN on scikit-learn's digits")
    print(f"data: {labels.size} 8x8 images, {train_idx.size} to train, {probe_idx.size} to probe (stratified)")

    x_all = torch.from_numpy(images).unsqueeze(1)
    y_all = torch.from_numpy(labels)
    with _deterministic_torch(seed):
        net = _network()
        _train(net, x_all[train_idx], y_all[train_idx], seed)
        probe_model = nn.Sequential(OrderedDict(net=net, softmax=nn.Softmax(dim=1)))
        acts = capture(probe_model, x_all[probe_idx], [m for m, _ in LAYERS.values()], reduce="mean")
    probe_labels = labels[probe_idx]
    accuracy = float((acts["softmax"].argmax(axis=1) == probe_labels).mean())
    print(f"CNN conv16-conv32-pool-fc64-fc10, Adam, {EPOCHS} epochs: probe accuracy {100 * accuracy:.1f}%")

    ink = images.reshape(labels.size, -1).sum(axis=1)[probe_idx]
    concepts = concepts_for(probe_labels, ink)
    print(f"concepts ({len(CONCEPT_NAMES)}): digit 0 .. digit 9, {', '.join(CONCEPT_NAMES[10:])}")

    tables = []
    for layer, (module, what) in LAYERS.items():
        a = acts[module]
        print(f"  {layer:<6} {a.shape[1]:>3} units  {what}")
        unit_names = [f"{layer}[{k}]" for k in range(a.shape[1])]
        table = neuroneval.score(a, concepts, None, alpha=ALPHA, unit_names=unit_names, concept_names=CONCEPT_NAMES)
        tables.append(table.select(pl.lit(layer).alias("layer"), pl.all()))
    scores = pl.concat(tables)
    n_units = sum(a.shape[1] for a in acts.values())
    n_metrics = len(neuroneval.METRICS)

    class_scores = neuroneval.compute(acts[LAYERS["class"][0]], concepts, None, alpha=ALPHA)
    truth = np.arange(10)
    rows = []
    for metric, s in class_scores.items():
        meta = neuroneval.meta_auprc(s, truth)
        first, tied = own_concept_first(s, truth)
        rows.append((meta.value, metric, meta.nan_scores, first, tied))
    rows.sort(key=lambda r: -r[0])  # stable: equal values keep METRICS order

    print()
    print(f"Class units vs their digit ({n_metrics} metrics, alpha={ALPHA}; * = passes the paper's sanity checks):")
    print("meta-AUPRC pools all 10x14 scores (random ~ 0.07); 'own first' counts class units whose")
    print("own digit scores strictly above the 13 other concepts (ties listed apart, NaN lowest).")
    print(f"    {'metric':<36} {'meta-AUPRC':>10}  own first")
    for value, metric, nans, first, tied in rows:
        mark = "*" if metric in neuroneval.PASSING_METRICS else " "
        extra = (f"  +{tied} tied" if tied else "") + (f"  ({nans} NaN)" if nans else "")
        print(f"  {mark} {metric:<36} {value:>10.3f}  {first:>2}/10{extra}")

    path = out / "scores.parquet"
    _write_parquet_atomic(scores, path)
    print()
    print(
        f"wrote {path}: {scores.height} rows ({n_units} units x {len(CONCEPT_NAMES)} concepts), "
        f"columns layer, unit, concept + {n_metrics} metrics"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
