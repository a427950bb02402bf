"""The SAE study on a causal language model, per token: SmolLM2-135M-Instruct's MLP neurons
against a TopK SAE of the same width trained on the MLP's input (``neuroneval demo --sae
--model smollm2``).

The MiniLM study (`sae_study`) asks the question at the sentence level; the NeurIPS 2025 seed
asks it of a causal LM's feed-forward "key-value memories", per token. Here:

1. **Corpus**: gensim's shortened Wikipedia dump (`sae_study.wiki_sentences`), three disjoint
   sets of sentences: SAE training, explaining, probing. Every token but each sentence's first
   is a row (the first position of a causal LM is an attention sink, whose activations are
   outliers of another kind than the text's).
2. **Units** at layer `layer` (of 30): *neurons* are the MLP's 1,536 hidden units (the input of
   ``down_proj``: SiLU(gate) x up); *latents* are a TopK SAE with as many latents trained here
   on the MLP's input (``post_attention_layernorm``, 576 wide), saved in SAELens's layout and
   read back with `neuroneval.interop.read_saelens`. Both come from one `neuroneval.torch.extract`
   pass (the SAE through its ``sae=`` argument).
3. **Tokens and their context**: the LLM explainer reads each of a unit's top tokens in a
   window of `context` tokens on each side, the token marked (``the old «bank» of the
   river``); the judge (MiniLM, a sentence judge, which embeds all the text it is given) and
   the lexicon explainer read the token alone (`judge_context` 0). That is measured, not
   chosen: judging empath category names against each token's own category membership,
   MiniLM's mean AUC is 0.899 on the token alone, 0.783 with one neighbour on each side,
   0.729 with three and 0.703 with six (9,522 tokens of the corpus's last 400 sentences,
   which no study size uses, 53 categories; ``python -m
   neuroneval.experiments.sae_study_smollm2 --judge-check``).
4. **Explainers**: ``lexicon`` (the empath category whose presence in the token best matches
   the unit's top 5% tokens, IoU), ``top-tokens`` (the three tokens most often among the unit's
   `top_tokens` highest), ``smollm2`` (SmolLM2 itself asked what the marked words of its top
   `top_llm` windows have in common); with `endpoint`, also the model behind an
   OpenAI-compatible endpoint, asked the same (``openai:<model>``). Then
   `sae_study.judge_and_compare`: explainers ranked with paired intervals within each
   population, latents against neurons with unpaired ones.
5. **The causal lens** (`causal_lens`): MIB's causal-variable track on IOI at the same layer,
   the SAE's latents at the MLP's input and the neurons at its hidden units (`CAUSAL_LENS`),
   latents against neurons with paired intervals, and what swapping the whole residual stream or
   MLP input there does (`whole_vector_effects`).

Writes ``DIR/sae_study_smollm2/`` with the files of the MiniLM study (``explanations.csv``,
``neurons/``, ``latents/``, ``populations.csv``, ``summary.json``, the SAE in ``saes/layer_<l>/``
(which ``neuroneval causal run --sae`` reads), the lens's runs in ``causal/<site>/``, and per population
the probing activations, concepts and explanations that ``neuroneval compare`` reads). The
probing activations hold the drawn units only, so their explanations name a unit by its column
there; ``explanations.csv`` gives both (``unit``: the model's neuron or SAE latent, ``column``).

Examples
--------
>>> from neuroneval.experiments.sae_study_smollm2 import SMALL
>>> SMALL.layer
15
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from neuroneval.causal.results import CAUSAL_SITE_HOOKS
from neuroneval.label.endpoint import ENDPOINT_OPTIONS

from .sae_study import (
    ExplainerEndpoint,
    endpoint_explanations,
    few_shot_chat,
    judge_and_compare,
    lexicon_explanations,
    llm_explanations,
    sized,
    study_arguments,
    train_saved_sae,
    wiki_sentences,
)

__all__ = [
    "CAUSAL_LENS",
    "EXPLAINERS",
    "FULL",
    "LATENTS_AGAINST_NEURONS",
    "SAES",
    "SMALL",
    "TokenStudySize",
    "causal_lens",
    "expose_neurons",
    "judge_context_check",
    "main",
    "marked_windows",
    "population_shape",
    "run",
    "whole_vector_effects",
]


@dataclass(frozen=True)
class TokenStudySize:
    """The sizes of every set of the study (sentences; their tokens are the rows)."""

    name: str
    train_sentences: int  # SAE training
    explain_sentences: int  # explanations are written from these tokens
    probe_sentences: int  # explanations are judged and scored on these tokens
    n_units: int  # per population (neurons, latents), drawn among the live ones
    layer: int = 15
    k: int = 32  # TopK
    epochs: int = 8
    batch_size: int = 2048
    context: int = 6  # tokens on each side of a token that the LLM explainer reads
    judge_context: int = 0  # tokens on each side of a token that the judge and the lexicon read
    seed: int = 0
    top_llm: int = 8  # windows shown to the LLM explainer
    top_tokens: int = 20  # highest tokens the top-tokens explainer counts
    n_boot: int = 1000
    # the causal lens: IOI's pairs per dataset that train and test, features a selection swaps
    causal_train: int = 64
    causal_test: int = 64
    causal_size: int = 16
    causal_epochs: int = 2
    das_lr: float = 0.04


FULL = TokenStudySize("full", train_sentences=3_000, explain_sentences=1_500, probe_sentences=1_000, n_units=100)
SMALL = TokenStudySize(
    "small", train_sentences=200, explain_sentences=100, probe_sentences=80, n_units=6, epochs=2,
    causal_train=4, causal_test=6, causal_epochs=1, n_boot=200,
)  # fmt: skip
EXPLAINERS = ("lexicon", "top-tokens", "smollm2")
#: The causal lens's featurizers per site of the study's layer: the SAE reads the MLP's input,
#: the neurons are the MLP's hidden units (swapping either whole swaps the MLP's output).
CAUSAL_LENS = {
    "mlp-input": ("full", "pca", "sae", "das", "random", "dbm-pca", "dbm-sae"),
    "mlp-neurons": ("full", "neurons", "dbm-neurons"),
}
#: Latents against neurons in the causal lens: the 16 of largest variance, and a learned mask.
LATENTS_AGAINST_NEURONS = (("sae", "neurons"), ("dbm-sae", "dbm-neurons"))
#: The study's SAE, in a directory ``neuroneval causal run --sae`` reads (``layer_<l>/``).
SAES = "saes"
LLM_SYSTEM = "You name what the marked words have in common, in two to four words."
LLM_QUESTION = "In two to four words, what do the words in « » have in common?"
LLM_SHOTS = (
    (("the big «dog» barked", "her «cat» slept on", "rode a «horse» into"), "animals"),
    (("he paid «ten» dollars", "about «forty» people came", "in «1990» the"), "numbers"),
)


def llm_messages(windows: Sequence[str]) -> list[dict[str, str]]:
    """The chat of the LLM explainer: the system turn, two worked examples, the unit's windows."""
    return few_shot_chat(LLM_SYSTEM, "Examples", LLM_QUESTION, LLM_SHOTS, windows)


# --------------------------------------------------------------------------- tokens


def expose_neurons(model: Any, layer: int) -> str:
    """Puts an identity module in front of layer `layer`'s ``down_proj``, so that the MLP's
    neurons (the projection's input) are a module's output, which `extract` stores; returns
    that module's name. The forward pass is unchanged."""
    from collections import OrderedDict

    import torch

    mlp = model.model.layers[layer].mlp
    if not isinstance(mlp.down_proj, torch.nn.Sequential):
        mlp.down_proj = torch.nn.Sequential(OrderedDict(neurons=torch.nn.Identity(), down=mlp.down_proj))
    return f"model.layers.{layer}.mlp.down_proj.neurons"


@contextlib.contextmanager
def _body_through(model: Any, layer: int) -> Iterator[Any]:
    """The model's decoder body cut after layer `layer` (restored on exit): the activations at
    that layer do not depend on the layers above it or on the head, which would cost about
    twice as much again (the head alone is 49,152 x 576 per token)."""
    body = model.model
    full = body.layers
    body.layers = full[: layer + 1]
    try:
        yield body
    finally:
        body.layers = full


def _token_ids(tokenizer: Any, sentences: Sequence[str]) -> list[list[int]]:
    return [list(tokenizer(s, truncation=True, max_length=64)["input_ids"]) for s in sentences]


def _batches(ids: list[list[int]], pad: int, batch_size: int = 32) -> list[dict[str, Any]]:
    """Right-padded batches of `ids` with their attention masks (a list: `extract` may read it twice)."""
    import torch

    out = []
    for start in range(0, len(ids), batch_size):
        chunk = ids[start : start + batch_size]
        width = max(len(x) for x in chunk)
        input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, x in enumerate(chunk):
            input_ids[row, : len(x)] = torch.tensor(x)
            mask[row, : len(x)] = 1
        out.append({"input_ids": input_ids, "attention_mask": mask})
    return out


def marked_windows(
    ids: list[list[int]], documents: np.ndarray, positions: np.ndarray, decode: Any, context: int
) -> list[str]:
    """Each row's token in its context: `context` tokens before and after, the token in « »
    (its leading space, if any, kept outside the marks); with `context` 0, the token alone,
    unmarked."""
    out = []
    for d, p in zip(documents.tolist(), positions.tolist(), strict=True):
        seq = ids[d]
        token = decode(seq[p : p + 1])
        if context == 0:
            out.append(token.strip())
            continue
        lead = " " if token.startswith(" ") else ""
        before, after = decode(seq[max(0, p - context) : p]), decode(seq[p + 1 : p + 1 + context])
        out.append(f"{before}{lead}«{token.strip()}»{after}".strip())
    return out


def top_token_explanations(acts: np.ndarray, tokens: Sequence[str], top: int) -> list[str]:
    """Per unit (column of `acts`): the three tokens most often among its `top` highest rows."""
    out = []
    for u in range(acts.shape[1]):
        best = np.argsort(-acts[:, u], kind="stable")[:top]
        counts = Counter(t for t in (tokens[i].strip() for i in best) if t)
        words = [w for w, _ in counts.most_common(3)] or ["punctuation"]
        out.append("words like " + ", ".join(words))
    return out


def population_shape(acts: np.ndarray, tokens: Sequence[str], top: int) -> dict[str, float]:
    """What a population's units are like on tokens (columns of `acts`), as means over units:
    the share of tokens a unit is positive on, and among its `top` highest tokens the share of
    its most common token and the number of distinct tokens."""
    common, distinct = [], []
    for u in range(acts.shape[1]):
        counts = Counter(tokens[i].strip() for i in np.argsort(-acts[:, u], kind="stable")[:top])
        common.append(counts.most_common(1)[0][1] / top)
        distinct.append(len(counts))
    return {
        "positive": float((acts > 0).mean()),
        "top_common": float(np.mean(common)),
        "top_distinct": float(np.mean(distinct)),
    }


# --------------------------------------------------------------------------- the study


def _split(size: TokenStudySize) -> tuple[list[str], list[str], list[str], int]:
    total = size.train_sentences + size.explain_sentences + size.probe_sentences
    sentences = wiki_sentences(total)
    if len(sentences) < total:
        raise ValueError(f"the corpus has {len(sentences)} sentences; the {size.name} study needs {total}")
    order = np.random.default_rng(size.seed).permutation(total)
    cut = (size.train_sentences, size.train_sentences + size.explain_sentences)
    train = [sentences[i] for i in order[: cut[0]]]
    explain = [sentences[i] for i in order[cut[0] : cut[1]]]
    probe = [sentences[i] for i in order[cut[1] :]]
    return train, explain, probe, len(sentences)


def _rows(store: Any, layer: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of every token but each sentence's first: (row indices, documents, positions)."""
    ids = np.asarray(store[layer].rows)
    documents, positions = ids["document"].astype(np.int64), ids["position"].astype(np.int64)
    kept = np.flatnonzero(positions > 0)
    return kept, documents[kept], positions[kept]


def _dense(store: Any, layer: str, kept: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(store[layer].source.dense(), dtype=np.float32)[kept])


def run(
    out: Path,
    size: TokenStudySize = FULL,
    log: Any = print,
    loaded: tuple[Any, Any] | None = None,
    endpoint: ExplainerEndpoint | None = None,
) -> dict[str, Any]:
    """Run the whole study and write ``out``; returns the summary (also ``summary.json``).
    `loaded` lends SmolLM2 as `load_smollm2` returns it (tokenizer, model); default: loaded here.
    `endpoint` adds its model as an explainer (``openai:<model>``), asked what SmolLM2 is."""
    import torch

    from neuroneval.torch import extract
    from neuroneval.torch.circuits.track import load_smollm2

    torch.manual_seed(size.seed)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    train, explain, probe, corpus = _split(size)
    tokenizer, model = loaded or load_smollm2()
    # names within the decoder body, which `_body_through` runs in place of the whole model
    neurons = expose_neurons(model, size.layer).removeprefix("model.")
    mlp_in = f"layers.{size.layer}.post_attention_layernorm"
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = {
        name: _token_ids(tokenizer, texts) for name, texts in (("train", train), ("explain", explain), ("probe", probe))
    }

    with _body_through(model, size.layer) as body:
        store = extract(
            body, _batches(ids["train"], pad), [mlp_in], out / "store-train",
            reduce="tokens", dtype="float32", progress=False,
        )  # fmt: skip
    kept, _, _ = _rows(store, mlp_in)
    x = _dense(store, mlp_in, kept)
    log(f"SAE training: {x.shape[0]:,} tokens x {x.shape[1]} of {mlp_in} ({time.perf_counter() - t0:.0f} s)")
    sae, fvu = train_saved_sae(
        x, model.config.intermediate_size, size, out / SAES / f"layer_{size.layer}", log,
        hook_name=f"blocks.{size.layer}.{CAUSAL_SITE_HOOKS['mlp-input']}",
    )  # fmt: skip

    per_set: dict[str, dict[str, Any]] = {}
    decode = tokenizer.decode
    for name in ("explain", "probe"):
        with _body_through(model, size.layer) as body:
            s = extract(
                body, _batches(ids[name], pad), [mlp_in, neurons], out / f"store-{name}",
                reduce="tokens", dtype="float32", sae={mlp_in: sae}, progress=False,
            )  # fmt: skip
        kept, documents, positions = _rows(s, neurons)
        per_set[name] = {
            "neurons": _dense(s, neurons, kept),
            "latents": _dense(s, mlp_in, kept),
            "windows": marked_windows(ids[name], documents, positions, decode, size.context),
            "judged": marked_windows(ids[name], documents, positions, decode, size.judge_context),
            "tokens": marked_windows(ids[name], documents, positions, decode, 0),
        }
    n_explain, n_probe = len(per_set["explain"]["windows"]), len(per_set["probe"]["windows"])
    log(f"tokens: {x.shape[0]:,} train, {n_explain:,} explain, {n_probe:,} probe ({time.perf_counter() - t0:.0f} s)")

    rng = np.random.default_rng([size.seed, 1])
    chosen: dict[str, np.ndarray] = {}
    for population in ("neurons", "latents"):
        e, p = per_set["explain"][population], per_set["probe"][population]
        # live: varies on both sets and is positive on at least 1% of the explaining tokens
        live = np.flatnonzero((e.std(axis=0) > 0) & (p.std(axis=0) > 0) & ((e > 0).mean(axis=0) >= 0.01))
        chosen[population] = np.sort(rng.choice(live, size=min(size.n_units, len(live)), replace=False))
        log(f"{population}: {len(live)} live of {e.shape[1]}, {len(chosen[population])} drawn")

    explainers = EXPLAINERS + ((endpoint.explainer,) if endpoint else ())
    rows: list[dict[str, Any]] = []
    ex = per_set["explain"]
    shapes = {}
    for population in ("neurons", "latents"):
        acts = ex[population][:, chosen[population]]
        shapes[population] = population_shape(acts, ex["tokens"], size.top_tokens)
        log(f"  {population}: " + ", ".join(f"{k} {v:.3f}" for k, v in shapes[population].items()))
        written = {
            "lexicon": lexicon_explanations(acts, ex["judged"]),
            "top-tokens": top_token_explanations(acts, ex["tokens"], size.top_tokens),
        }
        log(f"  {population}: explaining with smollm2 ...")
        written["smollm2"] = llm_explanations(
            acts, ex["windows"], size.top_llm, log, messages=llm_messages, model_and_tokenizer=(model, tokenizer)
        )
        if endpoint is not None:
            log(f"  {population}: explaining with {endpoint.explainer} ...")
            written[endpoint.explainer] = endpoint_explanations(
                acts, ex["windows"], size.top_llm, log, endpoint=endpoint, messages=llm_messages
            )
        for explainer in explainers:
            for j, unit in enumerate(chosen[population]):
                rows.append(
                    {
                        "population": population,
                        "unit": int(unit),
                        "column": j,
                        "explainer": explainer,
                        "explanation": written[explainer][j],
                    }
                )
    # (the probing files hold the drawn units only: their columns, not all 1,536, at ~10^4 tokens)
    explanations = pl.DataFrame(rows)
    explanations.write_csv(out / "explanations.csv")
    by_column = explanations.drop("unit").rename({"column": "unit"})

    summary: dict[str, Any] = {
        "size": asdict(size),
        "fvu": fvu,
        "corpus_sentences": corpus,
        "tokens": {"train": int(x.shape[0]), "explain": n_explain, "probe": n_probe},
        "shapes": shapes,
    }
    activations = {population: per_set["probe"][population][:, chosen[population]] for population in chosen}
    summary["populations"] = judge_and_compare(
        out,
        by_column,
        per_set["probe"]["judged"],
        activations,
        explainers,
        n_boot=size.n_boot,
        seed=size.seed,
        log=log,
    )
    began = time.perf_counter()
    summary["causal"] = causal_lens(out / "causal", (model, tokenizer), sae, size, log)
    summary["causal_seconds"] = time.perf_counter() - began
    summary["seconds"] = time.perf_counter() - t0
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def causal_lens(out: Path, loaded: tuple[Any, Any], sae: Any, size: TokenStudySize, log: Any = print) -> dict[str, Any]:
    """MIB's causal-variable track on the study's units: IIA of IOI's variables at layer
    `size.layer` of SmolLM2 (`loaded`: model, tokenizer), with the featurizers of
    `CAUSAL_LENS` at the MLP's input (the study's SAE among them) and at its hidden units (the
    study's neurons); runs written to ``out/<site>/``. Returns the table's rows and, per
    variable, each latent featurizer's IIA minus its neuron counterpart's (`LATENTS_AGAINST_NEURONS`),
    with paired intervals."""
    from neuroneval.causal import ioi_task
    from neuroneval.causal.iia import bootstrap_difference
    from neuroneval.causal.results import causal_table, write_causal_run
    from neuroneval.torch.causal import evaluate_featurizers, run_pairs
    from neuroneval.torch.circuits import decompose

    model, tokenizer = loaded
    decomposed, task = decompose(model), ioi_task()

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False).input_ids)

    began = time.perf_counter()
    # the pairs' plain runs serve both sites and the whole-vector swaps
    pairs = run_pairs(decomposed, task, tokenize, n_train=size.causal_train, n_test=size.causal_test, seed=size.seed)
    log(f"causal lens: the counterfactual pairs run once ({time.perf_counter() - began:.0f} s)")
    runs = {}
    for site, featurizers in CAUSAL_LENS.items():
        began = time.perf_counter()
        runs[site] = evaluate_featurizers(
            decomposed, task, tokenize, model_name="smollm2", featurizers=featurizers, layers=[size.layer], sae={size.layer: sae}, site=site,
            n_train=size.causal_train, n_test=size.causal_test, size=size.causal_size, epochs=size.causal_epochs,
            das_lr=size.das_lr, seed=size.seed, n_boot=size.n_boot, pairs=pairs,
        )  # fmt: skip
        write_causal_run(runs[site], out / site)
        log(f"causal lens at the {site} site: {', '.join(featurizers)} ({time.perf_counter() - began:.0f} s)")
    differences = []
    for latent, neuron in LATENTS_AGAINST_NEURONS:
        for variable in task.variables:
            a, b = runs["mlp-input"].result(latent, variable), runs["mlp-neurons"].result(neuron, variable)
            keep = {name: np.ones(h.shape[2], dtype=bool) for name, h in a.hits.items()}  # hits hold kept pairs only
            (delta, interval), _ = bootstrap_difference(a.hits, b.hits, keep, n_boot=size.n_boot, seed=size.seed)
            differences.append({"variable": variable, "latents": latent, "neurons": neuron,
                                "difference": delta, "low": interval[0], "high": interval[1]})  # fmt: skip
            log(f"  {variable}: {latent} - {neuron} = {delta:+.3f} [{interval[0]:+.3f}, {interval[1]:+.3f}]")
    began = time.perf_counter()
    whole = whole_vector_effects(decomposed, task, pairs, size)
    log(f"the whole vector at the residual and mlp-input sites ({time.perf_counter() - began:.0f} s)")
    return {"iia": causal_table(list(runs.values())), "differences": differences, "whole_vector": whole}


def whole_vector_effects(decomposed: Any, task: Any, pairs: Any, size: TokenStudySize) -> list[dict[str, Any]]:
    """What swapping a whole vector at layer `size.layer` does, on the causal lens's test pairs
    (`pairs`, `run_pairs`'s), per dataset, position and site (the residual stream after the
    layer, and the MLP's input): the share of pairs moved to the counterfactual answer (IIA) and
    the mean shift of the logit difference, the counterfactual answer's logit minus the base
    answer's, from the plain run."""
    import torch

    from neuroneval.torch.causal import FullVector, Neurons, site_width, stacked_logits

    rows = []
    for data in pairs.datasets:
        test = pairs.splits[data.name][1]
        for position, site in ((p, s) for p in task.positions for s in ("residual", "mlp-input")):
            width = site_width(decomposed, size.layer, site)
            hits, shifts = [], []
            for b in test:
                with torch.no_grad():
                    logits = stacked_logits(
                        decomposed, b.base, b.source, size.layer, b.base_positions[position],
                        b.source_positions[position], [Neurons(width, []), FullVector(width)], site=site,
                    )  # fmt: skip
                r = torch.arange(len(b))
                difference = logits[:, r, b.expected] - logits[:, r, b.base.top]  # [plain, swapped]
                shifts.append(difference[1] - difference[0])
                hits.append(logits[1].argmax(-1) == b.expected)
            rows.append({"dataset": data.name, "variable": data.variable, "position": position, "site": site,
                         "iia": float(torch.cat(hits).float().mean()),
                         "shift": float(torch.cat(shifts).mean())})  # fmt: skip
    return rows


def judge_context_check(
    sentences: int = 400, contexts: Sequence[int] = (0, 1, 3, 6), log: Any = print, tokenizer: Any = None
) -> dict[int, float]:
    """How well the study's judge labels a token when shown `context` tokens on each side:
    MiniLM's labels of empath category names against each token's own category membership
    (a category kept when at least 15 tokens hold it), as the mean ROC AUC over categories,
    on the tokens (but the first) of the corpus's last `sentences` sentences, which no study
    size uses. Returns {context: mean AUC}. `tokenizer`: SmolLM2's (default: loaded here)."""
    from sklearn.metrics import roc_auc_score

    from neuroneval.label import label, minilm
    from neuroneval.torch.circuits.track import load_smollm2

    from .text import lexicon_concepts

    tokenizer = tokenizer or load_smollm2()[0]
    ids = _token_ids(tokenizer, wiki_sentences()[-sentences:])
    documents = np.array([d for d, x in enumerate(ids) for _ in range(1, len(x))], dtype=np.int64)
    positions = np.array([p for x in ids for p in range(1, len(x))], dtype=np.int64)
    tokens = marked_windows(ids, documents, positions, tokenizer.decode, 0)
    names, truth = lexicon_concepts(tokens, min_count=15)
    kept = [i for i, n in enumerate(names) if n.startswith("empath: ")]
    table = pl.DataFrame(
        {
            "concept": [str(i) for i in range(len(kept))],
            "explanation": [names[i].removeprefix("empath: ").replace("_", " ") for i in kept],
        }
    )
    judge, out = minilm(), {}
    log(f"{len(tokens):,} tokens, {len(kept)} empath categories")
    for context in contexts:
        texts = marked_windows(ids, documents, positions, tokenizer.decode, context)
        probabilities = label(judge, texts, table).probabilities
        aucs = [roc_auc_score(truth[:, i] >= 0.5, probabilities[:, j]) for j, i in enumerate(kept)]
        out[context] = float(np.mean(aucs))
        log(f"context {context}: mean AUC {out[context]:.3f} (median {np.median(aucs):.3f}), e.g. {texts[5]!r}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = study_arguments("neuroneval demo --sae --model smollm2", __doc__)
    parser.add_argument(
        "--judge-check", action="store_true", help="only measure the judge's AUC against the context it is shown"
    )
    parser.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible endpoint whose model also explains")
    parser.add_argument("--endpoint-model", metavar="NAME", help="the endpoint's model")
    replace(ENDPOINT_OPTIONS["api_key_env"], flag="--endpoint-key-env").add_argument(parser)
    parser.add_argument("--endpoint-repetition-penalty", type=float, metavar="X",
                        help="a repetition_penalty to send (vLLM and neuroneval label judge-server take it; OpenAI does not)")  # fmt: skip
    args = parser.parse_args(argv)
    if (args.endpoint is None) != (args.endpoint_model is None):
        parser.error("--endpoint and --endpoint-model go together")
    endpoint = None
    if args.endpoint is not None:
        key_env = ENDPOINT_OPTIONS.only("api_key_env").resolve(api_key_env=args.api_key_env)["api_key_env"]
        endpoint = ExplainerEndpoint(args.endpoint, args.endpoint_model, key_env, args.endpoint_repetition_penalty)
    log = functools.partial(print, flush=True)  # progress as it happens, also into a file
    if args.judge_check:
        judge_context_check(log=log)
    else:
        run(args.out / "sae_study_smollm2", sized(args, SMALL, FULL), log=log, endpoint=endpoint)
    return 0


if __name__ == "__main__":
    sys.exit(main())
