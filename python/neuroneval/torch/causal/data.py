"""A counterfactual dataset on a model: tokenized pairs in batches, their plain runs, the filter
to examples the model gets right, and the hits of interchange interventions.

`prepare` tokenizes every base and source through the task's prompts, finds each named position
in both, groups pairs whose base and source prompts have the same lengths (no padding), and runs
one base pass and one source pass per batch. A pair is kept when the model's top next token is
the causal model's output on the base and on the source (MIB's filter). `hits` applies one
featurizer per (layer, position) to every kept pair.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from neuroneval.causal import CausalTask, CounterfactualDataset
from neuroneval.errors import ParameterError, ShapeError

from ..circuits.models import DecomposedModel
from .featurizers import Featurizer
from .interventions import Pass, forward, intervened_logits

__all__ = ["PairBatch", "hits", "prepare"]

Tensor = torch.Tensor
Tokenize = Callable[[str], Sequence[int]]


@dataclass
class PairBatch:
    """Pairs of one dataset with equal prompt lengths: their runs, positions and expected token."""

    index: np.ndarray
    base: Pass
    source: Pass
    base_positions: dict[str, Tensor]
    source_positions: dict[str, Tensor]
    expected: Tensor
    keep: Tensor

    def __len__(self) -> int:
        return int(self.index.size)

    def kept(self) -> PairBatch | None:
        """The pairs the model gets right, or None when there is none."""
        k = self.keep
        if not bool(k.any()):
            return None

        def rows(p: Pass) -> Pass:
            return Pass([h[k] for h in p.hidden], p.top[k])

        return replace(
            self,
            index=self.index[k.numpy()],
            base=rows(self.base),
            source=rows(self.source),
            base_positions={n: t[k] for n, t in self.base_positions.items()},
            source_positions={n: t[k] for n, t in self.source_positions.items()},
            expected=self.expected[k],
            keep=self.keep[k],
        )


def _answer_id(tokenize: Tokenize, text: str) -> int:
    ids = list(tokenize(text))
    if len(ids) != 1:
        raise ShapeError(f"the answer {text!r} tokenizes to {len(ids)} tokens {ids}; IIA compares single tokens")
    return int(ids[0])


def prepare(
    model: DecomposedModel, task: CausalTask, data: CounterfactualDataset, tokenize: Tokenize, *, batch_size: int
) -> list[PairBatch]:
    """`data`'s pairs as batches with their plain runs (every pair, kept or not)."""
    rows = []
    for i, (b, s) in enumerate(zip(data.bases, data.sources, strict=True)):
        b_ids, b_pos = task.token_positions(b, tokenize)
        s_ids, s_pos = task.token_positions(s, tokenize)
        answers = [
            _answer_id(tokenize, task.answer_text(o))
            for o in (data.expected[i], data.base_outputs[i], data.source_outputs[i])
        ]
        rows.append((i, b_ids, s_ids, b_pos, s_pos, answers))
    groups: dict[tuple[int, int], list[int]] = {}
    for r, row in enumerate(rows):
        groups.setdefault((row[1].size, row[2].size), []).append(r)
    out = []
    for key in sorted(groups):
        members = groups[key]
        for start in range(0, len(members), batch_size):
            part = [rows[r] for r in members[start : start + batch_size]]
            base = forward(model, torch.from_numpy(np.stack([p[1] for p in part])))
            source = forward(model, torch.from_numpy(np.stack([p[2] for p in part])))
            ids = torch.tensor([p[5] for p in part], dtype=torch.int64)
            keep = (base.top == ids[:, 1]) & (source.top == ids[:, 2])
            out.append(
                PairBatch(
                    np.asarray([p[0] for p in part], dtype=np.int64),
                    base,
                    source,
                    {n: torch.tensor([p[3][n] for p in part]) for n in task.positions},
                    {n: torch.tensor([p[4][n] for p in part]) for n in task.positions},
                    ids[:, 0],
                    keep,
                )
            )
    return out


def hits(
    model: DecomposedModel,
    batches: Sequence[PairBatch],
    n: int,
    layers: Sequence[int],
    positions: Sequence[str],
    featurizer: Callable[[int, str], Featurizer],
    *,
    tick: Callable[[], None] | None = None,
) -> np.ndarray:
    """Bool ``[len(layers), len(positions), n]``: whether the intervened model's top next token
    is the expected one, per pair index (pairs absent from `batches` stay False)."""
    out = np.zeros((len(layers), len(positions), n), dtype=bool)
    for li, layer in enumerate(layers):
        for pi, pos in enumerate(positions):
            f = featurizer(layer, pos)
            with torch.no_grad():
                for batch in batches:
                    if pos not in batch.base_positions:
                        raise ParameterError(
                            f"no token position {pos!r}; the task has {', '.join(batch.base_positions)}"
                        )
                    logits = intervened_logits(
                        model,
                        batch.base,
                        batch.source,
                        layer,
                        batch.base_positions[pos],
                        batch.source_positions[pos],
                        f,
                    )
                    out[li, pi, batch.index] = (logits.argmax(-1) == batch.expected).numpy()
            if tick is not None:
                tick()
    return out
