"""`neuroneval sanity`: the sanity checks of SPEC section 4 and the paper's Table 3."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import polars as pl

from neuroneval import METRICS, meta, sanity
from neuroneval.errors import ParameterError
from neuroneval.indices import read_truth
from neuroneval.params import metric_list

from .common import (
    Needs,
    add_activations,
    add_concepts,
    add_names_and_metrics,
    add_threads,
    chart_wanted,
    check_fits,
    dense_bytes,
    open_inputs,
    output_dir,
    threads,
)

#: The flags of the library's declared options: the experimental test's (`--setting`, and
#: `--alpha`, `--lam`, `--validation` of its tuning), the perturbations' (`--keep`, `--rate`,
#: `--seed`) and the theoretical test's (`--n`, `--seeds`; `--lam`).
EXPERIMENTAL = sanity.EXPERIMENTAL_OPTIONS.only("setting")
TUNING = meta.TUNING_OPTIONS + meta.SPLIT_OPTIONS.only("validation")
PERTURBATIONS = sanity.PERTURBATION_OPTIONS
THEORETICAL = sanity.THEORETICAL_OPTIONS
#: Which options go together. The options of one test default to None, so that giving one
#: without its test is a usage error rather than silently unused.
RULES = (
    Needs(("ACTIVATIONS",), ("CONCEPTS",), "CONCEPTS is missing: the experimental test needs ACTIVATIONS and CONCEPTS"),
    Needs(
        (),
        ("ACTIVATIONS", "--theoretical"),
        "give ACTIVATIONS and CONCEPTS (the experimental test), --theoretical, or both",
    ),
    Needs(
        ("--truth", "--concept-names", "--alpha", "--validation", "--setting"),
        ("ACTIVATIONS",),
        "{given}: only for the experimental test, which needs ACTIVATIONS and CONCEPTS",
    ),
    Needs(("--n", "--seeds"), ("--theoretical",), "{given}: only for the theoretical test; add --theoretical"),
    Needs(
        ("--lam",),
        ("--alpha", "--theoretical"),
        "--lam needs --alpha here: without it the experimental test tunes alpha and lambda together",
    ),
)


def add(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "sanity",
        help="run the sanity checks (missing and extra labels) and print the paper's Table 3",
        description=(
            "The sanity checks of SPEC section 4: does each metric score a perturbed explanation "
            "(missing labels: too specific; extra labels: too general) below the correct one? "
            "With ACTIVATIONS and CONCEPTS, runs the experimental test on those units (seeded "
            "validation/test split, alpha and lambda tuned on validation meta-AUPRC, Decrease Acc "
            "on the test units); --theoretical adds the theoretical test (a perfect binary unit, "
            "five concept prevalences, many seeds), or runs it alone without ACTIVATIONS and "
            "CONCEPTS. Prints Table 3 (Decrease Acc %, the paper's value in parentheses) and "
            "which metrics pass (>= 90% in every test)."
        ),
        epilog=f"metrics: {', '.join(METRICS)}",
        rules=RULES,
    )
    add_activations(p, optional=True, note="; read into memory")
    add_concepts(p, optional=True)
    truth_alpha = sanity.EXPERIMENTAL_OPTIONS["truth_alpha"].default
    p.add_argument(
        "--truth",
        metavar="FILE",
        help=(
            "each unit's correct concept: a .npy of K integer concept indices, or a text file with one "
            f"concept name or index per unit (default: each unit's argmax-IoU concept at alpha {truth_alpha:g})"
        ),
    )
    add_names_and_metrics(p)
    p.add_argument(
        "--theoretical",
        action="store_true",
        help="also run the theoretical test; alone when ACTIVATIONS and CONCEPTS are not given",
    )
    for group in (TUNING, EXPERIMENTAL, PERTURBATIONS, THEORETICAL):
        group.add_arguments(p)
    p.add_argument(
        "--out",
        type=output_dir,
        metavar="DIR",
        help="write table.csv, table.md, records.csv and chart.png into this directory (created if needed)",
    )
    p.add_argument("--no-chart", action="store_true", help="with --out, do not draw chart.png (needs matplotlib)")
    add_threads(p)
    p.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    metrics = metric_list(args.metrics)
    # Every value checked before any work, as the library checks it (None: the declared default).
    tuning = TUNING.resolve(**TUNING.from_args(args))
    setting = EXPERIMENTAL.resolve(**EXPERIMENTAL.from_args(args))["setting"]
    drawn = PERTURBATIONS.resolve(**PERTURBATIONS.from_args(args))
    theory = THEORETICAL.resolve(**THEORETICAL.from_args(args))
    out: Path | None = args.out
    chart = chart_wanted(out, args.no_chart, "chart.png")
    if args.theoretical:  # per gamma: each seed's counts and every metric's three scores
        check_fits(
            8 * theory["seeds"] * len(sanity.GAMMAS) * (3 * len(metrics) + 12),
            "the theoretical test",
            holds="",
            remedy="use fewer --seeds",
            error=ParameterError,
        )

    results: dict[str, sanity.SanityResult] = {}
    lines = []
    with threads(args.threads):
        if args.theoretical:
            # First: it is quick, and its own rules (enough inputs for every gamma) are checked before
            # the experimental test reads its files. Its table comes second all the same.
            results["theoretical"] = sanity.theoretical(metrics, lam=args.lam, **theory, **drawn)
        if args.activations is not None:
            acts, conc = open_inputs(args.activations, args.concepts, None, args.concept_names)
            truth = None if args.truth is None else read_truth(args.truth, acts.n_columns, conc.n_columns, conc.names)
            check_fits(
                2 * dense_bytes(acts) + dense_bytes(conc) + 3 * 8 * conc.n_rows * conc.n_columns,
                "the experimental test",
            )
            # lam only with alpha (the rule RULES checks): without it, alpha and lambda are tuned
            tuned = {"alpha": args.alpha, "lam": args.lam, "validation": tuning["validation"]}
            results["experimental"] = sanity.experimental(
                acts.dense(), conc.dense(), truth, metrics, setting=setting, **tuned, **drawn
            )
            val, test = meta.split_units(acts.n_columns, tuning["validation"], drawn["seed"])
            source = f"from {args.truth}" if args.truth is not None else "each unit's argmax-IoU concept"
            how = f"alpha = {args.alpha:g} for all" if args.alpha is not None else f"tuned on {len(val):,}"
            lines.append(
                f"experimental test{'' if args.setting is None else f' {setting!r}'}: {acts.n_rows:,} inputs, "
                f"{conc.n_columns:,} concepts, {acts.n_columns:,} units ({how}, Decrease Acc on {len(test):,}); "
                f"correct concepts {source}"
            )
        if args.theoretical:
            gammas = ", ".join(f"{g:g}" for g in sanity.GAMMAS)
            lines.append(
                f"theoretical test: a perfect binary unit, n = {theory['n']:,}, gammas {gammas}, "
                f"{theory['seeds']:,} seeds each"
            )
    listed = [results[k] for k in ("experimental", "theoretical") if k in results]
    result = listed[0] if len(listed) == 1 else sanity.SanityResult.concat(listed)
    lines.append("Decrease Acc (%) per perturbation and test; the paper's Table 3 value in parentheses")
    print("\n".join(lines), end="\n\n")
    print(result.to_markdown(), flush=True)
    print(verdict(result.table()), flush=True)
    if out is not None:
        written = result.write(out, chart=chart)
        print(f"wrote {', '.join(p.name for p in written)} to {out}", flush=True)
    return 0


def verdict(table: pl.DataFrame) -> str:
    """One line: which metrics pass every test that was run."""
    passing = table.filter(pl.col("passes"))["metric"].to_list()
    rule = f"Decrease Acc >= {sanity.PASS_LEVEL:g}% in every test"
    if not passing:
        return f"verdict: no metric passes ({rule}); {table.height} tested"
    return f"verdict: {len(passing)} of {table.height} metrics pass ({rule}): {', '.join(passing)}"
