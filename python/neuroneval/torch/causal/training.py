"""Training the learned featurizers on interchange interventions: DAS's subspace and DBM's mask.

Both minimise the cross-entropy of the intervened model's next token against the causal model's
counterfactual output, over the kept training pairs, by Adam, with the model's weights frozen.
DBM adds MIB's sparsity term (the mean of the soft mask) and anneals the sigmoid's temperature
from 1 to 0.01 over training, so the mask it ends with is close to the hard one it is
evaluated with. DAS learns its subspace size the same way (Boundless DAS: a soft boundary over
the rotated coordinates).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..circuits.models import DecomposedModel
from .data import PairBatch
from .featurizers import DAS, DBM, Featurizer
from .interventions import site_width, stacked_logits

__all__ = ["SPARSITY", "Trainee", "das_trainee", "dbm_trainee", "train_das", "train_dbm", "train_together"]

#: The weight of the sparsity term of DAS's boundary and DBM's mask.
SPARSITY = 0.1


@dataclass
class Trainee:
    """A featurizer to train (a `DAS` or `DBM`, soft while it trains and hard after): its
    learning rate, the penalty added to its loss, and `anneal`, told each step's progress in
    [0, 1]."""

    featurizer: DAS | DBM
    lr: float
    penalty: Callable[[], torch.Tensor]
    anneal: Callable[[float], None]


def das_trainee(width: int, size: int, *, seed: int, lr: float, sparsity: float = SPARSITY) -> Trainee:
    """A DAS rotation with its subspace size learned (Boundless DAS): the boundary starts at
    `size`, a `sparsity` term on its fraction of the width keeps it small, and the temperature
    anneals from 8 to 0.1 coordinates; Adam at `lr` for the rotation, ten times that for the
    boundary."""
    das = DAS(width, size, seed=seed, learn_size=True)

    def anneal(progress: float) -> None:
        das.temperature = float(8 * (0.1 / 8) ** progress)

    return Trainee(das, lr, lambda: sparsity * torch.sigmoid(das.boundary), anneal)


def dbm_trainee(inner: Featurizer, *, sparsity: float = SPARSITY) -> Trainee:
    """MIB's DBM over `inner`'s features: a soft mask with a sparsity term (its mean) and a
    temperature annealed from 1 to 0.01, at Adam's rate 0.05."""
    dbm = DBM(inner, "dbm-neurons" if inner.name == "full" else None)

    def anneal(progress: float) -> None:
        dbm.temperature = float(10 ** (-2 * progress))

    return Trainee(dbm, 5e-2, lambda: sparsity * dbm.mask().mean(), anneal)


def train_together(
    model: DecomposedModel,
    trainees: Sequence[Trainee],
    batches: Sequence[PairBatch],
    layer: int,
    position: str,
    *,
    epochs: int,
    seed: int,
    on_step: Callable[[int, int], None] | None = None,
    site: str | None = None,
) -> list[Featurizer]:
    """Each trainee trained at (layer, position) and `site` (`SITES`) over `batches` (kept
    pairs) for `epochs` in a seeded order, by Adam with the model frozen; returned hard. The
    trainees' interventions run stacked (`stacked_logits`) and their losses are summed: their parameters are disjoint and
    Adam's update is per parameter, so each learns what it would alone. `on_step` gets (step,
    steps)."""
    frozen = [p.requires_grad for p in model.model.parameters()]
    model.model.requires_grad_(False)
    for t in trainees:
        t.featurizer.hard = False
    optimizer = torch.optim.Adam([g for t in trainees for g in t.featurizer.param_groups(t.lr)])
    rng = np.random.default_rng(seed)
    total, step = max(1, epochs * len(batches)), 0
    try:
        for _ in range(epochs):
            for i in rng.permutation(len(batches)):
                batch = batches[int(i)]
                logits = stacked_logits(
                    model, batch.base, batch.source, layer, batch.base_positions[position],
                    batch.source_positions[position], [t.featurizer for t in trainees], site=site,
                )  # fmt: skip
                loss = sum(
                    (torch.nn.functional.cross_entropy(out, batch.expected) + t.penalty()
                     for out, t in zip(logits, trainees, strict=True)),
                    torch.zeros(()),
                )  # fmt: skip
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                for t in trainees:
                    t.anneal(step / total)
                if on_step is not None:
                    on_step(step, total)
    finally:
        for p, r in zip(model.model.parameters(), frozen, strict=True):
            p.requires_grad_(r)
        for t in trainees:
            t.featurizer.hard = True
    return [t.featurizer for t in trainees]


def train_das(
    model: DecomposedModel,
    batches: Sequence[PairBatch],
    layer: int,
    position: str,
    size: int,
    *,
    epochs: int,
    seed: int,
    lr: float,
    sparsity: float = SPARSITY,
    site: str | None = None,
) -> DAS:
    """A DAS rotation trained alone at (layer, position) and `site` (`das_trainee`,
    `train_together`)."""
    trainee = das_trainee(site_width(model, layer, site), size, seed=seed, lr=lr, sparsity=sparsity)
    train_together(model, [trainee], batches, layer, position, epochs=epochs, seed=seed, site=site)
    assert isinstance(trainee.featurizer, DAS)
    return trainee.featurizer


def train_dbm(
    model: DecomposedModel,
    inner: Featurizer,
    batches: Sequence[PairBatch],
    layer: int,
    position: str,
    *,
    epochs: int,
    seed: int,
    sparsity: float = SPARSITY,
    site: str | None = None,
) -> DBM:
    """MIB's DBM over `inner`'s features trained alone at (layer, position) and `site`
    (`dbm_trainee`, `train_together`)."""
    trainee = dbm_trainee(inner, sparsity=sparsity)
    train_together(model, [trainee], batches, layer, position, epochs=epochs, seed=seed, site=site)
    assert isinstance(trainee.featurizer, DBM)
    return trainee.featurizer
