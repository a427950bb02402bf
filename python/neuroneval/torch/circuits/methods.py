"""Methods that score every edge of the graph, and the faithfulness of the circuits they pick.

Every method returns one score per edge: the estimated drop of the task metric (logit
difference) when that edge alone is patched from the counterfactual run, averaged over the
examples (IFR: the share of the receiver's input the sender makes up). High scores are edges the
behaviour needs, so the top signed scores make the CPR circuits and the top absolute scores the
CMD circuits (SPEC section 7).

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

- ``ifr``: information flow routes (Ferrando and Voita, 2024; EAP-IG's
  ``information-flow-routes``), from the clean run alone: at each position a receiver's input x
  is the sum of its senders' outputs, sender s's proximity ``max(0, |x|_1 - |x - out_s|_1)``,
  its importance the proximity over the sum of the receiver's senders'; averaged over positions
  and examples. Every head of a layer (query, key, value) reads the same x, so shares its scores.

- ``ugs``: uniform gradient sampling (Li and Janson, 2024; the script MIB's README points to,
  ``edge_pruning_unif_mib.py`` of alestolfo/optimalablation): a logit ``theta_e`` per edge,
  ``alpha = sigmoid(theta)``; each step draws a mask per example and edge,
  ``m = clamp(0.5 + (alpha - u) / w, 0, 1)`` with ``u ~ U(0, 1)`` and ``w = alpha (1 - alpha)``
  (so ``m`` is 1 or 0 but for a window around alpha, where its gradient is that of alpha),
  drops each example's dangling edges (`prune` of ``m > 0``), runs the model with every edge
  (s, r) reading ``m cur_s + (1 - m) cor_s`` (`masked_logits`) and takes an AdamW step on the
  KL divergence of its last-position distribution from the clean model's plus
  ``sparsity * sum(alpha)``, `UGS_BATCH` examples a step. The score is alpha.

`score_nodes` scores nodes (`NODE_METHODS`):

- ``nap``: node attribution patching, ``-(cor_s - clean_s) . d metric / d output_s`` at the clean
  run, summed over positions. A node's output reaches every receiver downstream additively, so
  its gradient is the sum of theirs and its score the sum of its outgoing edges' EAP scores:
  one EAP pass gives both.

`faithfulness_metrics` evaluates a list of circuits: per batch one clean and one
counterfactual cache, then one patched pass per circuit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from neuroneval.circuits.graph import Graph, prune
from neuroneval.circuits.results import CIRCUIT_METHODS, CIRCUIT_TRACK_OPTIONS, NODE_METHODS
from neuroneval.errors import ParameterError, ShapeError

from .models import DecomposedModel, summing_dtype
from .patching import Cache, masked_logits, mean_cache, run

__all__ = [
    "EXACT_EDGE_LIMIT",
    "METHODS",
    "Batch",
    "faithfulness_metrics",
    "mean_ablation_cache",
    "method_passes",
    "score_edges",
    "score_nodes",
]

Tensor = torch.Tensor

METHODS = CIRCUIT_METHODS
#: The largest graph `exact` scores (one patched pass per edge and batch).
EXACT_EDGE_LIMIT = 20_000
#: How many examples one gradient pass of the integrated-gradient methods holds: their steps run
#: side by side, as copies of the batch, up to this many (bfloat16 products run faster on more
#: rows; the gradients are the same sums).
STACKED_EXAMPLES = 80


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


Tick = Callable[[], None]


def _grads_and_difference(
    model: DecomposedModel, batch: Batch, passes: Passes, on_pass: Tick | None
) -> tuple[list[Tensor], Tensor, int]:
    """The receiver-input gradients of the summed metric, summed over one pass per replacement
    dict that `passes` yields, with the counterfactual-minus-clean sender outputs ``[S, B, T, d]``;
    `on_pass` is called after each pass."""
    with torch.no_grad():
        clean = run(model, batch.clean, batch.answer, batch.foil, keep=True).cache
        cor = run(model, batch.counterfactual, batch.answer, batch.foil, keep=True).cache
    assert clean is not None and cor is not None
    total: list[Tensor] | None = None
    count = 0
    for group in _stacks(passes(batch, clean, cor), max(1, STACKED_EXAMPLES // len(batch))):
        k = len(group)
        # the input node's output is a fresh leaf unless replaced, so gradients exist even when
        # the model's parameters are frozen
        replace: Replacements = {0: lambda e: e.detach().requires_grad_(True), **_stacked(group)}
        tokens, answer, foil = batch.clean.repeat(k, 1), batch.answer.repeat(k), batch.foil.repeat(k)
        result = run(model, tokens, answer, foil, replace=replace, split_inputs=True)
        grads = torch.autograd.grad(result.metric.sum(), result.inputs, allow_unused=True)
        with torch.no_grad():
            # the k copies' gradients summed: as k passes would have added them
            grads_list = [_unstack_sum(g, k) for g in result.input_gradients(model, grads)]
            if total is None:  # summed in float32 at least, whatever the model's precision
                total = [g.to(summing_dtype(g.dtype)) for g in grads_list]
            else:
                for t, g in zip(total, grads_list, strict=True):
                    t.add_(g)
        count += k
        if on_pass is not None:
            for _ in range(k):
                on_pass()
    assert total is not None
    return total, cor.outputs - clean.outputs, count


def _stacks(passes: Iterable[Replacements], most: int) -> Iterator[list[Replacements]]:
    """`passes` in groups of up to `most` consecutive ones that replace the same nodes with
    tensors, each group run as one pass over copies of the batch."""
    group: list[Replacements] = []
    for given in passes:
        if group and (
            len(group) == most or given.keys() != group[0].keys() or any(callable(v) for v in given.values())
        ):
            yield group
            group = []
        group.append(given)
    if group:
        yield group


def _stacked(group: list[Replacements]) -> Replacements:
    """A group's replacements side by side on the batch axis (``[B, T, d]``: axis 0; a layer's
    heads ``[H, B, T, d]``: axis 1)."""
    if len(group) == 1:
        return group[0]
    out: Replacements = {}
    for node, first in group[0].items():
        values = [g[node] for g in group]
        out[node] = torch.cat(values, dim=1 if first.dim() == 4 else 0)  # type: ignore[union-attr, arg-type]
    return out


def _unstack_sum(g: Tensor, k: int) -> Tensor:
    """A gradient over k copies of the batch, summed over the copies."""
    if k == 1:
        return g
    axis = 1 if g.dim() == 4 else 0
    copies = g.unflatten(axis, (k, g.shape[axis] // k)).unbind(axis)
    total: Tensor = copies[0].to(summing_dtype(g.dtype), copy=True)
    for c in copies[1:]:  # elementwise adds: a reduction over a middle axis with a dtype is far slower
        total.add_(c)
    return total


def _edge_products(model: DecomposedModel, grads: Sequence[Tensor], difference: Tensor) -> Tensor:
    """``sum over examples and positions of difference_s . grad_r`` for every edge (s, r)."""
    lay, h = model.layout, model.n_heads
    scores = torch.zeros(model.graph.n_edges, dtype=torch.float64)
    wide = summing_dtype(difference.dtype)
    flat = difference.reshape(difference.shape[0], -1).to(wide)
    grads = [g.to(wide) for g in grads]
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


def _gradient_scores(
    model: DecomposedModel, batches: Sequence[Batch], passes: Passes, on_pass: Tick | None = None
) -> np.ndarray:
    total = torch.zeros(model.graph.n_edges, dtype=torch.float64)
    n = 0
    for batch in batches:
        grads, difference, count = _grads_and_difference(model, batch, passes, on_pass)
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


def _route_importance(outputs: Tensor, x: Tensor) -> Tensor:
    """Each of the senders' ``outputs`` ``[u, B, T, d]`` importance to the input they sum to,
    ``x`` ``[B, T, d]``: proximity over its sum, per position (0 where every proximity is 0),
    averaged over positions and summed over examples: ``[u]``."""
    proximity = (x.abs().sum(-1) - (x - outputs).abs().sum(-1)).clamp(min=0)
    total = proximity.sum(0, keepdim=True)
    importance = torch.where(total > 0, proximity / total.clamp(min=torch.finfo(total.dtype).tiny), 0.0)
    return importance.mean(2).sum(1).double()


def _ifr_scores(model: DecomposedModel, batches: Sequence[Batch], on_pass: Tick | None = None) -> np.ndarray:
    lay, h = model.layout, model.n_heads
    total = torch.zeros(model.graph.n_edges, dtype=torch.float64)
    n = 0
    with torch.no_grad():
        for batch in batches:
            cache = run(model, batch.clean, batch.answer, batch.foil, keep=True).cache
            assert cache is not None
            out, inputs = cache.outputs, cache.residuals  # a receiver reading u senders reads residuals[u]
            for layer in range(model.n_layers):
                u = lay.heads_upstream(layer)
                s = _route_importance(out[:u], inputs[u])
                total[lay.heads_start[layer] : lay.heads_start[layer] + 3 * h * u] += s.repeat(3 * h)
                u = lay.mlp_upstream(layer)
                total[lay.mlp_start[layer] : lay.mlp_start[layer] + u] += _route_importance(out[:u], inputs[u])
            total[lay.logits_start :] += _route_importance(out, inputs[lay.n_senders])
            n += len(batch)
            if on_pass is not None:
                on_pass()
    return (total / n).numpy()


def _ugs_rate(sparsity: float) -> float:
    """The learning rate the UGS script picks for counterfactual patching: its rate for the
    sparsity weight, divided by 5."""
    rate = 1.5e-1 if sparsity <= 1e-4 else 1e-1 if sparsity <= 5e-4 else 5e-2
    return rate / 5


def _ugs_masks(theta: Tensor, n: int, generator: torch.Generator, graph: Graph) -> Tensor:
    """`n` masks ``[n, E]`` drawn in UGS's uniform window, each example's dangling edges dropped."""
    alpha = torch.sigmoid(theta)
    window = (alpha * (1 - alpha)).detach()
    # alpha's value with its gradient scaled by the window: m's gradient in the window is alpha's
    scaled = window * alpha - (window - 1) * alpha.detach()
    u = torch.rand((n, theta.shape[0]), generator=generator, dtype=theta.dtype)
    masks = 1 - ((u - scaled) / window + 0.5).clamp(0, 1)
    with torch.no_grad():
        alive = torch.from_numpy(np.stack([prune(graph, (m > 0).numpy()) for m in masks]))
    return masks * alive


#: Examples per UGS step (the UGS script's batch size).
UGS_BATCH = 5


def _ugs_scores(
    model: DecomposedModel,
    batches: Sequence[Batch],
    *,
    steps: int,
    sparsity: float,
    seed: int,
    on_pass: Tick | None = None,
    on_step: Callable[[float], None] | None = None,
) -> np.ndarray:
    """UGS's alpha per edge after `steps` AdamW steps, each on `UGS_BATCH` examples of
    `batches` in turn (`on_step` gets each step's objective)."""
    theta = torch.ones(model.graph.n_edges, dtype=torch.float32, requires_grad=True)  # the script's start
    optimizer = torch.optim.AdamW([theta], lr=_ugs_rate(sparsity), weight_decay=0.0, betas=(0.9, 0.995))
    generator = torch.Generator().manual_seed(seed)
    parts = []
    with torch.no_grad():
        for batch in batches:
            for at in range(0, len(batch), UGS_BATCH):
                part = Batch(
                    *(t[at : at + UGS_BATCH] for t in (batch.clean, batch.counterfactual, batch.answer, batch.foil))
                )
                clean = run(model, part.clean, part.answer, part.foil).logits_input
                cor = run(model, part.counterfactual, part.answer, part.foil, keep=True).cache
                assert clean is not None and cor is not None
                parts.append((part, torch.log_softmax(model.logits(clean[:, -1]).float(), -1), cor))
    for step in range(steps):
        part, target, cor = parts[step % len(parts)]
        masks = _ugs_masks(theta, len(part), generator, model.graph)
        pruned = torch.log_softmax(masked_logits(model, part.clean, masks.to(cor.outputs.dtype), cor).float(), -1)
        kl = (target.exp() * (target - pruned)).sum(-1).mean()
        objective = kl + sparsity * torch.sigmoid(theta).sum()
        optimizer.zero_grad()
        objective.backward()
        torch.nn.utils.clip_grad_norm_([theta], max_norm=5.0)
        optimizer.step()
        if on_step is not None:
            on_step(float(objective.detach()))
        if on_pass is not None:
            on_pass()
    return torch.sigmoid(theta).detach().double().numpy()


def _exact_scores(model: DecomposedModel, batches: Sequence[Batch], on_pass: Tick | None = None) -> np.ndarray:
    e = model.graph.n_edges
    if e > EXACT_EDGE_LIMIT:
        raise ParameterError(
            f"exact patching runs one pass per edge: {e} edges is over the limit of {EXACT_EDGE_LIMIT}"
        )
    drop = np.zeros(e)
    n = 0
    with torch.no_grad():
        for batch in batches:
            clean_run = run(model, batch.clean, batch.answer, batch.foil, keep=True)
            clean = clean_run.metric.double().sum()
            cor = run(model, batch.counterfactual, batch.answer, batch.foil, keep=True).cache
            circuit = torch.ones(e, dtype=torch.bool)
            for edge in range(e):
                circuit[edge] = False
                # the layers before the edge's receiver are the clean run's
                patched = run(
                    model, batch.clean, batch.answer, batch.foil, circuit=circuit, corrupt=cor, clean=clean_run.cache
                ).metric
                drop[edge] += float(clean - patched.double().sum())
                circuit[edge] = True
                if on_pass is not None:
                    on_pass()
            n += len(batch)
    return drop / n


_SCORE_EDGES_OPTIONS = CIRCUIT_TRACK_OPTIONS.only("steps", "seed", "ugs_sparsity")


def method_passes(model: DecomposedModel, method: str, steps: int, n_batches: int) -> int:
    """The passes `method` runs over `n_batches` batches (what `on_pass` counts): none for
    ``random``, per batch one per edge for ``exact``, ``steps`` for EAP-IG on inputs,
    ``(1 + 2L) steps`` on activations, one for EAP, NAP and IFR; ``steps`` in all for UGS."""
    per_batch = {"random": 0, "exact": model.graph.n_edges, "eap-ig-inputs": steps}
    if method == "ugs":
        return steps
    if method == "eap-ig-activations":
        return n_batches * (1 + 2 * model.n_layers) * steps
    return n_batches * per_batch.get(method, 1)


def score_edges(
    model: DecomposedModel,
    batches: Sequence[Batch],
    method: str,
    *,
    steps: int | None = None,
    seed: int | None = None,
    ugs_sparsity: float | None = None,
    on_pass: Tick | None = None,
) -> np.ndarray:
    """One score per edge of ``model.graph`` (float64 ``[E]``) by `method` (one of `METHODS`),
    averaged over the examples of `batches`. `steps` (the integration steps of the EAP-IG
    methods; UGS's steps in all), `seed` (the random method's and UGS's draws) and
    `ugs_sparsity`: defaults as `CIRCUIT_TRACK_OPTIONS` declares. `on_pass` is called after each
    of the method's passes (`method_passes`).

    Raises
    ------
    ParameterError
        An unknown method, steps below 1, or `exact` on a graph over `EXACT_EDGE_LIMIT` edges.
    """
    if method not in METHODS or method in NODE_METHODS:
        edge_methods = [m for m in METHODS if m not in NODE_METHODS]
        raise ParameterError(f"unknown edge-scoring method {method!r}; choose one of {', '.join(edge_methods)}")
    values = _SCORE_EDGES_OPTIONS.resolve(steps=steps, seed=seed, ugs_sparsity=ugs_sparsity)
    n_steps: int = values["steps"]
    if not batches:
        raise ShapeError("scoring edges needs at least one batch of examples")
    if method == "random":
        return np.random.default_rng(values["seed"]).standard_normal(model.graph.n_edges)
    if method == "exact":
        return _exact_scores(model, batches, on_pass)
    if method == "ifr":
        return _ifr_scores(model, batches, on_pass)
    if method == "ugs":
        return _ugs_scores(
            model,
            batches,
            steps=n_steps * len(batches),
            sparsity=values["ugs_sparsity"],
            seed=values["seed"],
            on_pass=on_pass,
        )
    if method == "eap":
        return _gradient_scores(model, batches, lambda batch, clean, cor: [{}], on_pass)
    if method == "eap-ig-inputs":
        return _gradient_scores(model, batches, _ig_input_passes(n_steps), on_pass)
    return _gradient_scores(model, batches, _ig_activation_passes(model, n_steps), on_pass)


def score_nodes(
    model: DecomposedModel, batches: Sequence[Batch], method: str, *, on_pass: Tick | None = None
) -> np.ndarray:
    """One score per node but the logits (float64 ``[N - 1]``, node order) by a node-level
    `method` (`NODE_METHODS`), averaged over the examples of `batches`; `on_pass` as
    `score_edges` calls it.

    Raises
    ------
    ParameterError
        A method that does not score nodes.
    """
    if method not in NODE_METHODS:
        raise ParameterError(f"unknown node-scoring method {method!r}; choose one of {', '.join(NODE_METHODS)}")
    if not batches:
        raise ShapeError("scoring nodes needs at least one batch of examples")
    edges = _gradient_scores(model, batches, lambda batch, clean, cor: [{}], on_pass)
    graph = model.graph
    return np.bincount(graph.senders, weights=edges, minlength=graph.n_nodes)[:-1]


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
