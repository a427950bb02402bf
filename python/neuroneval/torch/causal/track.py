"""The causal-variable track end to end: datasets on a model, featurizers fitted or trained on a
training split, IIA on a held-out split (SPEC section 7).

`evaluate_featurizers` runs every featurizer on every variable of a task at every (layer,
position) it is given. Per counterfactual dataset, the pairs the model gets right (base and
source) are split into the first `n_train` and the next `n_test`; nothing fitted or trained
sees a test pair. Unsupervised featurizers are fitted per (layer, position) on the training
pairs' hidden vectors there (bases and sources of every dataset): PCA's components, and the
selections of `size` neurons, components or SAE latents of largest variance. DAS is trained per
variable and unit at the sizes 1, `size` and 4 `size` and keeps the best on the last quarter of
the training pairs; DBM is trained per variable and unit over the features of neurons, PCA or
the SAE. ``random`` is an untrained DAS subspace of `size` directions (a random rotation).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from neuroneval.causal import CausalTask
from neuroneval.causal.iia import bootstrap_iia, summarize, unit_iia
from neuroneval.causal.results import CAUSAL_FEATURIZERS, CAUSAL_OPTIONS, CausalRun, FeaturizerResult
from neuroneval.errors import EmptyInputError, ParameterError
from neuroneval.interop.sae import SparseAutoencoder

from ..circuits.models import DecomposedModel
from .data import PairBatch, hits, prepare
from .featurizers import DAS, PCA, Featurizer, FullVector, Neurons, SAEFeatures, top_variance
from .interventions import Pass
from .training import choose_das, train_dbm

__all__ = ["evaluate_featurizers", "split_pairs"]

Progress = Callable[[str, int, int], None]
Tokenize = Callable[[str], Sequence[int]]


def _rows(batch: PairBatch, mask: np.ndarray) -> PairBatch | None:
    if not mask.any():
        return None
    k = torch.from_numpy(mask)

    def pick(p: Pass) -> Pass:
        return Pass([h[k] for h in p.hidden], p.top[k])

    return PairBatch(
        batch.index[mask],
        pick(batch.base),
        pick(batch.source),
        {n: t[k] for n, t in batch.base_positions.items()},
        {n: t[k] for n, t in batch.source_positions.items()},
        batch.expected[k],
        batch.keep[k],
    )


def split_pairs(
    batches: Sequence[PairBatch], n_train: int, n_test: int, name: str
) -> tuple[list[PairBatch], list[PairBatch]]:
    """The kept pairs of one dataset: the first `n_train` (by pair index) and the next `n_test`.

    Raises
    ------
    EmptyInputError
        Fewer kept pairs than ``n_train + n_test``, with how many the model gets right.
    """
    kept = np.sort(np.concatenate([b.index[b.keep.numpy()] for b in batches]))
    total = sum(len(b) for b in batches)
    if kept.size < n_train + n_test:
        raise EmptyInputError(
            f"dataset {name!r}: the model gets {kept.size} of {total} pairs right (base and source); "
            f"{n_train + n_test} are needed (lower n_train or n_test)"
        )
    train, test = set(kept[:n_train].tolist()), set(kept[n_train : n_train + n_test].tolist())
    out: tuple[list[PairBatch], list[PairBatch]] = ([], [])
    for part, chosen in zip(out, (train, test), strict=True):
        for b in batches:
            sub = _rows(b, np.fromiter((i in chosen for i in b.index), dtype=bool, count=len(b)))
            if sub is not None:
                part.append(sub)
    return out


def _vectors(batches: Sequence[PairBatch], layer: int, position: str) -> torch.Tensor:
    rows = []
    for b in batches:
        r = torch.arange(len(b))
        rows.append(b.base.hidden[layer + 1][r, b.base_positions[position]])
        rows.append(b.source.hidden[layer + 1][r, b.source_positions[position]])
    return torch.cat(rows)


def evaluate_featurizers(
    model: DecomposedModel,
    task: CausalTask,
    tokenize: Tokenize,
    *,
    model_name: str,
    featurizers: Sequence[str],
    layers: Sequence[int] | None = None,
    positions: Sequence[str] | None = None,
    sae: Mapping[int, SparseAutoencoder] | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> CausalRun:
    """IIA of each of `featurizers` (`CAUSAL_FEATURIZERS`) on every variable of `task`, at the
    residual stream after each of `layers` (default all) at each of `positions` (default the
    task's); `sae` maps a layer to its SAE (needed by ``sae`` and ``dbm-sae``); `options` are
    `CAUSAL_OPTIONS` (None: the declared default)."""
    opts = CAUSAL_OPTIONS.resolve(**options)
    unknown = [f for f in featurizers if f not in CAUSAL_FEATURIZERS]
    if unknown or not featurizers:
        raise ParameterError(f"unknown featurizer(s) {unknown}; choose from {', '.join(CAUSAL_FEATURIZERS)}")
    layer_list = list(range(model.n_layers)) if layers is None else [int(v) for v in layers]
    for layer in layer_list:
        if not 0 <= layer < model.n_layers:
            raise ParameterError(f"layer {layer} is out of range: the model has layers 0..{model.n_layers - 1}")
    pos_list = list(task.positions if positions is None else positions)
    for pos in pos_list:
        if pos not in task.positions:
            raise ParameterError(f"task {task.name!r} has the positions {', '.join(task.positions)}; got {pos!r}")
    if any(f in ("sae", "dbm-sae") for f in featurizers):
        missing = [layer for layer in layer_list if sae is None or layer not in sae]
        if missing:
            raise ParameterError(
                f"the sae featurizers need an SAE at every layer run; none is given for layer {missing[0]}"
            )
        for layer in layer_list:
            assert sae is not None
            if sae[layer].d_in != model.d_model:
                raise ParameterError(
                    f"the SAE of layer {layer} reads {sae[layer].d_in} values; the model's hidden vectors have {model.d_model} "
                    "(an SAE of another model?)"
                )
    size, seed = opts["size"], opts["seed"]
    if size > model.d_model:
        raise ParameterError(f"size {size} exceeds the model's hidden size {model.d_model}")

    # the datasets: draw twice what is needed, run every pair once, split the kept pairs
    needed = opts["n_train"] + opts["n_test"]
    datasets = task.datasets(2 * needed + 16, seed=seed)
    splits: dict[str, tuple[list[PairBatch], list[PairBatch]]] = {}
    described = []
    for i, data in enumerate(datasets):
        if progress is not None:
            progress("running the counterfactual pairs", i, len(datasets))
        batches = prepare(model, task, data, tokenize, batch_size=opts["batch_size"])
        splits[data.name] = split_pairs(batches, opts["n_train"], opts["n_test"], data.name)
        kept = int(sum(int(b.keep.sum()) for b in batches))
        described.append(
            {
                "name": data.name,
                "variable": data.variable,
                "drawn": len(data),
                "kept": kept,
                "n_train": opts["n_train"],
                "n_test": opts["n_test"],
            }  # fmt: skip
        )
    all_train = [b for tr, _ in splits.values() for b in tr]
    sizes = {d.name: len(d) for d in datasets}

    # unsupervised fits per unit
    fits: dict[tuple[int, str], dict[str, Any]] = {}
    for layer in layer_list:
        for pos in pos_list:
            vectors = _vectors(all_train, layer, pos)
            fit: dict[str, Any] = {}
            if any(f in ("neurons", "dbm-neurons") for f in featurizers):
                fit["neurons"] = top_variance(vectors, size)
            if any(f in ("pca", "dbm-pca") for f in featurizers):
                pca = PCA(vectors)
                fit["pca"] = pca.select(list(range(size)))
            if any(f in ("sae", "dbm-sae") for f in featurizers):
                assert sae is not None
                features = SAEFeatures(sae[layer])
                fit["sae"] = features.select(top_variance(features.encode(vectors), min(size, features.n_features)))
            fits[(layer, pos)] = fit

    results = []
    variables = task.variables
    jobs = [(v, f) for v in variables for f in featurizers]
    for j, (variable, name) in enumerate(jobs):
        if progress is not None:
            progress(f"{name} on {variable}", j, len(jobs))
        start = time.perf_counter()
        names = [d.name for d in datasets if d.variable == variable]
        train = [b for n in names for b in splits[n][0]]
        cut = max(1, len(train) * 3 // 4) if len(train) > 1 else len(train)
        built: dict[tuple[int, str], Featurizer] = {}
        for layer in layer_list:
            for pos in pos_list:
                built[(layer, pos)] = _featurizer(name, model, fits[(layer, pos)], train, cut, layer, pos, opts)
        per_dataset = {
            n: hits(model, splits[n][1], sizes[n], layer_list, pos_list, lambda layer, pos, b=built: b[(layer, pos)])
            for n in names
        }
        keep = {n: _test_mask(splits[n][1], per_dataset[n].shape[2]) for n in names}
        unit = unit_iia(per_dataset, keep)
        average, highest = summarize(unit)
        a_int, h_int = bootstrap_iia(per_dataset, keep, n_boot=opts["n_boot"], level=opts["level"], seed=seed)
        results.append(
            FeaturizerResult(
                name,
                variable,
                unit,
                average,
                highest,
                a_int,
                h_int,
                time.perf_counter() - start,
                {n: per_dataset[n][:, :, keep[n]] for n in names},
            )  # fmt: skip
        )
    if progress is not None:
        progress("done", len(jobs), len(jobs))
    return CausalRun(
        model_name, task.name, tuple(layer_list), tuple(pos_list), tuple(described), tuple(results),
        {k: v for k, v in opts.items()},
    )  # fmt: skip


def _test_mask(batches: Sequence[PairBatch], n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    for b in batches:
        mask[b.index] = True
    if not mask.any():
        raise EmptyInputError("a counterfactual dataset has no test pair the model gets right")
    return mask


def _featurizer(
    name: str,
    model: DecomposedModel,
    fit: dict[str, Any],
    train: list[PairBatch],
    cut: int,
    layer: int,
    pos: str,
    opts: dict[str, Any],
) -> Featurizer:
    size, seed, epochs = opts["size"], opts["seed"], opts["epochs"]
    if name == "full":
        return FullVector(model.d_model)
    if name == "neurons":
        return Neurons(model.d_model, fit["neurons"])
    if name in ("pca", "sae"):
        return fit[name]  # type: ignore[no-any-return]
    if name == "random":
        return DAS(model.d_model, size, seed=seed + 7919)
    if name == "das":
        sizes = sorted({s for s in (1, size, 4 * size) if s <= model.d_model})
        return choose_das(model, train[:cut], train[cut:], layer, pos, sizes, epochs=epochs, seed=seed)
    inner_name = name.removeprefix("dbm-")
    inner = FullVector(model.d_model) if inner_name == "neurons" else fit[inner_name]
    return train_dbm(model, inner, train, layer, pos, epochs=epochs, seed=seed)
