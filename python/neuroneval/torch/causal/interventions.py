"""Batched interchange interventions on a decomposed causal LM (SPEC section 7).

One base pass and one source pass per batch (`forward`) keep the residual stream at every layer.
An interchange at (layer, position) then replaces the base's vector at that position by the
featurizer's interchange of it with the source's, and runs the model from the next layer on, at
the positions from the intervened one onwards only: the earlier positions cannot see the
intervention, so their keys and values are the base pass's, computed once per base run
(`Pass.keys_values`) and read by every intervention on it (`intervened_logits`). Positions are
given per example, so a batch may mix prompts whose named word sits at different places, and
prompts of different lengths: each example runs again from its own intervened position to its
own last token (not from the batch's earliest position to its longest prompt), padded on the
right to the longest such run, which no real position attends to (attention is causal), and
each example's output is read at its own last token.

Layers are numbered as the blocks are: layer ``l`` is the residual stream after block ``l``
(Hugging Face's ``hidden_states[l + 1]``).

The site (`SITES`) says where in layer ``l`` an interchange acts: the residual stream after the
block (MIB's track), or inside the block's MLP, on its input (after its norm) or on its hidden
units (the input of its output projection). The MLP acts on each position alone, so an
interchange there changes the block's output at the intervened position only, to the residual
between attention and MLP (`DecomposedModel.middle`) plus the MLP's output from the swapped
vector; from there the model runs as after a residual interchange.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from neuroneval.causal.results import CAUSAL_OPTIONS, CAUSAL_SITES
from neuroneval.errors import ParameterError

from ..circuits.models import DecomposedModel
from .featurizers import Featurizer

__all__ = [
    "SITES",
    "Pass",
    "check_unit",
    "forward",
    "intervened_logits",
    "residuals",
    "resolve_site",
    "site_states",
    "site_width",
    "stacked_logits",
]

Tensor = torch.Tensor
SITES = CAUSAL_SITES


@dataclass
class Pass:
    """A batch's plain run: ``hidden[i]`` is block i's input ``[B, T, d]`` (``hidden[0]`` the
    embeddings, ``hidden[L]`` the last block's output), ``last`` each example's last real
    position, ``top`` its top next token there. ``kv[i]``, once `keys_values` has computed it,
    holds block i's keys and values of every position."""

    hidden: list[Tensor]
    last: Tensor
    top: Tensor
    kv: list[tuple[Tensor, Tensor]] | None = None
    #: Per layer, once an MLP site has asked (`middle`): the residual between attention and MLP.
    mids: dict[int, Tensor] = field(default_factory=dict)

    def rows(self, keep: Tensor) -> Pass:
        """The examples where `keep` (bool ``[B]``) holds."""
        kv = None if self.kv is None else [(k[:, keep], v[:, keep]) for k, v in self.kv]
        mids = {layer: m[keep] for layer, m in self.mids.items()}
        return Pass([h[keep] for h in self.hidden], self.last[keep], self.top[keep], kv, mids)

    def middle(self, model: DecomposedModel, layer: int) -> Tensor:
        """The residual between `layer`'s attention and its MLP at every position ``[B, T, d]``
        (`DecomposedModel.middle`), computed once per run and layer."""
        if layer not in self.mids:
            with torch.no_grad():
                self.mids[layer] = model.middle(layer, self.hidden[layer])
        return self.mids[layer]

    def keys_values(self, model: DecomposedModel) -> list[tuple[Tensor, Tensor]]:
        """Every block's keys and values of this run (`DecomposedModel.keys_values`): an
        intervention reads the positions before its own from them. Kept for the next
        intervention unless they carry gradients (a model in training computes them anew)."""
        if self.kv is not None:
            return self.kv
        kv = [model.keys_values(i, self.hidden[i]) for i in range(model.n_layers)]
        if not kv[0][0].requires_grad:
            self.kv = kv
        return kv

    @staticmethod
    def concat(passes: Sequence[Pass]) -> Pass:
        """The runs of `passes` as one batch, right-padded with zeros to the longest (a padded
        position is never read by a real one: attention is causal). Keys and values are not
        merged: the merged run computes its own when an intervention first needs them."""
        n = max(p.hidden[0].shape[1] for p in passes)
        hidden = [
            torch.cat([torch.nn.functional.pad(p.hidden[i], (0, 0, 0, n - p.hidden[i].shape[1])) for p in passes])
            for i in range(len(passes[0].hidden))
        ]
        return Pass(hidden, torch.cat([p.last for p in passes]), torch.cat([p.top for p in passes]))


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


def resolve_site(site: str | None) -> str:
    """`site` checked against `SITES` (None: the declared default, the residual stream)."""
    return str(CAUSAL_OPTIONS.only("site").resolve(site=site)["site"])


def site_width(model: DecomposedModel, layer: int, site: str | None = None) -> int:
    """How many values a featurizer at `site` of `layer` reads."""
    return model.mlp_width(layer) if resolve_site(site) == "mlp-neurons" else model.d_model


def site_states(model: DecomposedModel, run: Pass, layer: int, site: str | None = None) -> Tensor:
    """The vectors at `site` of `layer` at every position of `run` ``[B, T, width]``, in the
    model's precision."""
    site = resolve_site(site)
    if site == "residual":
        return run.hidden[layer + 1]
    with torch.no_grad():
        normed = model.mlp_input(layer, run.middle(model, layer))
        return normed if site == "mlp-input" else model.mlp_neurons(layer, normed)


def _written(model: DecomposedModel, layer: int, site: str, middle: Tensor | None, swapped: Tensor) -> Tensor:
    """The block's output at an intervened position from its `middle` residual and the
    `swapped` vectors at `site` (for the residual site, the swapped vectors themselves)."""
    if middle is None:
        return swapped
    neurons = model.mlp_neurons(layer, swapped) if site == "mlp-input" else swapped
    return middle + model.mlp_output(layer, neurons)


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
    *,
    site: str | None = None,
) -> Tensor:
    """The last position's logits ``[B, vocab]`` after the interchange of `featurizer` at
    `layer`'s `site` (`SITES`): each example's vector at ``base_positions[i]`` takes the
    source's features from ``source_positions[i]``. Differentiable in the featurizer's
    parameters."""
    return stacked_logits(model, base, source, layer, base_positions, source_positions, [featurizer], site=site)[0]


def stacked_logits(
    model: DecomposedModel,
    base: Pass,
    source: Pass,
    layer: int,
    base_positions: Tensor,
    source_positions: Tensor,
    featurizers: Sequence[Featurizer],
    *,
    site: str | None = None,
) -> Tensor:
    """`intervened_logits` of each of `featurizers` at the same unit, ``[k, B, vocab]``, in one
    run of the later blocks over the k interventions stacked as one batch of ``k * B`` rows
    (wider products: several featurizers cost less together than one after another)."""
    site = resolve_site(site)
    check_unit(model, layer, base_positions, base.last)
    check_unit(model, layer, source_positions, source.last)
    h = base.hidden[layer + 1]
    n, k = h.shape[0], len(featurizers)
    rows = torch.arange(n, device=h.device)
    # featurizers compute in float32 whatever the model's precision
    base_vectors, source_vectors = (
        site_states(model, base, layer, site)[rows, base_positions].float(),
        site_states(model, source, layer, site)[rows, source_positions].float(),
    )
    swapped = torch.cat([f.interchange(base_vectors, source_vectors) for f in featurizers]).to(h.dtype)
    middle = None if site == "residual" else base.middle(model, layer)[rows, base_positions].repeat(k, 1)
    swapped = _written(model, layer, site, middle, swapped)
    # each row runs again from its own intervened position to its last: its first position is
    # the intervened one (rows shorter than the longest run into padding no real position reads)
    span = int((base.last - base_positions).max()) + 1
    at = base_positions[:, None] + torch.arange(span, device=h.device)
    later_positions = torch.nn.functional.pad(h, (0, 0, 0, span))[rows[:, None], at[:, 1:]]
    x = torch.cat([swapped[:, None], later_positions.repeat(k, 1, 1)], dim=1)
    starts, n_past = base_positions.repeat(k), int(base_positions.max())
    kv = base.keys_values(model)
    for later in range(layer + 1, model.n_layers):
        keys, values = (t[:, :, :n_past].repeat(1, k, 1, 1) for t in kv[later])
        x = model.block(later, x, starts, past=(keys, values))
    return model.logits(x[torch.arange(k * n), (base.last - base_positions).repeat(k)]).float().view(k, n, -1)
