"""A small transformer trained here to hold a causal variable in a known subspace (the
causal-variable track's analogue of `neuroneval.torch.circuits.known`).

The task is `neuroneval.causal.planted_task`: the prompt ``a b c =`` (digits 0..4) is answered by
``a + b + c`` (one token, 0..12), through the variable ``s = a + b``. The model is a 2-layer, 4-head
LLaMA-architecture transformer, trained with two losses:

- the next-token loss of the plain model, and
- interchange intervention training (IIT): with the span of `PLANTED_SIZE` fixed random
  orthonormal directions of layer `PLANTED_LAYER`'s residual stream at the last position taken
  from a source prompt, the next-token loss against the causal model's counterfactual output
  ``s_source + c_base``.

The second loss makes that subspace carry ``s``: DAS should find it (IIA near 1 there) and a
random subspace of the same size should not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from neuroneval.causal.tasks import PLANTED_DIGITS
from neuroneval.errors import ShapeError
from neuroneval.options import SCORE_OPTIONS, Option, Options

from ..circuits.models import DecomposedModel, decompose
from .featurizers import DAS
from .interventions import Pass, intervened_logits, residuals

__all__ = [
    "PLANTED_LAYER",
    "PLANTED_OPTIONS",
    "PLANTED_SIZE",
    "PlantedModel",
    "planted_tokenize",
    "train_planted_model",
]

PLANTED_LAYER, PLANTED_SIZE = 0, 4
_MAX_ANSWER = 3 * (PLANTED_DIGITS - 1)
_VOCAB = {**{str(d): d for d in range(_MAX_ANSWER + 1)}, "=": _MAX_ANSWER + 1}
#: The options of `train_planted_model`.
PLANTED_OPTIONS = Options(
    Option("steps", "integer", 300, "training steps of the planted model", low=1),
    Option("batch_size", "integer", 128, "examples per training step", low=1),
    SCORE_OPTIONS["seed"],
)


def planted_tokenize(text: str) -> list[int]:
    """The planted model's token ids: one per word of ``a b c =``, and the answers 0..12."""
    try:
        return [_VOCAB[w] for w in text.split()]
    except KeyError as e:
        raise ShapeError(f"the planted model reads the words 0..{_MAX_ANSWER} and '='; got {e.args[0]!r}") from None


@dataclass
class PlantedModel:
    """The trained model, its decomposition, the planted subspace and its training record."""

    model: torch.nn.Module
    decomposed: DecomposedModel
    subspace: DAS
    accuracy: float
    planted_iia: float


def _build(seed: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(_VOCAB),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=8,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config)


def _draw(rng: np.random.Generator, n: int) -> tuple[torch.Tensor, np.ndarray]:
    abc = rng.integers(0, PLANTED_DIGITS, (n, 3))
    tokens = np.concatenate([abc, np.full((n, 1), _VOCAB["="])], axis=1)
    return torch.from_numpy(tokens), abc


def _batch(rng: np.random.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Base and source tokens whose s differ, the base answers and the counterfactual answers."""
    base, b = _draw(rng, n)
    source, s = _draw(rng, n)
    same = s[:, :2].sum(1) == b[:, :2].sum(1)
    s[same, 0] = np.where(s[same, 0] < PLANTED_DIGITS - 1, s[same, 0] + 1, s[same, 0] - 1)  # now s differs
    source[same, 0] = torch.from_numpy(s[same, 0])
    return base, source, torch.from_numpy(b.sum(1)), torch.from_numpy(s[:, :2].sum(1) + b[:, 2])


def _losses(
    model: DecomposedModel, subspace: DAS, rng: np.random.Generator, n: int
) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    base, source, answer, counterfactual = _batch(rng, n)
    hidden = residuals(model, base)
    plain = model.logits(hidden[-1][:, -1])
    last = torch.full((n,), base.shape[1] - 1)
    src = Pass(residuals(model, source), last, torch.zeros(n, dtype=torch.int64))
    swapped = intervened_logits(model, Pass(hidden, last, plain.argmax(-1)), src, PLANTED_LAYER, last, last, subspace)
    ce = torch.nn.functional.cross_entropy
    return (
        ce(plain, answer),
        ce(swapped, counterfactual),
        float((plain.argmax(-1) == answer).float().mean()),
        float((swapped.argmax(-1) == counterfactual).float().mean()),
    )


def train_planted_model(
    *,
    steps: int | None = None,
    batch_size: int | None = None,
    seed: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> PlantedModel:
    """Train the planted model (a few seconds on two cores; defaults: see `PLANTED_OPTIONS`);
    returns it with its accuracy and the planted subspace's IIA on fresh pairs."""
    values = PLANTED_OPTIONS.resolve(steps=steps, batch_size=batch_size, seed=seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small gain nothing from threads; one makes the model the same everywhere
    try:
        return _train(values["steps"], values["batch_size"], values["seed"], progress)
    finally:
        torch.set_num_threads(threads)


def _train(steps: int, batch_size: int, seed: int, progress: Callable[[str, int, int], None] | None) -> PlantedModel:
    hf = _build(seed)
    model = decompose(hf)
    subspace = DAS(model.d_model, PLANTED_SIZE, seed=seed + 1)
    for p in subspace.parameters():
        p.requires_grad_(False)
    optimizer = torch.optim.Adam(hf.parameters(), lr=3e-3)
    rng = np.random.default_rng(seed)
    hf.train()
    for step in range(steps):
        if progress is not None:
            progress("training the planted model", step, steps)
        plain, swapped, _, _ = _losses(model, subspace, rng, batch_size)
        optimizer.zero_grad()
        (plain + swapped).backward()
        optimizer.step()
    hf.eval()
    with torch.no_grad():
        _, _, accuracy, planted = _losses(model, subspace, np.random.default_rng(seed + 1), 2048)
    return PlantedModel(hf, model, subspace, accuracy, planted)
