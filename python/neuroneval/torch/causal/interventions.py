"""Batched interchange interventions on a decomposed causal LM (SPEC section 7).

One base pass and one source pass per batch (`forward`) keep the residual stream at every layer.
An interchange at (layer, position) then replaces the base's vector at that position by the
featurizer's interchange of it with the source's, and runs the model from the next layer on, at
the positions from the intervened one onwards only: the earlier positions cannot see the
intervention, so their keys and values are the base pass's (`intervened_logits`). Positions are
given per example, so a batch may mix prompts whose named word sits at different places, and
prompts of different lengths: a batch is padded on the right, which no real position attends
to (attention is causal), and each example's output is read at its own last token.

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
    embeddings, ``hidden[L]`` the last block's output), ``last`` each example's last real
    position, ``top`` its top next token there."""

    hidden: list[Tensor]
    last: Tensor
    top: Tensor

    def rows(self, keep: Tensor) -> Pass:
        """The examples where `keep` (bool ``[B]``) holds."""
        return Pass([h[keep] for h in self.hidden], self.last[keep], self.top[keep])


def residuals(model: DecomposedModel, tokens: Tensor) -> list[Tensor]:
    """Every block's input and the last block's output for `tokens` ``[B, T]`` (with gradients)."""
    x = model.embed(tokens)
    hidden = [x]
    for layer in range(model.n_layers):
        x = model.block(layer, x)
        hidden.append(x)
    return hidden


def forward(model: DecomposedModel, tokens: Tensor, last: Tensor | None = None) -> Pass:
    """Run `tokens` ``[B, T]`` (right-padded; ``last[i]`` the last real position, default
    ``T - 1``) through `model`, keeping every layer's residual stream."""
    if last is None:
        last = torch.full((tokens.shape[0],), tokens.shape[1] - 1, dtype=torch.int64)
    with torch.no_grad():
        hidden = residuals(model, tokens)
        top = model.logits(hidden[-1][torch.arange(tokens.shape[0]), last]).argmax(-1)
    return Pass(hidden, last, top)


def check_unit(model: DecomposedModel, layer: int, positions: Tensor, last: Tensor) -> None:
    """A clear error for a layer outside ``0..L-1`` or a position outside its prompt (``last``:
    each prompt's last position)."""
    if not isinstance(layer, int) or not 0 <= layer < model.n_layers:
        raise ParameterError(f"layer {layer!r} is out of range: the model has layers 0..{model.n_layers - 1}")
    bad = (positions < 0) | (positions > last)
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0, 0])
        raise ParameterError(
            f"token position {int(positions[i])} is out of range: prompt {i} has {int(last[i]) + 1} tokens"
        )


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
    check_unit(model, layer, base_positions, base.last)
    check_unit(model, layer, source_positions, source.last)
    h = base.hidden[layer + 1]
    rows = torch.arange(h.shape[0], device=h.device)
    swapped = featurizer.interchange(h[rows, base_positions], source.hidden[layer + 1][rows, source_positions])
    x = h.index_put((rows, base_positions), swapped)
    start = int(base_positions.min())
    for later in range(layer + 1, model.n_layers):
        x = torch.cat([base.hidden[later + 1][:, :start], model.block(later, x, start)], dim=1)
    return model.logits(x[rows, base.last])
