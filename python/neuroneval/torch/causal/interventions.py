"""Batched interchange interventions on a decomposed causal LM (SPEC section 7).

One base pass and one source pass per batch (`forward`) keep the residual stream at every layer.
An interchange at (layer, position) then replaces the base's vector at that position by the
featurizer's interchange of it with the source's, and runs the model from the next layer on, at
the positions from the intervened one onwards only: the earlier positions cannot see the
intervention, so their keys and values are the base pass's (`intervened_logits`). Positions are
given per example, so a batch may mix prompts whose named word sits at different places.

Layers are numbered as the blocks are: layer ``l`` is the residual stream after block ``l``
(Hugging Face's ``hidden_states[l + 1]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from neuroneval.errors import ParameterError

from ..circuits.models import DecomposedModel
from .featurizers import Featurizer

__all__ = ["Pass", "check_unit", "forward", "intervened_logits", "residuals"]

Tensor = torch.Tensor


@dataclass
class Pass:
    """A batch's plain run: ``hidden[i]`` is block i's input ``[B, T, d]`` (``hidden[0]`` the
    embeddings, ``hidden[L]`` the last block's output), ``top`` each example's top next token."""

    hidden: list[Tensor]
    top: Tensor


def residuals(model: DecomposedModel, tokens: Tensor) -> list[Tensor]:
    """Every block's input and the last block's output for `tokens` ``[B, T]`` (with gradients)."""
    x = model.embed(tokens)
    hidden = [x]
    for layer in range(model.n_layers):
        x = model.block(layer, x)
        hidden.append(x)
    return hidden


def forward(model: DecomposedModel, tokens: Tensor) -> Pass:
    """Run `tokens` ``[B, T]`` through `model`, keeping every layer's residual stream."""
    with torch.no_grad():
        hidden = residuals(model, tokens)
        top = model.logits(hidden[-1][:, -1]).argmax(-1)
    return Pass(hidden, top)


def check_unit(model: DecomposedModel, layer: int, positions: Tensor, n_pos: int) -> None:
    """A clear error for a layer outside ``0..L-1`` or a position outside the prompt."""
    if not isinstance(layer, int) or not 0 <= layer < model.n_layers:
        raise ParameterError(f"layer {layer!r} is out of range: the model has layers 0..{model.n_layers - 1}")
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= n_pos):
        raise ParameterError(f"token position {int(positions.max())} is out of range: the prompts have {n_pos} tokens")


def intervened_logits(
    model: DecomposedModel,
    base: Pass,
    source: Pass,
    layer: int,
    base_positions: Tensor,
    source_positions: Tensor,
    featurizer: Featurizer,
) -> Tensor:
    """The last position's logits ``[B, vocab]`` after the interchange of `featurizer` at
    `layer`: each example's vector at ``base_positions[i]`` takes the source's features from
    ``source_positions[i]``. Differentiable in the featurizer's parameters."""
    check_unit(model, layer, base_positions, base.hidden[0].shape[1])
    check_unit(model, layer, source_positions, source.hidden[0].shape[1])
    h = base.hidden[layer + 1]
    rows = torch.arange(h.shape[0], device=h.device)
    swapped = featurizer.interchange(h[rows, base_positions], source.hidden[layer + 1][rows, source_positions])
    x = h.index_put((rows, base_positions), swapped)
    start = int(base_positions.min())
    for later in range(layer + 1, model.n_layers):
        x = torch.cat([base.hidden[later + 1][:, :start], model.block(later, x, start)], dim=1)
    return model.logits(x[:, -1])
