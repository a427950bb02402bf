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

import numpy as np
import torch

from ..circuits.models import DecomposedModel
from .data import PairBatch
from .featurizers import DAS, DBM, Featurizer
from .interventions import intervened_logits

__all__ = ["SPARSITY", "train_das", "train_dbm", "train_featurizer"]

#: The weight of the sparsity term of DAS's boundary and DBM's mask.
SPARSITY = 0.1


def _loss(model: DecomposedModel, f: Featurizer, batch: PairBatch, layer: int, position: str) -> torch.Tensor:
    logits = intervened_logits(
        model, batch.base, batch.source, layer, batch.base_positions[position], batch.source_positions[position], f
    )
    return torch.nn.functional.cross_entropy(logits, batch.expected)


def train_featurizer(
    model: DecomposedModel,
    featurizer: Featurizer,
    batches: Sequence[PairBatch],
    layer: int,
    position: str,
    *,
    epochs: int,
    lr: float,
    seed: int,
    penalty: Callable[[], torch.Tensor] | None = None,
    on_step: Callable[[float], None] | None = None,
) -> Featurizer:
    """Adam on `featurizer`'s parameters over `batches` (kept pairs) for `epochs`, in a seeded
    order; `penalty` is added to each step's loss, `on_step` gets each step's progress in [0, 1]."""
    frozen = [p.requires_grad for p in model.model.parameters()]
    for p in model.model.parameters():
        p.requires_grad_(False)
    optimizer = torch.optim.Adam(featurizer.param_groups(lr))
    rng = np.random.default_rng(seed)
    total, step = max(1, epochs * len(batches)), 0
    try:
        for _ in range(epochs):
            for i in rng.permutation(len(batches)):
                loss = _loss(model, featurizer, batches[int(i)], layer, position)
                if penalty is not None:
                    loss = loss + penalty()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                if on_step is not None:
                    on_step(step / total)
    finally:
        for p, r in zip(model.model.parameters(), frozen, strict=True):
            p.requires_grad_(r)
    return featurizer


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
) -> DAS:
    """A DAS rotation trained at (layer, position) with its subspace size learned (Boundless
    DAS): the boundary starts at `size`, a `sparsity` term on its fraction of the width keeps it
    small, and the temperature anneals from 8 to 0.1 coordinates; Adam at `lr` for the rotation,
    ten times that for the boundary."""
    das = DAS(model.d_model, size, seed=seed, learn_size=True)
    das.hard = False

    def anneal(progress: float) -> None:
        das.temperature = float(8 * (0.1 / 8) ** progress)

    def penalty() -> torch.Tensor:
        return sparsity * torch.sigmoid(das.boundary)

    train_featurizer(
        model, das, batches, layer, position, epochs=epochs, lr=lr, seed=seed, penalty=penalty, on_step=anneal
    )
    das.hard = True
    return das


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
) -> DBM:
    """MIB's DBM over `inner`'s features at (layer, position): a soft mask trained with a
    sparsity term and an annealed temperature, evaluated hard."""
    dbm = DBM(inner, "dbm-neurons" if inner.name == "full" else None)
    dbm.hard = False

    def anneal(progress: float) -> None:
        dbm.temperature = float(10 ** (-2 * progress))  # 1 -> 0.01

    def penalty() -> torch.Tensor:
        return sparsity * dbm.mask().mean()

    train_featurizer(
        model, dbm, batches, layer, position, epochs=epochs, lr=5e-2, seed=seed, penalty=penalty, on_step=anneal
    )
    dbm.hard = True
    return dbm
