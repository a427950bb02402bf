"""Edge patching: run a model with a circuit, every other edge fed from a counterfactual run.

SPEC section 7: a circuit's edges keep their sender's activation in the running model; every
other edge gets the sender's activation on the counterfactual input (or its dataset mean). A
receiver's input is therefore

    input_r = sum_s cor_s + sum_{s in circuit(r)} (cur_s - cor_s)
            = sum_s cur_s - sum_{s not in circuit(r)} (cur_s - cor_s)

with ``cur_s`` the sender's output in this (patched) run and ``cor_s`` its counterfactual one.
`run` computes every receiver of a layer at once from whichever form has fewer senders to
correct, for all examples of a batch in one pass: a full circuit is the clean run and an empty
one the counterfactual run, to the bit.

`Cache` holds one unpatched run's sender outputs and residual sums; `faithfulness_metrics`
evaluates any number of circuits from one clean and one counterfactual cache per batch.

Examples
--------
>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> from neuroneval.torch.circuits import decompose
>>> _ = torch.manual_seed(0)
>>> config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
...                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
>>> model = decompose(LlamaForCausalLM(config).eval())
>>> clean, cf = torch.randint(0, 50, (3, 6)), torch.randint(0, 50, (3, 6))
>>> answer, foil = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
>>> corrupt = run(model, cf, answer, foil, keep=True).cache
>>> empty = torch.zeros(model.graph.n_edges, dtype=torch.bool)
>>> bool((run(model, clean, answer, foil, circuit=empty, corrupt=corrupt).metric == corrupt.metric).all())
True
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from neuroneval.errors import ShapeError
from neuroneval.options import Option, Options

from .models import DecomposedModel, Layout
from .patched import Cache, patched_metric

__all__ = ["RUN_OPTIONS", "Cache", "RunResult", "masked_logits", "mean_cache", "run"]

#: The option of `run`: whether it returns the run's `Cache`.
RUN_OPTIONS = Options(Option("keep", "flag", False, "return the run's cache"))

Tensor = torch.Tensor


@dataclass
class RunResult:
    """`run`'s result: the logit difference per example, the cache when kept, and the receiver
    inputs (for gradients) when asked for."""

    metric: Tensor
    cache: Cache | None = None
    inputs: list[Tensor] = field(default_factory=list)
    logits_input: Tensor | None = None
    head_inputs: list[Tensor] = field(default_factory=list)

    def input_gradients(self, model: DecomposedModel, grads: Sequence[Tensor | None]) -> list[Tensor]:
        """The receivers' input gradients in edge-layout order (per layer the heads' query, key
        and value inputs ``[H, B, T, d]`` each and the MLP's ``[B, T, d]``; last the logits'),
        from ``torch.autograd.grad(metric, inputs)``."""
        g = [torch.zeros_like(x) if d is None else d for d, x in zip(grads, self.inputs, strict=True)]
        out: list[Tensor] = []
        for layer in range(model.n_layers):
            q, k, v, mlp = g[4 * layer : 4 * layer + 4]
            out += model.input_gradients(layer, self.head_inputs[layer], [q, k, v])
            out.append(mlp)
        out.append(g[-1])
        return out


def _mix(rows: Tensor | None, u: int, outs: Sequence[Tensor], current: Tensor, corrupt: Cache | None) -> Tensor:
    """The inputs of receivers reading senders ``0..u-1`` with circuit rows ``rows`` (``[J, u]``
    bool): ``[J, B, T, d]``, or the shared ``[B, T, d]`` residual when every receiver reads the
    same one. Circuit runs with gradients only (training with a circuit): the others are
    `patched.patched_metric`'s."""
    if corrupt is None or rows is None:
        return current
    inside, outside = rows.any(0), (~rows).any(0)
    n_in, n_out = int(inside.sum()), int(outside.sum())
    if n_out == 0:
        return current
    base = corrupt.residuals[u].expand_as(current)
    if n_in == 0:
        return base
    if n_in <= n_out:
        used, coef = inside, rows.to(current.dtype)
    else:
        base, used, coef = current, outside, -(~rows).to(current.dtype)
    cols = used.nonzero().flatten()
    picked = torch.stack([outs[int(c)] for c in cols]) - corrupt.outputs[cols]
    mixed = coef[:, cols] @ picked.reshape(picked.shape[0], -1)
    return base + mixed.reshape(coef.shape[0], *current.shape)


def _differentiable(x: Tensor) -> Tensor:
    """`x` itself when gradients reach it; else a leaf that takes them (its senders are constants
    of this pass, e.g. a replaced node's)."""
    return x if x.requires_grad else x.detach().requires_grad_(True)


def run(
    model: DecomposedModel,
    tokens: Tensor,
    answer: Tensor,
    foil: Tensor,
    *,
    circuit: Tensor | None = None,
    corrupt: Cache | None = None,
    replace: dict[int, Tensor | Callable[[Tensor], Tensor]] | None = None,
    keep: bool | None = None,
    split_inputs: bool = False,
    clean: Cache | None = None,
) -> RunResult:
    """One forward pass of `model` on `tokens` (``[B, T]``), its metric logit(answer) - logit(foil)
    at the last position.

    Parameters
    ----------
    circuit : torch.Tensor of bool, shape (E,), optional
        The circuit's edges; every other edge reads the sender's output in `corrupt`. ``None``:
        the unpatched model.
    corrupt : Cache, optional
        The counterfactual run (or the means); needed with `circuit`.
    replace : dict, optional
        Sender outputs to override, keyed by node index (0: the input; a layer's first head: all
        its heads, ``[H, B, T, d]``; an MLP node): a tensor, or a function of the computed output.
    keep : bool, optional
        Return the run's `Cache` (default: see `RUN_OPTIONS`).
    split_inputs : bool
        Keep, in `RunResult.inputs`, the tensors whose gradients give every receiver's input
        gradient (`RunResult.input_gradients`): per layer the heads' query, key and value
        projections and the MLP's input, last the logits' input. Unpatched runs only.
    clean : Cache, optional
        The unpatched run of the same `tokens` (``keep=True``), for a circuit run: every receiver
        before the first one the circuit patches reads the clean run, so the pass starts there
        from `clean`'s outputs (a circuit that leaves out one late edge costs the layers after
        it only). Not with `replace` or `keep`.
    """
    keep_: bool = RUN_OPTIONS.resolve(keep=keep)["keep"]
    layout = model.layout
    if circuit is not None:
        if split_inputs:
            raise ShapeError("receiver gradients are taken on unpatched runs only (split_inputs without a circuit)")
        if corrupt is None:
            raise ShapeError("a circuit run needs the counterfactual cache (corrupt=)")
        if circuit.shape != (model.graph.n_edges,) or circuit.dtype != torch.bool:
            raise ShapeError(
                f"the circuit must be a bool tensor of {model.graph.n_edges} edges; got {tuple(circuit.shape)} {circuit.dtype}"
            )
    if (
        circuit is not None
        and corrupt is not None
        and not (replace or keep_ or torch.is_grad_enabled())
        and not bool(circuit.all())  # a full circuit is the clean run's arithmetic, to the bit
    ):
        start = None
        if clean is not None:
            stage, prefix = _first_patched(layout, circuit)
            start = (stage, prefix, clean)
        metric, logits_in = patched_metric(model, tokens, answer, foil, circuit, corrupt, start)
        return RunResult(metric, None, [], logits_in, [])
    h = model.n_heads
    replace = replace or {}
    # a sender without circuit edges is read by no receiver as itself: it takes its
    # counterfactual output, which nothing needs to compute
    needed = None
    if circuit is not None:
        needed = torch.zeros(model.graph.n_nodes, dtype=torch.bool)
        needed[model.senders[circuit]] = True

    def override(node: int, value: Tensor) -> Tensor:
        r = replace.get(node)
        if r is None:
            return value
        return r(value) if callable(r) else r

    outs: list[Tensor] = []
    residuals: dict[int, Tensor] = {}
    inputs: list[Tensor] = []
    shared_inputs: list[Tensor] = []
    stage = 0
    if clean is not None:
        if circuit is None or corrupt is None or replace or keep_ or split_inputs:
            raise ShapeError("a run from the clean cache (clean=) takes a circuit and its corrupt cache only")
        stage, prefix = _first_patched(layout, circuit)
        outs = list(clean.outputs[:prefix].unbind(0))
        current = clean.residuals[prefix]
    else:
        outs.append(override(0, model.embed(tokens)))
        current = outs[0]
    for layer in range(stage // 2, model.n_layers):
        if stage != 2 * layer + 1:  # else the heads read the clean run: theirs are in `outs` already
            u = layout.heads_upstream(layer)
            residuals[u] = current
            rows = None
            if circuit is not None:
                s = layout.heads_start[layer]
                rows = circuit[s : s + 3 * h * u].reshape(3 * h, u)
            mixed = _mix(rows, u, outs, current, corrupt)
            capture: list[Tensor] | None = None
            if mixed.dim() == 4:
                per = mixed.reshape(h, 3, *mixed.shape[1:])
                q_in, k_in, v_in = per[:, 0], per[:, 1], per[:, 2]
            else:
                if split_inputs:
                    mixed = _differentiable(mixed)
                    capture = []
                q_in = k_in = v_in = mixed
            first = layout.first_head(layer)
            if needed is not None and corrupt is not None and not bool(needed[first : first + h].any()):
                head_out = corrupt.outputs[first : first + h].expand(h, *current.shape)
            else:
                head_out = model.heads(layer, q_in, k_in, v_in, capture=capture)
            head_out = override(first, head_out)
            if split_inputs:
                assert capture is not None
                inputs += capture
                shared_inputs.append(mixed)
            outs.extend(head_out.unbind(0))
            current = current + head_out.sum(0)
        u = layout.mlp_upstream(layer)
        residuals[u] = current
        rows = None
        if circuit is not None:
            s = layout.mlp_start[layer]
            rows = circuit[s : s + u].reshape(1, u)
        mixed = _mix(rows, u, outs, current, corrupt)
        mlp_in = mixed.squeeze(0) if mixed.dim() == 4 else mixed
        if split_inputs:
            mlp_in = _differentiable(mlp_in.view(mlp_in.shape))
            inputs.append(mlp_in)
        node = layout.mlp_node(layer)
        if needed is not None and corrupt is not None and not bool(needed[node]):
            mlp_out = corrupt.outputs[node].expand_as(current)
        else:
            mlp_out = model.mlp(layer, mlp_in)
        mlp_out = override(node, mlp_out)
        outs.append(mlp_out)
        current = current + mlp_out
    u = layout.n_senders
    residuals[u] = current
    rows = None if circuit is None else circuit[layout.logits_start :].reshape(1, u)
    mixed = _mix(rows, u, outs, current, corrupt)
    logits_in = mixed.squeeze(0) if mixed.dim() == 4 else mixed
    if split_inputs:
        logits_in = _differentiable(logits_in.view(logits_in.shape))
        inputs.append(logits_in)
    metric = model.logit_difference(logits_in[:, -1], answer, foil)
    cache = Cache(torch.stack(outs), residuals, metric) if keep_ else None
    return RunResult(metric, cache, inputs, logits_in, shared_inputs)


def _first_patched(layout: Layout, circuit: Tensor) -> tuple[int, int]:
    """Where a circuit run first departs from the clean run: the stage of the first receiver
    with an edge outside `circuit` (``2 l``: layer l's heads, ``2 l + 1``: its MLP, ``2 L``:
    the logits, ``2 L + 1``: none) and the number of senders before it, all clean."""
    left_out = (~circuit).nonzero()
    if left_out.numel() == 0:
        return 2 * layout.n_layers + 1, layout.n_senders
    first = int(left_out[0, 0])
    if first >= layout.logits_start:
        return 2 * layout.n_layers, layout.n_senders
    layer = bisect.bisect_right(layout.heads_start, first) - 1
    if first < layout.mlp_start[layer]:
        return 2 * layer, layout.heads_upstream(layer)
    return 2 * layer + 1, layout.mlp_upstream(layer)


class _SoftMix(torch.autograd.Function):
    """``base + masks @ senders`` per example (``masks`` ``[B, J, u]``, ``base`` ``[B, 1, n]``,
    ``senders`` ``[B, u, n]``, a view of the buffer the senders' outputs are written into as the
    pass computes them): no copy of the senders is made per receiver, and autograd holds only
    the view. `blocks` are the same outputs as the graph computed them (``[B, k, n]`` each, in
    order): the gradient reaching the view is passed on to them."""

    @staticmethod
    def forward(ctx: Any, masks: Tensor, base: Tensor, senders: Tensor, *blocks: Tensor) -> Tensor:
        ctx.save_for_backward(masks)
        ctx.senders = senders
        ctx.sizes = [blk.shape[1] for blk in blocks]
        return torch.baddbmm(base, masks, senders)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        (masks,) = ctx.saved_tensors
        grad_masks = torch.bmm(grad, ctx.senders.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        grad_blocks = torch.bmm(masks.transpose(1, 2), grad).split(ctx.sizes, dim=1)
        return (grad_masks, grad.sum(1, keepdim=True), None, *grad_blocks)


class _Senders:
    """The senders' ``cur - cor`` of a masked pass: the graph's own tensors (`blocks`, each
    ``[B, k, T, d]``) and a copy of them side by side in one buffer ``[B, S, T, d]`` that every
    receiver reads a prefix of."""

    def __init__(self, b: int, s: int, t: int, d: int, dtype: torch.dtype) -> None:
        self.buffer = torch.empty((b, s, t, d), dtype=dtype)
        self.blocks: list[Tensor] = []
        self.count = 0

    def add(self, block: Tensor) -> None:
        k = block.shape[1]
        with torch.no_grad():
            self.buffer[:, self.count : self.count + k].copy_(block)
        self.blocks.append(block)
        self.count += k

    def mix(self, masks: Tensor, base: Tensor, last: bool = False) -> Tensor:
        """``base + sum_s masks[b, j, s] (cur_s - cor_s)`` over the senders so far, ``[J, B, T, d]``
        (`base` ``[B, T, d]``); `last`: at the last position only (``[J, B, 1, d]``)."""
        b, j = masks.shape[:2]
        view = self.buffer[:, : self.count]
        blocks = self.blocks
        if last:
            view, blocks, base = view[:, :, -1:], [blk[:, :, -1:] for blk in blocks], base[:, -1:]
        shape = base.shape[1:]
        flat = [blk.reshape(b, blk.shape[1], -1) for blk in blocks]
        out: Tensor = _SoftMix.apply(masks, base.reshape(b, 1, -1), view.reshape(b, self.count, -1), *flat)
        return out.reshape(b, j, *shape).transpose(0, 1)


def masked_logits(model: DecomposedModel, tokens: Tensor, masks: Tensor, corrupt: Cache) -> Tensor:
    """The last position's logits ``[B, vocab]`` with every edge (s, r) of example b reading
    ``m cur_s + (1 - m) cor_s``, ``m = masks[b, e]`` in [0, 1] (``[B, E]``): a circuit with
    continuous, per-example edge weights, differentiable in `masks` (mask learning such as UGS).
    Bool masks give `run`'s circuits; `corrupt` is the counterfactual run's cache."""
    layout, h = model.layout, model.n_heads
    b = tokens.shape[0]
    if masks.shape != (b, model.graph.n_edges):
        raise ShapeError(f"masks must be [{b}, {model.graph.n_edges}] (examples x edges); got {tuple(masks.shape)}")
    emb = model.embed(tokens)
    if corrupt.outputs.shape[1:3] != emb.shape[:2]:
        raise ShapeError("masked_logits needs the counterfactual run of the same examples (not means)")
    senders = _Senders(b, layout.n_senders, emb.shape[1], emb.shape[2], emb.dtype)
    senders.add((emb - corrupt.outputs[0]).unsqueeze(1))
    for layer in range(model.n_layers):
        u, start = layout.heads_upstream(layer), layout.heads_start[layer]
        mixed = senders.mix(masks[:, start : start + 3 * h * u].reshape(b, 3 * h, u), corrupt.residuals[u])
        per = mixed.reshape(h, 3, *mixed.shape[1:])
        first = layout.first_head(layer)
        senders.add(
            (model.heads(layer, per[:, 0], per[:, 1], per[:, 2]) - corrupt.outputs[first : first + h]).transpose(0, 1)
        )
        u, start = layout.mlp_upstream(layer), layout.mlp_start[layer]
        mlp_in = senders.mix(masks[:, start : start + u].reshape(b, 1, u), corrupt.residuals[u])[0]
        senders.add((model.mlp(layer, mlp_in) - corrupt.outputs[layout.mlp_node(layer)]).unsqueeze(1))
    u = layout.n_senders
    x = senders.mix(masks[:, layout.logits_start :].reshape(b, 1, u), corrupt.residuals[u], last=True)[0]
    return model.logits(x[:, -1])


def mean_cache(outputs_sum: Tensor, count: int) -> Cache:
    """The mean-ablation `Cache` from the sum over a dataset's positions of every sender's output
    (``[S, d]``) and the number of positions summed."""
    if count < 1:
        raise ShapeError("mean ablation needs at least one position")
    means = (outputs_sum / count)[:, None, None, :]
    prefix = torch.cumsum(means, dim=0)
    residuals = {u: prefix[u - 1] for u in range(1, means.shape[0] + 1)}
    return Cache(means, residuals, None)
