"""Methods that score every edge of the graph, and the faithfulness of the circuits they pick.

Every method returns one score per edge: the estimated drop of the task metric (logit
difference) when that edge alone is patched from the counterfactual run, averaged over the
examples. High scores are edges the behaviour needs, so the top signed scores make the CPR
circuits and the top absolute scores the CMD circuits (SPEC section 7).

- ``random``: a seeded standard normal per edge (MIB's baseline).
- ``eap``: attribution patching, ``-(cor_s - clean_s) . d metric / d input_r`` at the clean run,
  summed over positions.
- ``eap-ig-inputs``: the same with the gradient averaged over ``steps`` runs whose input
  embeddings are interpolated from the counterfactual to the clean ones, ``alpha = k / steps``
  for ``k = 0 .. steps - 1`` (EAP-IG's reference code).
- ``eap-ig-activations``: the gradient averaged over runs in which one node group at a time
  (the input, one layer's heads, one MLP) is interpolated from its counterfactual to its clean
  output, ``alpha = k / steps`` for ``k = 1 .. steps`` (the reference code's
  ``ig-activations``): ``(1 + 2 L) steps`` passes.
- ``exact``: every edge patched alone, the metric's drop measured: one pass per edge, for
  graphs small enough (`EXACT_EDGE_LIMIT`).

`faithfulness_metrics` evaluates a list of circuits: per batch one clean and one
counterfactual cache, then one patched pass per circuit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from neuroneval.circuits.results import CIRCUIT_METHODS, CIRCUIT_TRACK_OPTIONS
from neuroneval.errors import ParameterError, ShapeError

from .models import DecomposedModel
from .patching import Cache, mean_cache, run

__all__ = ["EXACT_EDGE_LIMIT", "METHODS", "Batch", "faithfulness_metrics", "mean_ablation_cache", "score_edges"]

Tensor = torch.Tensor

METHODS = CIRCUIT_METHODS
#: The largest graph `exact` scores (one patched pass per edge and batch).
EXACT_EDGE_LIMIT = 20_000


@dataclass(frozen=True)
class Batch:
    """Examples of one prompt length: clean and counterfactual token ids ``[B, T]``, and the
    clean and counterfactual answers' token ids ``[B]``."""

    clean: Tensor
    counterfactual: Tensor
    answer: Tensor
    foil: Tensor

    def __post_init__(self) -> None:
        if self.clean.dim() != 2 or self.clean.shape != self.counterfactual.shape:
            raise ShapeError(
                f"clean and counterfactual token ids must be [B, T] of one shape; got {tuple(self.clean.shape)} and {tuple(self.counterfactual.shape)}"
            )
        b = self.clean.shape[0]
        if self.answer.shape != (b,) or self.foil.shape != (b,):
            raise ShapeError(
                f"answers must be one token id per example ({b}); got {tuple(self.answer.shape)}, {tuple(self.foil.shape)}"
            )

    def __len__(self) -> int:
        return int(self.clean.shape[0])


Replacements = dict[int, Tensor | Callable[[Tensor], Tensor]]
Passes = Callable[[Batch, Cache, Cache], Iterable[Replacements]]


def _grads_and_difference(model: DecomposedModel, batch: Batch, passes: Passes) -> tuple[list[Tensor], Tensor, int]:
    """The receiver-input gradients of the summed metric, summed over one pass per replacement
    dict that `passes` yields, with the counterfactual-minus-clean sender outputs ``[S, B, T, d]``."""
    with torch.no_grad():
        clean = run(model, batch.clean, batch.answer, batch.foil, keep=True).cache
        cor = run(model, batch.counterfactual, batch.answer, batch.foil, keep=True).cache
    assert clean is not None and cor is not None
    total: list[Tensor] | None = None
    count = 0
    for given in passes(batch, clean, cor):
        # the input node's output is a fresh leaf unless replaced, so gradients exist even when
        # the model's parameters are frozen
        replace: Replacements = {0: lambda e: e.detach().requires_grad_(True), **given}
        result = run(model, batch.clean, batch.answer, batch.foil, replace=replace, split_inputs=True)
        grads = torch.autograd.grad(result.metric.sum(), result.inputs, allow_unused=True)
        with torch.no_grad():
            grads_list = result.input_gradients(model, grads)
        total = grads_list if total is None else [t + g for t, g in zip(total, grads_list, strict=True)]
        count += 1
    assert total is not None
    return total, cor.outputs - clean.outputs, count


def _edge_products(model: DecomposedModel, grads: Sequence[Tensor], difference: Tensor) -> Tensor:
    """``sum over examples and positions of difference_s . grad_r`` for every edge (s, r)."""
    lay, h = model.layout, model.n_heads
    scores = torch.zeros(model.graph.n_edges, dtype=torch.float64)
    flat = difference.reshape(difference.shape[0], -1)
    g = iter(grads)
    for layer in range(model.n_layers):
        u = lay.heads_upstream(layer)
        q, k, v = next(g), next(g), next(g)
        qkv = torch.stack([q, k, v], dim=1).reshape(3 * h, -1)  # rows in (head, slot) order
        s = lay.heads_start[layer]
        scores[s : s + 3 * h * u] = (qkv @ flat[:u].T).reshape(-1).double()
        u = lay.mlp_upstream(layer)
        s = lay.mlp_start[layer]
        scores[s : s + u] = (next(g).reshape(1, -1) @ flat[:u].T).reshape(-1).double()
    u = lay.n_senders
    scores[lay.logits_start :] = (next(g).reshape(1, -1) @ flat[:u].T).reshape(-1).double()
    return scores


def _gradient_scores(model: DecomposedModel, batches: Sequence[Batch], passes: Passes) -> np.ndarray:
    total = torch.zeros(model.graph.n_edges, dtype=torch.float64)
    n = 0
    for batch in batches:
        grads, difference, count = _grads_and_difference(model, batch, passes)
        with torch.no_grad():
            total += _edge_products(model, grads, difference) / count
        n += len(batch)
    return (-total / n).numpy()


def _ig_input_passes(steps: int) -> Passes:
    def passes(batch: Batch, clean: Cache, cor: Cache) -> Iterable[Replacements]:
        c, r = clean.outputs[0], cor.outputs[0]
        for k in range(steps):
            yield {0: (r + (k / steps) * (c - r)).requires_grad_(True)}

    return passes


def _ig_activation_passes(model: DecomposedModel, steps: int) -> Passes:
    lay, h = model.layout, model.n_heads
    # (node, its senders' rows, whether it is a layer's heads: their outputs are [H, B, T, d])
    groups = [(0, slice(0, 1), False)]
    for layer in range(model.n_layers):
        first, mlp = lay.first_head(layer), lay.mlp_node(layer)
        groups += [(first, slice(first, first + h), True), (mlp, slice(mlp, mlp + 1), False)]

    def passes(batch: Batch, clean: Cache, cor: Cache) -> Iterable[Replacements]:
        for node, rows, heads in groups:
            c, r = clean.outputs[rows], cor.outputs[rows]
            for k in range(1, steps + 1):
                value = k / steps * c + (1 - k / steps) * r
                yield {node: value if heads else value[0]}

    return passes


def _exact_scores(model: DecomposedModel, batches: Sequence[Batch]) -> np.ndarray:
    e = model.graph.n_edges
    if e > EXACT_EDGE_LIMIT:
        raise ParameterError(
            f"exact patching runs one pass per edge: {e} edges is over the limit of {EXACT_EDGE_LIMIT}"
        )
    drop = np.zeros(e)
    n = 0
    with torch.no_grad():
        for batch in batches:
            clean = run(model, batch.clean, batch.answer, batch.foil).metric.double().sum()
            cor = run(model, batch.counterfactual, batch.answer, batch.foil, keep=True).cache
            circuit = torch.ones(e, dtype=torch.bool)
            for edge in range(e):
                circuit[edge] = False
                patched = run(model, batch.clean, batch.answer, batch.foil, circuit=circuit, corrupt=cor).metric
                drop[edge] += float(clean - patched.double().sum())
                circuit[edge] = True
            n += len(batch)
    return drop / n


_SCORE_EDGES_OPTIONS = CIRCUIT_TRACK_OPTIONS.only("steps", "seed")


def score_edges(
    model: DecomposedModel, batches: Sequence[Batch], method: str, *, steps: int | None = None, seed: int | None = None
) -> np.ndarray:
    """One score per edge of ``model.graph`` (float64 ``[E]``) by `method` (one of `METHODS`),
    averaged over the examples of `batches`. `steps` (the integration steps of the EAP-IG
    methods) and `seed` (the random method's): defaults as `CIRCUIT_TRACK_OPTIONS` declares.

    Raises
    ------
    ParameterError
        An unknown method, steps below 1, or `exact` on a graph over `EXACT_EDGE_LIMIT` edges.
    """
    if method not in METHODS:
        raise ParameterError(f"unknown circuit method {method!r}; choose one of {', '.join(METHODS)}")
    values = _SCORE_EDGES_OPTIONS.resolve(steps=steps, seed=seed)
    n_steps: int = values["steps"]
    if not batches:
        raise ShapeError("scoring edges needs at least one batch of examples")
    if method == "random":
        return np.random.default_rng(values["seed"]).standard_normal(model.graph.n_edges)
    if method == "exact":
        return _exact_scores(model, batches)
    if method == "eap":
        return _gradient_scores(model, batches, lambda batch, clean, cor: [{}])
    if method == "eap-ig-inputs":
        return _gradient_scores(model, batches, _ig_input_passes(n_steps))
    return _gradient_scores(model, batches, _ig_activation_passes(model, n_steps))


def mean_ablation_cache(model: DecomposedModel, batches: Sequence[Batch]) -> Cache:
    """The mean-ablation cache: every sender's output averaged over all positions of the clean
    prompts of `batches`."""
    total: Tensor | None = None
    count = 0
    with torch.no_grad():
        for batch in batches:
            cache = run(model, batch.clean, batch.answer, batch.foil, keep=True).cache
            assert cache is not None
            s = cache.outputs.sum(dim=(1, 2))
            total = s if total is None else total + s
            count += batch.clean.numel()
    assert total is not None
    return mean_cache(total, count)


def faithfulness_metrics(
    model: DecomposedModel,
    batches: Sequence[Batch],
    circuits: Sequence[Tensor],
    *,
    means: Cache | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, float, float]:
    """The dataset-mean metric under each circuit (float64 ``[C]``), and under the full and the
    empty graph: (m(circuits), m(full), m(empty)). Non-circuit edges read the counterfactual run,
    or `means` (mean ablation) when given. `progress` is called with each batch's size."""
    # identical circuits (methods agreeing, tiny fractions pruned to nothing) run once
    first: dict[bytes, int] = {}
    unique = [first.setdefault(c.numpy().tobytes(), i) for i, c in enumerate(circuits)]
    sums = np.zeros(len(circuits))
    full = empty = 0.0
    n = 0
    with torch.no_grad():
        for batch in batches:
            clean = run(model, batch.clean, batch.answer, batch.foil).metric
            if means is None:
                cor = run(model, batch.counterfactual, batch.answer, batch.foil, keep=True).cache
                assert cor is not None and cor.metric is not None
                corrupt, empty_metric = cor, cor.metric
            else:
                corrupt = means
                none = torch.zeros(model.graph.n_edges, dtype=torch.bool)
                empty_metric = run(model, batch.clean, batch.answer, batch.foil, circuit=none, corrupt=means).metric
            full += float(clean.double().sum())
            empty += float(empty_metric.double().sum())
            here = np.zeros(len(circuits))
            for i, circuit in enumerate(circuits):
                if unique[i] != i:
                    here[i] = here[unique[i]]
                elif bool(circuit.all()):
                    here[i] = float(clean.double().sum())
                elif means is None and not bool(circuit.any()):
                    here[i] = float(empty_metric.double().sum())
                else:
                    here[i] = float(
                        run(model, batch.clean, batch.answer, batch.foil, circuit=circuit, corrupt=corrupt)
                        .metric.double()
                        .sum()
                    )
            sums += here
            n += len(batch)
            if progress is not None:
                progress(len(batch))
    return sums / n, full / n, empty / n
