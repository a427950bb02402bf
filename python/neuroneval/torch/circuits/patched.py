"""The patched pass without gradients: a circuit's metric computing only what the circuit changes.

`patching.run` sends circuit runs under ``torch.no_grad()`` here. The arithmetic is `run`'s
(SPEC section 7: a receiver's input is ``sum_s cor_s + sum_{s in circuit(r)} (cur_s - cor_s)``);
what differs is what is left out, each a saving that is exact:

- **Dead senders.** A node none of whose circuit edges comes from a sender that differs from the
  counterfactual run reads the counterfactual residual: its output is the counterfactual one,
  read from the cache. So is the output of a node with no circuit edge leaving it, which no
  receiver reads as itself. Neither is computed, and neither takes part in any mix.
- **Rows, not layers.** Each receiver's input is, on its own, the counterfactual residual
  (no live circuit edge), this run's residual (no live edge left out), or a mix from whichever
  side has fewer senders; the layer's heads are projected from as many distinct inputs as there
  are, and grouped keys and values once per group and input.
- **The unpatched rest.** After the last receiver with a live edge left out, the model runs as
  itself (`DecomposedModel.block`), without per-head outputs.
- **One buffer.** ``cur_s - cor_s`` of the live senders is written into one buffer kept on the
  model between passes (no fresh pages per pass); senders read from the clean cache (`run`'s
  ``clean=``) get theirs when a mix first needs them.
- **Reads, not rows.** A mix is bound by reading the senders' differences, not by the number
  of rows it forms, so a layer's MLP row joins its heads' product where it can.
- **The norm folded.** A mixed input to LLaMA's RMS norm is not normalised: its projection is
  taken by ``W diag(weight)`` and scaled by ``1 / rms`` after (float32 and narrower; float64
  keeps the Hugging Face norm, which computes in float32 inside).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .models import DecomposedModel, Layout

Tensor = torch.Tensor

CUR, COR, MIX = 0, 1, 2  # a receiver input's kind: this run's residual, the counterfactual one, a mix


@dataclass
class Cache:
    """An unpatched run's sender outputs and the residual sums its receivers read.

    Attributes
    ----------
    outputs : torch.Tensor
        ``[S, B, T, d]``: every sender's output (the input node, then each layer's heads and MLP),
        or ``[S, 1, 1, d]`` means for mean ablation.
    residuals : dict of int to torch.Tensor
        The sum of senders ``0..u-1``, for each upstream count ``u`` a receiver reads.
    metric : torch.Tensor or None
        The run's logit difference per example.
    """

    outputs: Tensor
    residuals: dict[int, Tensor]
    metric: Tensor | None = None


@dataclass
class _Rows:
    """One stage's receiver rows (``[J, u]``, True: in the circuit) sorted by kind."""

    kind: np.ndarray  # [J]
    inside: np.ndarray  # [J, u]: circuit edges from live senders
    outside: np.ndarray  # [J, u]: left-out edges from live senders


def _rows(rows: np.ndarray, live: np.ndarray) -> _Rows:
    inside, outside = rows & live, ~rows & live
    n_in, n_out = inside.sum(1), outside.sum(1)
    kind = np.where(n_out == 0, CUR, np.where(n_in == 0, COR, MIX))
    return _Rows(kind, inside, outside)


class _Differences:
    """``cur_s - cor_s`` of live senders, one row each of a buffer ``[S, B, T, d]`` reused across
    passes; rows are written when a sender is computed, or, for senders taken from the clean
    cache, when a mix first reads them."""

    def __init__(self, model: DecomposedModel, shape: torch.Size, dtype: torch.dtype, n: int, device: torch.device):
        key = (tuple(shape), dtype, device)
        held = getattr(model, "_difference_buffer", None)
        if held is None or held[0] != key or held[1].shape[0] < n + 1:
            held = (key, torch.empty((n + 1, *shape), dtype=dtype, device=device))  # and a row for a base
            model._difference_buffer = held  # type: ignore[attr-defined]
        self.buffer: Tensor = held[1]
        self.row = np.full(n, -1, dtype=np.int64)
        self.count = 0

    def write(self, senders: np.ndarray, output: Tensor, corrupt: Tensor) -> Tensor:
        """Store ``output - corrupt`` (``[k, B, T, d]`` each) as the rows of `senders`; the rows."""
        k = output.shape[0]
        out = self.buffer[self.count : self.count + k]
        torch.sub(output, corrupt, out=out)
        self.row[senders] = np.arange(self.count, self.count + k)
        self.count += k
        return out

    def fill(self, senders: np.ndarray, clean: Tensor, corrupt: Tensor) -> None:
        """Rows for the clean-cache senders among `senders` that have none yet."""
        missing = senders[self.row[senders] < 0]
        if missing.size:
            idx = torch.from_numpy(missing)
            k = missing.size
            torch.sub(clean[idx], corrupt[idx], out=self.buffer[self.count : self.count + k])
            self.row[missing] = np.arange(self.count, self.count + k)
            self.count += k

    def product(self, base: Tensor, coef: np.ndarray, rows: np.ndarray | None) -> Tensor:
        """``base + coef @ diff`` over the buffer rows `rows` (gathered), or over every row
        written so far (``rows=None``): ``[J, B, T, d]``. `base` (``[B, T, d]``) takes the row
        after them, weight 1 in the product, which spares writing it into each output first."""
        n = self.count
        self.buffer[n].copy_(base)
        ones = np.ones((coef.shape[0], 1))
        if rows is None:
            picked, weights = self.buffer[: n + 1], np.hstack([coef, ones])
        else:
            picked = self.buffer.index_select(0, torch.from_numpy(np.append(rows, n)))
            weights = np.hstack([coef, ones])
        w = torch.from_numpy(weights).to(base.dtype)
        return (w @ picked.reshape(picked.shape[0], -1)).reshape(-1, *picked.shape[1:])


def patched_metric(
    model: DecomposedModel,
    tokens: Tensor,
    answer: Tensor,
    foil: Tensor,
    circuit: Tensor,
    corrupt: Cache,
    start: tuple[int, int, Cache] | None = None,
) -> tuple[Tensor, Tensor]:
    """The metric and the logits' input ``[B, T, d]`` of `circuit` (bool ``[E]``, not full, no
    gradients); `corrupt` is the counterfactual `Cache`; `start`: ``(stage, senders, clean
    cache)`` to begin from the clean run (`patching._first_patched`)."""
    logits_in = _Pass(model, tokens, circuit.numpy(), corrupt, start).run()
    return model.logit_difference(logits_in[:, -1], answer, foil), logits_in


class _Pass:
    """One patched pass: the plan (which nodes to compute, where the unpatched rest begins),
    then the stages up to that point, then the rest."""

    def __init__(
        self,
        model: DecomposedModel,
        tokens: Tensor,
        mask: np.ndarray,
        corrupt: Cache,
        start: tuple[int, int, Cache] | None,
    ) -> None:
        self.model, self.layout = model, model.layout
        self.cor_out, self.cor_res = corrupt.outputs, corrupt.residuals
        n = self.layout.n_senders
        self.live = np.zeros(n, dtype=bool)
        if start is None:
            self.stage0, self.clean = 0, None
            emb = model.embed(tokens)
            self.live[0] = True
            self.current = emb
        else:
            self.stage0, prefix, self.clean = start
            self.live[:prefix] = True
            self.current = self.clean.residuals[prefix]
        self.diffs = _Differences(model, self.current.shape, self.current.dtype, n, self.current.device)
        if start is None:
            self.diffs.write(np.array([0]), emb[None], self.cor_out[:1])
        self.stages = _stages(self.layout, mask)
        needed = np.zeros(model.graph.n_nodes, dtype=bool)
        needed[model.graph.senders[mask]] = True
        self.rows, self.last = self._plan(needed)

    def _plan(self, needed: np.ndarray) -> tuple[list[_Rows | None], int]:
        """Two kinds of liveness, stage by stage: a node whose output differs from the
        counterfactual one ("differs"), and one that is computed (`live`: it differs and a
        circuit edge leaves it, else every receiver reads its counterfactual output). Rows are
        classified by the second for computing; the model runs as itself after the last stage
        where a receiver leaves out an edge from a node that differs (returned)."""
        differs = self.live.copy()
        rows: list[_Rows | None] = [None] * len(self.stages)
        last = self.stage0 - 1
        for i in range(self.stage0, len(self.stages)):
            u, mask = self.stages[i]
            rows[i] = rows_i = _rows(mask, self.live[:u])
            strict = _rows(mask, differs[:u])
            if (strict.kind != CUR).any():
                last = i
            if i < 2 * self.model.n_layers:
                nodes = _stage_nodes(self.layout, i)
                k, here = len(nodes), slice(nodes.start, nodes.stop)
                self.live[here] = rows_i.inside.reshape(k, -1).any(1) & needed[here]
                differs[here] = strict.inside.reshape(k, -1).any(1)
        return rows, last

    def run(self) -> Tensor:
        """The logits' input."""
        self.early: tuple[Tensor, int] | None = None  # an MLP's input over the senders before its layer's heads
        n_stages = 2 * self.model.n_layers
        for i in range(self.stage0, min(self.last + 1, n_stages)):
            self._stage(i)
        rest = self.last + 1
        if rest < n_stages:  # the unpatched rest: the model as itself
            layer = rest // 2
            current = self.current
            if rest % 2 == 1:
                current = current + self.model.mlp(layer, current)
                layer += 1
            for j in range(layer, self.model.n_layers):
                current = self.model.block(j, current)
            return current
        r = self.rows[-1]
        assert r is not None
        u = self.layout.n_senders
        if r.kind[0] == CUR:
            return self.current
        if r.kind[0] == COR:
            return self.cor_res[u].expand_as(self.current)
        return self._mixed(r, np.array([0]), u)[0][0]

    def _stage(self, i: int) -> None:
        """Stage `i`'s computed nodes, their differences written, and the residual advanced."""
        u, layer = self.stages[i][0], i // 2
        r, nodes = self.rows[i], _stage_nodes(self.layout, i)
        assert r is not None
        after = self.layout.mlp_upstream(layer) if i % 2 == 0 else u + 1
        step = self.cor_res[after] - self.cor_res[u]  # the stage's counterfactual outputs, summed
        computed = np.flatnonzero(self.live[nodes.start : nodes.stop])
        if computed.size:
            if i % 2 == 0:
                out = self._heads(layer, r, computed, u, self._mlp_rows(i))
            else:
                out = self.model.mlp(layer, self._mlp_input(r, u))[None]
            senders = nodes.start + computed
            step = step + self.diffs.write(senders, out, _take(self.cor_out, senders)).sum(0)
        self.current = self.current + step

    def _mlp_rows(self, i: int) -> np.ndarray | None:
        """The rows over the senders before layer ``i // 2``'s heads of its MLP, when the MLP is
        computed from a mix within the patched stages."""
        mlp = self.rows[i + 1]
        if mlp is None or mlp.kind[0] != MIX or not self.live[self.layout.mlp_node(i // 2)] or i + 1 > self.last:
            return None
        return mlp.inside[:, : self.stages[i][0]]

    def _mlp_input(self, r: _Rows, u: int) -> Tensor:
        if r.kind[0] == CUR:
            return self.current
        if self.early is not None and self.early[1] == u - self.model.n_heads:
            before = self.early[1]
            x = self.early[0] + (self.cor_res[u] - self.cor_res[before])
            heads = before + np.flatnonzero(r.inside[0, before:u])
            if heads.size:  # the layer's circuit heads, just computed
                x = x + self.diffs.buffer[torch.from_numpy(self.diffs.row[heads])].sum(0)
            return x
        return self._mixed(r, np.array([0]), u)[0][0]

    def _fill(self, senders: np.ndarray) -> None:
        if self.clean is not None:
            self.diffs.fill(senders, self.clean.outputs, self.cor_out)

    def _mixed(
        self, r: _Rows, which: np.ndarray, u: int, extra: np.ndarray | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """The inputs of the MIX rows `which` of a stage reading `u` senders, ``[len(which), B,
        T, d]``, and those of `extra` rows.

        In exact arithmetic a row is the counterfactual residual plus its circuit senders'
        differences, or this run's residual minus its left-out ones. Where the rows read most of
        the senders written so far, one product over all of them in the first form; else the
        senders they read are gathered, each row taking the form with fewer of them.

        `extra` (``[k, u]``, circuit edges from live senders) are rows of a later receiver (the
        layer's MLP) over these senders only, added to the product when it reads every sender
        anyway: the product is bound by reading the senders, not by its rows, so they come
        almost free. Their inputs are returned only then (else None)."""
        diffs, cor_res, current = self.diffs, self.cor_res[u], self.current
        inside, outside = r.inside[which], r.outside[which]
        from_cor = inside.sum(1) <= outside.sum(1)
        coef = np.where(from_cor[:, None], inside, -outside.astype(np.float64))
        senders = np.flatnonzero(coef.any(0))
        self._fill(senders)
        base = cor_res.expand_as(current)
        read = np.flatnonzero(inside.any(0))
        if 4 * senders.size >= diffs.count and (diffs.row[read] >= 0).all():
            more = extra if extra is not None and (diffs.row[np.flatnonzero(extra.any(0))] >= 0).all() else None
            rows = inside if more is None else np.vstack([inside, more])
            used = np.flatnonzero(rows.any(0))
            dense = np.zeros((rows.shape[0], diffs.count))
            dense[:, diffs.row[used]] = rows[:, used]
            out = diffs.product(base, dense, None)
            return (out, None) if more is None else (out[: which.size], out[which.size :])
        out = diffs.product(base, coef[:, senders].astype(np.float64), diffs.row[senders])
        if not from_cor.all():
            out[torch.from_numpy(np.flatnonzero(~from_cor))] += current - cor_res
        return out, None

    def _heads(self, layer: int, r: _Rows, computed: np.ndarray, u: int, extra: np.ndarray | None) -> Tensor:
        """The outputs ``[len(computed), B, T, d]`` of `layer`'s heads `computed`, each from its own
        query, key and value inputs: a shared residual is normalised and projected once for all the
        heads reading it (keys and values once per group), a mixed input for its head alone.
        `extra`: the MLP's rows, computed with the heads' mix where it can (`_mixed`)."""
        model, current, cor_res = self.model, self.current, self.cor_res[u]
        a = model._attention_weights(layer)
        kind = r.kind.reshape(-1, 3)[computed]  # [n, 3]: (query, key, value) per computed head
        # the mixed rows, slot by slot, so that each slot's inputs are one slice
        mix_rows = np.concatenate([3 * computed[kind[:, slot] == MIX] + slot for slot in range(3)])
        normed: dict[int, Tensor] = {}
        if (kind == CUR).any():
            normed[CUR] = a.norm(current)
        if (kind == COR).any():
            normed[COR] = a.norm(cor_res.expand_as(current))
        mixed, early = self._mixed(r, mix_rows, u, extra) if mix_rows.size else (None, None)
        self.early = None if early is None else (early[0], u)
        scale = _rms_scale(a.norm, mixed) if mixed is not None else None
        if mixed is not None and scale is None:
            mixed = a.norm(mixed)
        weights = (a.wq, a.bq), (a.kv[0], a.kv[1]), (a.kv[2], a.kv[3])
        hd = a.wq.shape[1]
        qkv = torch.empty((3, computed.size, *current.shape[:2], hd), dtype=current.dtype, device=current.device)
        offset = 0
        for slot, (w, bias) in enumerate(weights):
            group = a.group if slot else 1  # keys and values: one projection per group
            for source in (CUR, COR, MIX):
                where = np.flatnonzero(kind[:, slot] == source)
                if where.size == 0:
                    continue
                heads = computed[where] // group
                if source == MIX:
                    assert mixed is not None
                    part = slice(offset, offset + where.size)
                    offset += where.size
                    y = _project_each(
                        mixed[part], w, bias, heads, None if scale is None else (a.norm.weight, scale[part])
                    )
                else:
                    unique, back = np.unique(heads, return_inverse=True)
                    y = _take(_project_heads(normed[source], w, bias, unique), back)
                _put(qkv[slot], where, y)
        return model.attend(layer, qkv[0], qkv[1], qkv[2], torch.from_numpy(computed))


def _stages(layout: Layout, mask: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Per stage (layer l's heads at ``2 l``, its MLP at ``2 l + 1``, the logits last) the
    senders it reads and its circuit rows."""
    h = layout.n_heads
    out = []
    for layer in range(layout.n_layers):
        u, s = layout.heads_upstream(layer), layout.heads_start[layer]
        out.append((u, mask[s : s + 3 * h * u].reshape(3 * h, u)))
        u, s = layout.mlp_upstream(layer), layout.mlp_start[layer]
        out.append((u, mask[s : s + u].reshape(1, u)))
    u = layout.n_senders
    out.append((u, mask[layout.logits_start :].reshape(1, u)))
    return out


def _stage_nodes(layout: Layout, stage: int) -> range:
    layer = stage // 2
    if stage % 2 == 0:
        first = layout.first_head(layer)
        return range(first, first + layout.n_heads)
    node = layout.mlp_node(layer)
    return range(node, node + 1)


def _project_heads(x: Tensor, w: Tensor, bias: Tensor | None, idx: np.ndarray) -> Tensor:
    """``[len(idx), B, T, hd]``: `x` ``[B, T, d]`` projected by the heads (or groups) `idx` of `w` ``[G, hd, d]``."""
    sel = torch.from_numpy(idx)
    wi = w[sel]
    n, hd, d = wi.shape
    y = torch.nn.functional.linear(x, wi.reshape(n * hd, d), None if bias is None else bias[sel].reshape(n * hd))
    out: Tensor = y.unflatten(-1, (n, hd)).permute(2, 0, 1, 3)
    return out


def _take(t: Tensor, index: np.ndarray) -> Tensor:
    """``t[index]``: a view where the index is a run of consecutive rows."""
    if _consecutive(index):
        return t[int(index[0]) : int(index[-1]) + 1]
    return t[torch.from_numpy(index)]


def _rms_scale(norm: torch.nn.Module, x: Tensor) -> Tensor | None:
    """``1 / rms(x)`` per position (``[.., 1]``) when `norm` is a LLaMA-family RMS norm on a
    float32 or narrower `x`: the norm is then ``weight * x * scale``, and a projection of it is
    the projection by ``W diag(weight)`` scaled after it, which spares three passes over every
    mixed input. None otherwise (another norm; float64, which the Hugging Face norm computes in
    float32 and this would not)."""
    eps = getattr(norm, "variance_epsilon", None)
    if eps is None or not type(norm).__name__.endswith("RMSNorm") or x.dtype == torch.float64:
        return None
    # the reduction accumulates in float32 either way; a float32 copy of x would cost a pass
    sq = torch.linalg.vector_norm(x, dim=-1, keepdim=True).float().square_()
    return torch.rsqrt(sq.div_(x.shape[-1]).add_(eps)).to(x.dtype)


def _put(t: Tensor, index: np.ndarray, value: Tensor) -> None:
    """``t[index] = value``: a slice where the index is a run of consecutive rows."""
    if _consecutive(index):
        t[int(index[0]) : int(index[-1]) + 1] = value
    else:
        t[torch.from_numpy(index)] = value


def _project_each(
    x: Tensor, w: Tensor, bias: Tensor | None, heads: np.ndarray, rms: tuple[Tensor, Tensor] | None
) -> Tensor:
    """``[m, B, T, hd]``: each of the inputs `x` ``[m, B, T, d]`` projected by its own head (or
    group) of `w` ``[G, hd, d]``. `rms` (the norm's weight, the inputs' ``1 / rms``): `x` is not
    normalised yet, and the RMS norm is folded in (`_rms_scale`)."""
    m, b, t, d = x.shape
    wi = _take(w, heads)
    if rms is not None:  # the norm's weight folded into the projection, its scale after it
        wi = wi * rms[0]
    y = torch.matmul(x.reshape(m, -1, d), wi.transpose(1, 2)).reshape(m, b, t, -1)
    if rms is not None:
        y = y * rms[1]
    return y if bias is None else y + _take(bias, heads)[:, None, None, :]


def _consecutive(index: np.ndarray) -> bool:
    return bool(index.size) and bool((np.diff(index) == 1).all())
