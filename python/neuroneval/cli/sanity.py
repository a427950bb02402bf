"""`neuroneval sanity`: the sanity checks of SPEC section 4 and the paper's Table 3."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import polars as pl

from neuroneval import METRICS, meta, sanity
from neuroneval.errors import ParameterError
from neuroneval.indices import read_truth
from neuroneval.params import ScoreParams, metric_list

from .common import (
    DEFAULT_VALIDATION,
    Needs,
    add_activations,
    add_concepts,
    add_names_and_metrics,
    add_threads,
    chart_wanted,
    check_fits,
    checked,
    dense_bytes,
    fraction,
    not_empty,
    open_inputs,
    output_dir,
    positive_int,
    threads,
)

_DEFAULT_N = 500_000
_DEFAULT_SEEDS = 1000
_DEFAULT_SETTING = "experimental"

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


#: --keep.
probability = checked(float, lambda v: 0.0 <= v <= 1.0, "be a probability in [0, 1]")
#: --rate: expected label mass after / before.
growth = checked(float, lambda v: math.isfinite(v) and v >= 1.0, "be a finite number >= 1")


_SMALLEST_GAMMA = min(sanity.GAMMAS)
#: --n of the theoretical test: enough inputs for one positive input at the smallest gamma.
inputs = checked(
    int,
    lambda n: math.floor(_SMALLEST_GAMMA * n) >= 1,
    f"be at least {math.ceil(1 / _SMALLEST_GAMMA):,}, for one positive input at the smallest gamma, "
    f"{_SMALLEST_GAMMA:g}",
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
    p.add_argument(
        "--truth",
        metavar="FILE",
        help=(
            "each unit's correct concept: a .npy of K integer concept indices, or a text file with one "
            "concept name or index per unit (default: each unit's argmax-IoU concept at alpha 0.005)"
        ),
    )
    add_names_and_metrics(p)
    p.add_argument(
        "--theoretical",
        action="store_true",
        help="also run the theoretical test; alone when ACTIVATIONS and CONCEPTS are not given",
    )
    p.add_argument(
        "--alpha",
        type=float,
        help="experimental test: use this alpha, in (0, 1], for every metric (default: tuned per metric on validation)",
    )
    p.add_argument(
        "--lam",
        type=float,
        help=(
            "wpmi's lambda, >= 0: of the theoretical test (default 1) and, with --alpha, of the experimental "
            "test (without --alpha it is tuned)"
        ),
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the split, the perturbations and the top-random metrics (default 0)",
    )
    p.add_argument(
        "--validation",
        type=fraction,
        metavar="FRACTION",
        help=f"experimental test: share of the units used for tuning, in (0, 1) (default {DEFAULT_VALIDATION})",
    )
    p.add_argument(
        "--keep",
        type=probability,
        default=0.5,
        help="missing labels: probability of keeping each label, in [0, 1] (default 0.5)",
    )
    p.add_argument(
        "--rate",
        type=growth,
        default=2.0,
        help="extra labels: expected label mass after / before, >= 1 (default 2)",
    )
    p.add_argument(
        "--n",
        type=inputs,
        help=f"theoretical test: number of inputs (default {_DEFAULT_N:,}; at least 10,000 for gamma 0.0001)",
    )
    p.add_argument("--seeds", type=positive_int, help=f"theoretical test: seeds per gamma (default {_DEFAULT_SEEDS:,})")
    p.add_argument(
        "--setting",
        type=not_empty,
        metavar="NAME",
        help=f"experimental test: the setting's name in records.csv (default {_DEFAULT_SETTING!r})",
    )
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
    ScoreParams(alpha=args.alpha, lam=args.lam, seed=args.seed)  # checked before any work
    n = _DEFAULT_N if args.n is None else args.n
    seeds = _DEFAULT_SEEDS if args.seeds is None else args.seeds
    setting = _DEFAULT_SETTING if args.setting is None else args.setting
    out: Path | None = args.out
    chart = chart_wanted(out, args.no_chart, "chart.png")
    lam = 1.0 if args.lam is None else args.lam
    common: dict[str, Any] = {"keep": args.keep, "rate": args.rate, "seed": args.seed}
    if args.theoretical:  # per gamma: each seed's counts and every metric's three scores
        check_fits(
            8 * seeds * len(sanity.GAMMAS) * (3 * len(metrics) + 12),
            "the theoretical test",
            holds="",
            remedy="use fewer --seeds",
            error=ParameterError,
        )

    results = []
    lines = []
    with threads(args.threads):
        if args.activations is not None:
            acts, conc = open_inputs(args.activations, args.concepts, None, args.concept_names)
            truth = None if args.truth is None else read_truth(args.truth, acts.n_columns, conc.n_columns, conc.names)
            check_fits(
                2 * dense_bytes(acts) + dense_bytes(conc) + 3 * 8 * conc.n_rows * conc.n_columns,
                "the experimental test",
            )
            validation = DEFAULT_VALIDATION if args.validation is None else args.validation
            result = sanity.experimental(
                acts.dense(),
                conc.dense(),
                truth,
                metrics,
                alpha=args.alpha,
                lam=args.lam,
                validation=validation,
                setting=setting,
                **common,
            )
            val, test = meta.split_units(acts.n_columns, validation, args.seed)
            source = f"from {args.truth}" if args.truth is not None else "each unit's argmax-IoU concept"
            tuned = f"alpha = {args.alpha:g} for all" if args.alpha is not None else f"tuned on {len(val):,}"
            lines.append(
                f"experimental test{'' if args.setting is None else f' {setting!r}'}: {acts.n_rows:,} inputs, "
                f"{conc.n_columns:,} concepts, {acts.n_columns:,} units ({tuned}, Decrease Acc on {len(test):,}); "
                f"correct concepts {source}"
            )
            results.append(result)
        if args.theoretical:
            results.append(sanity.theoretical(metrics, n=n, seeds=seeds, lam=lam, **common))
            gammas = ", ".join(f"{g:g}" for g in sanity.GAMMAS)
            lines.append(f"theoretical test: a perfect binary unit, n = {n:,}, gammas {gammas}, {seeds:,} seeds each")
    result = results[0] if len(results) == 1 else sanity.SanityResult.concat(results)
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
