"""A counterfactual dataset on a model: tokenized pairs in batches, their plain runs, the filter
to examples the model gets right, and the hits of interchange interventions.

`prepare` tokenizes every base and source through the task's prompts, finds each named position
in both, batches the pairs in order of length (right-padded), and runs one base pass and one
source pass per batch. A pair is kept when the model's top next token is
the causal model's output on the base and on the source (MIB's filter). `unit_hits` applies
featurizers (stacked) at one (layer, position) to every pair given.
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
from .interventions import Pass, forward, stacked_logits

__all__ = ["PairBatch", "prepare", "regroup", "unit_hits"]

Tensor = torch.Tensor
Tokenize = Callable[[str], Sequence[int]]


@dataclass
class PairBatch:
    """Pairs of one dataset (right-padded): their runs, positions, expected token and whether the
    model gets base and source right (`keep`)."""

    index: np.ndarray
    base: Pass
    source: Pass
    base_positions: dict[str, Tensor]
    source_positions: dict[str, Tensor]
    expected: Tensor
    keep: Tensor

    def __len__(self) -> int:
        return int(self.index.size)

    def rows(self, mask: np.ndarray) -> PairBatch | None:
        """The pairs where `mask` (bool ``[B]``) holds, or None when there is none."""
        if not mask.any():
            return None
        k = torch.from_numpy(mask)
        return replace(
            self,
            index=self.index[mask],
            base=self.base.rows(k),
            source=self.source.rows(k),
            base_positions={n: t[k] for n, t in self.base_positions.items()},
            source_positions={n: t[k] for n, t in self.source_positions.items()},
            expected=self.expected[k],
            keep=self.keep[k],
        )

    @staticmethod
    def concat(batches: Sequence[PairBatch]) -> PairBatch:
        """`batches` as one batch (right-padded to the longest prompt)."""
        first = batches[0]
        return PairBatch(
            np.concatenate([b.index for b in batches]),
            Pass.concat([b.base for b in batches]),
            Pass.concat([b.source for b in batches]),
            {n: torch.cat([b.base_positions[n] for b in batches]) for n in first.base_positions},
            {n: torch.cat([b.source_positions[n] for b in batches]) for n in first.source_positions},
            torch.cat([b.expected for b in batches]),
            torch.cat([b.keep for b in batches]),
        )


def regroup(batches: Sequence[PairBatch], batch_size: int) -> list[PairBatch]:
    """Consecutive `batches` merged into batches of at most `batch_size` pairs: what is left of
    full batches after the filter and the split runs in as few passes as it fits in."""
    out: list[PairBatch] = []
    group: list[PairBatch] = []
    for b in batches:
        if group and sum(len(g) for g in group) + len(b) > batch_size:
            out.append(PairBatch.concat(group))
            group = []
        group.append(b)
    if group:
        out.append(PairBatch.concat(group))
    return out


def _answer_id(tokenize: Tokenize, text: str) -> int:
    ids = list(tokenize(text))
    if len(ids) != 1:
        raise ShapeError(f"the answer {text!r} tokenizes to {len(ids)} tokens {ids}; IIA compares single tokens")
    return int(ids[0])


def _padded(prompts: list[np.ndarray]) -> tuple[Tensor, Tensor]:
    """Token ids right-padded with each prompt's own last token, and each prompt's last position."""
    n = max(p.size for p in prompts)
    tokens = np.stack([np.pad(p, (0, n - p.size), mode="edge") for p in prompts])
    return torch.from_numpy(tokens), torch.tensor([p.size - 1 for p in prompts], dtype=torch.int64)


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
    # in order of length, so that a batch pads little (a pad is never read: attention is causal)
    order = sorted(range(len(rows)), key=lambda r: (rows[r][1].size, rows[r][2].size, r))
    out = []
    for start in range(0, len(order), batch_size):
        part = [rows[r] for r in order[start : start + batch_size]]
        base = forward(model, *_padded([p[1] for p in part]))
        source = forward(model, *_padded([p[2] for p in part]))
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


#: The most rows (featurizers times pairs) one stacked test pass runs.
STACKED_ROWS = 512


def unit_hits(
    model: DecomposedModel,
    batches: Sequence[PairBatch],
    n: int,
    layer: int,
    position: str,
    featurizers: Sequence[Featurizer],
    *,
    site: str | None = None,
) -> np.ndarray:
    """Bool ``[k, n]``: whether the intervened model's top next token is the expected one, per
    featurizer of `featurizers` at (layer, position) and `site` (`SITES`), and pair index
    (pairs absent from `batches` stay False). Featurizers run stacked, at most
    `STACKED_ROWS` rows a pass."""
    out = np.zeros((len(featurizers), n), dtype=bool)
    with torch.no_grad():
        for batch in batches:
            if position not in batch.base_positions:
                raise ParameterError(f"no token position {position!r}; the task has {', '.join(batch.base_positions)}")
            group = max(1, STACKED_ROWS // len(batch))
            for first in range(0, len(featurizers), group):
                logits = stacked_logits(
                    model, batch.base, batch.source, layer, batch.base_positions[position],
                    batch.source_positions[position], featurizers[first : first + group], site=site,
                )  # fmt: skip
                out[first : first + group, batch.index] = (logits.argmax(-1) == batch.expected).numpy()
    return out
