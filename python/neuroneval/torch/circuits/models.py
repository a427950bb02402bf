"""A decoder-only transformer taken apart into the nodes of MIB's graph (SPEC section 7).

`decompose(model)` wraps a Hugging Face causal LM (GPT-2, or the LLaMA family: llama,
mistral, qwen2) without copying its weights into another framework. The wrapper computes each
node from an input it is handed: the embedding of the tokens, every attention head from its own
query, key and value input residuals (`[H, B, T, d]`, or one shared `[B, T, d]` residual when
every head reads the same stream), each MLP from its input residual, and the logits from theirs.
`patching.run` sums senders into those inputs; here is only the arithmetic of one model family.

Why this route rather than transformer-lens: its HookedTransformer loads weights by the hub
name of a model and rewrites them into its own layout, which needs the hub's configuration
files; the models users hold here (SmolLM2 from a GGUF file, a model trained in place) are
Hugging Face modules already. Splitting a head's query, key and value inputs is what
transformer-lens's ``use_split_qkv_input`` does; the wrapper does it on the module's own weights,
and grouped-query attention gives every query head its own key and value input (its group's
weights), the way MIB counts a head's edges.

Examples
--------
>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> _ = torch.manual_seed(0)
>>> config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
...                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
>>> model = decompose(LlamaForCausalLM(config).eval())
>>> model.graph.n_edges, model.n_heads, model.d_model
(110, 4, 32)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from neuroneval.circuits import SUPPORTED_MODEL_TYPES, Graph, transformer_graph
from neuroneval.errors import ParameterError, ShapeError

__all__ = ["RUNNABLE_MODEL_TYPES", "DecomposedModel", "Layout", "decompose", "layout_of"]

#: Model types whose nodes `decompose` can compute (the graph itself supports `SUPPORTED_MODEL_TYPES`).
RUNNABLE_MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2")

Tensor = torch.Tensor


@dataclass(frozen=True)
class Layout:
    """Where each receiver's edges sit in the graph's edge order (`transformer_graph`'s):
    per layer, the heads' block of ``H x 3 x u`` edges (query, key, value inputs of each head,
    each from senders ``0..u-1``), then the MLP's ``u + H`` and, last, the logits' ``S``."""

    n_layers: int
    n_heads: int
    heads_start: tuple[int, ...]
    mlp_start: tuple[int, ...]
    logits_start: int

    def heads_upstream(self, layer: int) -> int:
        return 1 + layer * (self.n_heads + 1)

    def mlp_upstream(self, layer: int) -> int:
        return self.heads_upstream(layer) + self.n_heads

    @property
    def n_senders(self) -> int:
        return 1 + self.n_layers * (self.n_heads + 1)

    def first_head(self, layer: int) -> int:
        """The sender index (= node index) of the layer's first head."""
        return self.heads_upstream(layer)

    def mlp_node(self, layer: int) -> int:
        return self.mlp_upstream(layer)


def layout_of(graph: Graph, n_layers: int, n_heads: int) -> Layout:
    """The `Layout` of `graph`, checked to be `transformer_graph(n_layers, n_heads)`'s order."""
    heads_start, mlp_start = [], []
    at = 0
    h = n_heads
    for layer in range(n_layers):
        u = 1 + layer * (h + 1)
        heads_start.append(at)
        at += 3 * h * u
        mlp_start.append(at)
        at += u + h
    n_senders = 1 + n_layers * (h + 1)
    if at + n_senders != graph.n_edges:
        raise ShapeError(
            f"the graph has {graph.n_edges} edges; {n_layers} layers of {n_heads} heads make {at + n_senders}"
        )
    layout = Layout(n_layers, n_heads, tuple(heads_start), tuple(mlp_start), at)
    parts = []
    for layer in range(n_layers):
        parts += [np.tile(np.arange(layout.heads_upstream(layer)), 3 * h), np.arange(layout.mlp_upstream(layer))]
    expected = np.concatenate([*parts, np.arange(n_senders)])
    if not np.array_equal(graph.senders, expected):
        raise ShapeError("the graph's edges are not in transformer_graph's order")
    return layout


def _project(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """Per-head projections ``[H, B, T, hd]`` of `x` ``[B, T, d]`` by `w` ``[H, hd, d]``: one
    product for all heads (a view of its ``[B, T, H * hd]`` result)."""
    n, hd, d = w.shape
    y = torch.nn.functional.linear(x, w.reshape(n * hd, d), None if b is None else b.reshape(n * hd))
    return cast(Tensor, y.unflatten(-1, (n, hd)).permute(2, 0, 1, 3))


def _unseen(start: int | Tensor, n_keys: int, n_queries: int, device: torch.device) -> Tensor:
    """The keys a query may not read: ``[t, n_keys]`` for the queries at positions ``start ..
    start + t`` of keys at ``0 .. n_keys`` (the later ones), or for a `start` per row ``[B, t,
    n_keys]``, where the first ``n_keys - t`` keys are the past (row b reads its first
    ``start[b]``) and the last t the queries' own positions (each reads those up to its own)."""
    queries = torch.arange(n_queries, device=device)
    if not isinstance(start, Tensor):
        return torch.arange(n_keys, device=device)[None, :] > (start + queries)[:, None]
    n_past = n_keys - n_queries
    past = torch.arange(n_past, device=device)[None, None, :] >= start[:, None, None]  # [B, 1, P]
    own = (queries[None, :] > queries[:, None])[None]  # [1, t, t]
    return torch.cat([past.expand(-1, n_queries, -1), own.expand(start.shape[0], -1, -1)], dim=2)


def _per_head(weight: Tensor, n: int) -> Tensor:
    """A projection's ``[n * hd, d]`` weight as ``[n, hd, d]``."""
    return weight.reshape(n, weight.shape[0] // n, weight.shape[1])


@dataclass(frozen=True)
class _Attention:
    """One layer's attention weights, per query head: ``[H, hd, d]`` projections (a key/value
    group's weights repeated for each of its query heads) and ``[H, d, hd]`` output slices.

    Every weight is a view of the module's parameter (or, grouped keys and values, repeated from
    it at each read), taken anew at each use of the layer (`DecomposedModel._attention_weights`):
    it follows the parameter as the model trains, changes precision or is frozen (a view taken
    while the parameter needed gradients would compute them after it is frozen)."""

    norm: Any
    wq: Tensor
    bq: Tensor | None
    kv: tuple[Tensor, Tensor | None, Tensor, Tensor | None]  # key and value weights and biases, per group
    group: int
    wo: Tensor
    bo: Tensor | None  # a constant of the residual stream, shared equally by the heads

    def _repeat(self, t: Tensor | None) -> Tensor | None:
        return t if t is None or self.group == 1 else t.repeat_interleave(self.group, dim=0)

    @property
    def wk(self) -> Tensor:
        return cast(Tensor, self._repeat(self.kv[0]))

    @property
    def bk(self) -> Tensor | None:
        return self._repeat(self.kv[1])

    @property
    def wv(self) -> Tensor:
        return cast(Tensor, self._repeat(self.kv[2]))

    @property
    def bv(self) -> Tensor | None:
        return self._repeat(self.kv[3])


class DecomposedModel:
    """A causal LM as MIB's nodes; built by `decompose`.

    Attributes
    ----------
    model : torch.nn.Module
        The wrapped Hugging Face model (its weights are used in place).
    graph : neuroneval.circuits.Graph
        Its computational graph.
    n_layers, n_heads, d_model : int
    """

    def __init__(self, model: Any, kind: str, n_layers: int, n_heads: int, d_model: int) -> None:
        self.model = model
        self.kind = kind
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.d_model = d_model
        self.graph: Graph = transformer_graph(n_layers, n_heads)
        self.layout = layout_of(self.graph, n_layers, n_heads)
        self.senders = torch.from_numpy(self.graph.senders)
        self._rope_tables: dict[tuple[int, torch.dtype, torch.device], tuple[Tensor, Tensor]] = {}

    # --- the model family's arithmetic -------------------------------------------------------

    def _block(self, layer: int) -> Any:
        if self.kind == "gpt2":
            return self.model.transformer.h[layer]
        return self.model.model.layers[layer]

    def _attention_weights(self, layer: int) -> _Attention:
        block = self._block(layer)
        h = self.n_heads
        if self.kind == "gpt2":
            attn = block.attn
            w = attn.c_attn.weight.T  # Conv1D keeps [d_in, d_out]
            b = attn.c_attn.bias
            d = self.d_model
            wq, wk, wv = (_per_head(w[i * d : (i + 1) * d], h) for i in range(3))
            bq, bk, bv = (b[i * d : (i + 1) * d].reshape(h, -1) for i in range(3))
            wo = attn.c_proj.weight.T.reshape(d, h, -1).permute(1, 0, 2)
            return _Attention(block.ln_1, wq, bq, (wk, bk, wv, bv), 1, wo, attn.c_proj.bias)
        attn = block.self_attn
        kv = self.model.config.num_key_value_heads

        def grouped(bias: Tensor | None) -> Tensor | None:
            return None if bias is None else bias.reshape(kv, -1)

        wq = _per_head(attn.q_proj.weight, h)
        bq = None if attn.q_proj.bias is None else attn.q_proj.bias.reshape(h, -1)
        keys_values = (
            _per_head(attn.k_proj.weight, kv),
            grouped(attn.k_proj.bias),
            _per_head(attn.v_proj.weight, kv),
            grouped(attn.v_proj.bias),
        )
        wo = attn.o_proj.weight.reshape(self.d_model, h, -1).permute(1, 0, 2)
        return _Attention(block.input_layernorm, wq, bq, keys_values, h // kv, wo, attn.o_proj.bias)

    def embed(self, tokens: Tensor) -> Tensor:
        """The input node's output, ``[B, T, d]``: token (and, for GPT-2, position) embeddings."""
        if self.kind == "gpt2":
            t = self.model.transformer
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            return cast(Tensor, t.wte(tokens) + t.wpe(positions)[None])
        return cast(Tensor, self.model.model.embed_tokens(tokens))

    def heads(
        self, layer: int, q_in: Tensor, k_in: Tensor, v_in: Tensor, *, capture: list[Tensor] | None = None
    ) -> Tensor:
        """Every head's output of `layer`, ``[H, B, T, d]``, each from its own query, key and value
        input (``[H, B, T, d]``; or ``[B, T, d]`` read by every head).

        `capture` (shared inputs only) receives the heads' query, key and value projections
        ``[H, B, T, hd]``, through which `input_gradients` gives each head's input gradients
        without normalising the shared residual once per head."""
        a = self._attention_weights(layer)
        shared = q_in.dim() == 3 and q_in is k_in and k_in is v_in
        normed = a.norm(q_in) if shared else None

        def project(x: Tensor, w: Tensor, b: Tensor | None, grouped: Tensor | None = None) -> Tensor:
            if normed is not None and grouped is not None:  # a key/value group's heads read one projection
                y = torch.einsum("btd,hed->hbte", normed, grouped).repeat_interleave(a.group, dim=0)
            elif normed is not None:
                y = torch.einsum("btd,hed->hbte", normed, w)
            elif x.dim() == 3:
                y = torch.einsum("btd,hed->hbte", a.norm(x), w)
            else:
                y = torch.einsum("hbtd,hed->hbte", a.norm(x), w)
            if capture is not None:
                capture.append(y)
            return y if b is None else y + b[:, None, None, :]

        if capture is not None and not shared:
            raise ValueError("capturing a layer's projections needs one input shared by its heads")
        q = project(q_in, a.wq, a.bq)
        grouped = a.group > 1
        k = project(k_in, a.wk, a.bk, a.kv[0] if grouped else None)
        v = project(v_in, a.wv, a.bv, a.kv[2] if grouped else None)
        return self._attend(a, q, k, v, a.wo)

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor, heads: Tensor) -> Tensor:
        """The outputs ``[n, B, T, d]`` of `layer`'s heads `heads` (``[n]`` indices) from their
        query, key and value projections ``[n, B, T, hd]`` (biases added, positions not yet
        encoded): what `heads` does after projecting, for a subset of the heads."""
        a = self._attention_weights(layer)
        return self._attend(a, q, k, v, a.wo[heads])

    def _attend(self, a: _Attention, q: Tensor, k: Tensor, v: Tensor, wo: Tensor) -> Tensor:
        n_pos = q.shape[2]
        window = getattr(self.model.config, "sliding_window", None)
        if window is not None and getattr(self.model.config, "use_sliding_window", True) and n_pos > window:
            raise ParameterError(f"prompts of {n_pos} tokens exceed the model's sliding attention window of {window}")
        if self.kind != "gpt2":
            q, k = self._rope(q, 0), self._rope(k, 0)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        causal = torch.ones(n_pos, n_pos, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(causal, torch.finfo(scores.dtype).min)
        pattern = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        out = torch.einsum("hbte,hde->hbtd", torch.matmul(pattern, v), wo)
        return out if a.bo is None else out + a.bo / self.n_heads

    def keys_values(self, layer: int, x: Tensor, start: int = 0) -> tuple[Tensor, Tensor]:
        """`layer`'s keys (position-encoded) and values per key/value group, ``[G, B, T, hd]``,
        from its input `x` ``[B, T, d]`` at the positions from `start` on: what `block` reads of
        the positions before an intervention, computed once per base run."""
        a = self._attention_weights(layer)
        return self._keys_values(a, a.norm(x), start)

    def _keys_values(self, a: _Attention, normed: Tensor, start: int | Tensor) -> tuple[Tensor, Tensor]:
        wk, bk, wv, bv = a.kv
        k, v = _project(normed, wk, bk), _project(normed, wv, bv)
        if self.kind != "gpt2":
            k = self._rope(k, start)
        return k, v

    def _rope(self, t: Tensor, start: int | Tensor) -> Tensor:
        """Rotary position encoding of `t` ``[.., B, T, hd]`` at the positions ``start .. start +
        T``, or with `start` a tensor ``[B]``, at ``start[b] .. start[b] + T`` in row b."""
        end = (int(start.max()) if isinstance(start, Tensor) else start) + t.shape[-2]
        key = (end, t.dtype, t.device)
        if key not in self._rope_tables:
            positions = torch.arange(end, device=t.device)[None]
            self._rope_tables[key] = self.model.model.rotary_emb(t, positions)  # ([1, T, hd], [1, T, hd])
        if isinstance(start, Tensor):
            at = start[:, None] + torch.arange(t.shape[-2], device=t.device)  # [B, T]
            cos, sin = (c[0, at] for c in self._rope_tables[key])
        else:
            cos, sin = (c[:, start:] for c in self._rope_tables[key])
        half = t.shape[-1] // 2
        return t * cos + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * sin

    def block(
        self, layer: int, x: Tensor, start: int | Tensor = 0, past: tuple[Tensor, Tensor] | None = None
    ) -> Tensor:
        """The residual stream after `layer`'s attention and MLP at the positions from `start`
        on, ``[B, T - start, d]``: the plain forward pass of one block, which an intervention at
        position `start` needs from the next layer on.

        `x` is the layer's input at every position ``[B, T, d]`` (the earlier ones read as keys
        and values only), or, with `past` (`keys_values` of the earlier positions ``[G, B, P,
        hd]``), at the positions from `start` on only ``[B, t, d]``. With `past`, `start` may be a
        tensor ``[B]``: row b's `x` then holds the positions ``start[b] .. start[b] + t`` and reads
        the first ``start[b]`` of the P past positions (each row runs from its own intervention,
        none from the batch's earliest)."""
        y = self.middle(layer, x, start, past)
        return y + self.mlp(layer, y)

    def middle(
        self, layer: int, x: Tensor, start: int | Tensor = 0, past: tuple[Tensor, Tensor] | None = None
    ) -> Tensor:
        """The residual stream between `layer`'s attention and its MLP (the MLP's input before
        its norm), at the positions from `start` on; the arguments are `block`'s."""
        a = self._attention_weights(layer)
        normed = a.norm(x)
        if past is None:
            if isinstance(start, Tensor):
                raise ParameterError("a start per row needs the past keys and values")
            k, v = self._keys_values(a, normed, 0)
            x, normed = x[:, start:], normed[:, start:]
        else:
            k, v = (torch.cat([p, n], dim=2) for p, n in zip(past, self._keys_values(a, normed, start), strict=True))
        q = _project(normed, a.wq, a.bq)
        if self.kind != "gpt2":
            q = self._rope(q, start)
        # the query heads of a key/value group read its keys and values once: [G, group, B, t, hd]
        q = q.reshape(-1, a.group, *q.shape[1:])
        scores = torch.matmul(q, k[:, None].transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(_unseen(start, k.shape[2], x.shape[1], x.device), torch.finfo(scores.dtype).min)
        pattern = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        heads = torch.matmul(pattern, v[:, None]).flatten(0, 1)  # [H, B, t, hd]
        n_heads, _, hd = a.wo.shape
        wo = a.wo.permute(1, 0, 2).reshape(-1, n_heads * hd)  # [d, H * hd]
        attended = torch.nn.functional.linear(heads.permute(1, 2, 0, 3).flatten(2), wo)
        return x + (attended if a.bo is None else attended + a.bo)

    def input_gradients(self, layer: int, x: Tensor, grads: Sequence[Tensor]) -> list[Tensor]:
        """Each head's query, key and value input gradients ``[H, B, T, d]`` from the gradients of
        its projections (`heads`' `capture`) at the shared input `x`: back through the
        projection, then through the norm's vector-Jacobian product at `x`, for all heads at once
        (in float32 at least through a LLaMA-family RMS norm: `_rms_norm_vjp`)."""
        a = self._attention_weights(layer)
        weights = (a.wq, a.wk, a.wv)
        back = _rms_norm_vjp(a.norm, x.detach())
        if back is not None:
            return [back(g, w) for g, w in zip(grads, weights, strict=True)]
        _, vjp, *_ = torch.func.vjp(a.norm, x.detach())
        per_head = torch.func.vmap(lambda c: vjp(c)[0])
        return [per_head(torch.einsum("hbte,hed->hbtd", g, w)) for g, w in zip(grads, weights, strict=True)]

    def mlp(self, layer: int, x: Tensor) -> Tensor:
        """The MLP node of `layer` on its input residual ``[B, T, d]``."""
        block = self._block(layer)
        if self.kind == "gpt2":
            return cast(Tensor, block.mlp(block.ln_2(x)))
        return cast(Tensor, block.mlp(block.post_attention_layernorm(x)))

    def mlp_input(self, layer: int, y: Tensor) -> Tensor:
        """The MLP's input: its norm of the residual `y` between attention and MLP (`middle`)."""
        block = self._block(layer)
        return cast(Tensor, block.ln_2(y) if self.kind == "gpt2" else block.post_attention_layernorm(y))

    def mlp_neurons(self, layer: int, normed: Tensor) -> Tensor:
        """The MLP's hidden units from its input `normed` (`mlp_input`): the input of its output
        projection (GELU(fc) for GPT-2, SiLU(gate) x up for the LLaMA family)."""
        mlp = self._block(layer).mlp
        if self.kind == "gpt2":
            return cast(Tensor, mlp.act(mlp.c_fc(normed)))
        return cast(Tensor, mlp.act_fn(mlp.gate_proj(normed)) * mlp.up_proj(normed))

    def mlp_output(self, layer: int, neurons: Tensor) -> Tensor:
        """The MLP's output from its hidden units (`mlp_neurons`)."""
        mlp = self._block(layer).mlp
        return cast(Tensor, mlp.dropout(mlp.c_proj(neurons)) if self.kind == "gpt2" else mlp.down_proj(neurons))

    def mlp_width(self, layer: int) -> int:
        """How many hidden units `layer`'s MLP has."""
        mlp = self._block(layer).mlp
        weight = mlp.c_fc.weight if self.kind == "gpt2" else mlp.up_proj.weight
        return int(weight.shape[1] if self.kind == "gpt2" else weight.shape[0])

    def final_hidden(self, x: Tensor) -> Tensor:
        """The final norm of the logits node's input."""
        if self.kind == "gpt2":
            return cast(Tensor, self.model.transformer.ln_f(x))
        return cast(Tensor, self.model.model.norm(x))

    def logits(self, x: Tensor) -> Tensor:
        """The logits node: every token's logit from its input residual."""
        return cast(Tensor, self.model.lm_head(self.final_hidden(x)))

    def logit_difference(self, x: Tensor, answer: Tensor, foil: Tensor) -> Tensor:
        """logit(answer) - logit(foil) for each example, from the logits node's input at the last
        position (``x``: ``[B, d]``), without the full vocabulary."""
        hidden = self.final_hidden(x)
        w = self.model.lm_head.weight
        out = (hidden * (w[answer] - w[foil])).sum(-1)
        bias = getattr(self.model.lm_head, "bias", None)
        return cast(Tensor, out if bias is None else out + bias[answer] - bias[foil])


def summing_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision gradients are summed in: float32 at least (bfloat16 sums lose digits)."""
    return torch.promote_types(dtype, torch.float32)


def _rms_norm_vjp(norm: Any, x: Tensor) -> Any:
    """The input gradients through a LLaMA-family RMS norm at `x` ``[B, T, d]`` of projection
    gradients ``g`` ``[H, B, T, hd]`` by per-head weights ``W`` ``[H, hd, d]`` (``back(g, W)``),
    written out: ``y = w * (x r)``, ``r = rsqrt(mean(x^2) + eps)``, in float32 as the Hugging Face
    norm computes it, so with ``c = g W``: ``dx = c (w r) - x (r^3 / d) sum(w c x)``, where the sum
    is taken in the heads' space, ``g . W (w x)`` (``hd`` terms, not ``d``); in float32, whatever
    the model's precision (the gradient methods sum them in float32). None for another norm
    (its vector-Jacobian product is then taken through autograd, per head, which costs many times
    more)."""
    eps = getattr(norm, "variance_epsilon", None)
    if eps is None or not type(norm).__name__.endswith("RMSNorm"):
        return None
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    k = r.pow(3) / x.shape[-1]
    wf = norm.weight.float()
    wr = wf * r  # [B, T, d]
    xw = xf * wf

    def back(g: Tensor, w: Tensor) -> Tensor:
        c = torch.einsum("hbte,hed->hbtd", g, w)  # in the model's precision, as autograd's
        dot = (g.float() * torch.einsum("btd,hed->hbte", xw, w.float())).sum(-1, keepdim=True)
        # in place on one float32 copy (the gradients are summed in float32 anyway)
        return c.to(summing_dtype(c.dtype)).mul_(wr).addcmul_(xf, dot.mul_(k), value=-1)

    return back


def cpu_multiplies_bfloat16() -> bool | None:
    """Whether this CPU has bfloat16 matrix units (AVX-512 BF16 or AMX tiles), as torch's CPU
    dispatch sees them; None where this torch does not say."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if any(probe is None for probe in probes):
        return None
    return any(probe() for probe in probes if probe is not None)


def warn_of_emulated_bfloat16(model: Any) -> None:
    """Warns when `model` holds bfloat16 weights on the CPU and the CPU has no bfloat16 matrix
    units: torch then emulates its products, several times slower than float32's."""
    parameter = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    if (
        parameter is not None
        and parameter.dtype == torch.bfloat16
        and parameter.device.type == "cpu"
        and cpu_multiplies_bfloat16() is False
    ):
        warnings.warn(
            "the model computes in bfloat16 on a CPU without AVX-512 BF16 or AMX, where torch emulates "
            "bfloat16 products several times slower than float32's; float32 (--dtype float32) runs "
            "faster, with float32's numbers",
            RuntimeWarning,
            stacklevel=3,
        )


def decompose(model: Any) -> DecomposedModel:
    """`model` (a Hugging Face causal LM of a type in `RUNNABLE_MODEL_TYPES`) as MIB's nodes.

    Raises
    ------
    ParameterError
        Another kind of model, named; a graph-only type (`SUPPORTED_MODEL_TYPES`) says so.
    """
    config: Any = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in RUNNABLE_MODEL_TYPES:
        graph_only = kind in SUPPORTED_MODEL_TYPES
        raise ParameterError(
            f"circuit runs support Hugging Face causal LMs of type {', '.join(RUNNABLE_MODEL_TYPES)}; got {kind!r}"
            + (
                " (neuroneval.circuits.graph_of builds its graph, but its nodes are not computed yet)"
                if graph_only
                else ""
            )
        )
    if not hasattr(model, "lm_head"):
        raise ParameterError(
            f"the {kind} model has no lm_head: pass the causal LM (e.g. LlamaForCausalLM), not its base model"
        )
    warn_of_emulated_bfloat16(model)
    if kind == "gpt2":
        if getattr(config, "scale_attn_by_inverse_layer_idx", False) or getattr(
            config, "reorder_and_upcast_attn", False
        ):
            raise ParameterError(
                "GPT-2 variants with scale_attn_by_inverse_layer_idx or reorder_and_upcast_attn are not supported"
            )
        return DecomposedModel(model, kind, config.n_layer, config.n_head, config.n_embd)
    return DecomposedModel(model, kind, config.num_hidden_layers, config.num_attention_heads, config.hidden_size)
