"""`neuroneval meta`: meta-evaluation 2 (SPEC section 5), each metric's meta-AUPRC."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import polars as pl

from neuroneval import METRICS, meta
from neuroneval.indices import read_truth
from neuroneval.params import metric_list

from .common import (
    Needs,
    add_activations,
    add_concepts,
    add_names_and_metrics,
    add_table_out,
    add_threads,
    align,
    check_fits,
    count,
    dense_bytes,
    open_inputs,
    threads,
    write_table,
)

#: The flags of the library's declared options: alpha and lambda (tuned unless --alpha is
#: given) and the validation/test split (--validation, --seed).
OPTIONS = meta.TUNING_OPTIONS + meta.SPLIT_OPTIONS
RULES = (Needs(("--lam",), ("--alpha",), "--lam needs --alpha: without it alpha and lambda are tuned together"),)


def add(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "meta",
        help="meta-AUPRC of each metric on units with known concepts",
        description=(
            "Meta-evaluation 2 (SPEC section 5): how well each metric finds the known correct concept "
            "of each unit. The units are split (seeded) into validation and test; each metric's alpha "
            "(and wpmi's lambda) is tuned on validation meta-AUPRC over SPEC's grids unless --alpha is "
            "given; meta-AUPRC (all test-unit x concept scores pooled, NaN lowest) is reported on test. "
            "Prints one row per metric, best first; * marks the metrics that pass the paper's sanity checks."
        ),
        epilog=f"metrics: {', '.join(METRICS)}",
        rules=RULES,
    )
    add_activations(p, note="; read into memory")
    add_concepts(p)
    p.add_argument(
        "--truth",
        required=True,
        metavar="FILE",
        help="each unit's correct concept: a .npy of K integer concept indices, or a text file with one concept name or index per unit",
    )
    add_names_and_metrics(p)
    OPTIONS.add_arguments(p)
    add_table_out(p)
    add_threads(p)
    p.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    metrics = metric_list(args.metrics)
    values = OPTIONS.resolve(**OPTIONS.from_args(args))  # checked before any work
    out: Path | None = args.out
    acts, conc = open_inputs(args.activations, args.concepts, None, args.concept_names)
    truth = read_truth(args.truth, acts.n_columns, conc.n_columns, conc.names)
    check_fits(2 * dense_bytes(acts), "meta-evaluation")
    split = {"validation": values["validation"], "seed": values["seed"]}
    with threads(args.threads):
        # lam only with alpha (the rule RULES checks): without it, alpha and lambda are tuned
        table = meta.meta_evaluate(acts.dense(), conc, truth, metrics, alpha=args.alpha, lam=args.lam, **split)
    table = table.sort(pl.col("meta_auprc").fill_nan(None), descending=True, nulls_last=True, maintain_order=True)
    if out is not None:
        write_table(table, out)
    val, test = meta.split_units(acts.n_columns, **split)
    if args.alpha is None:
        how = f"alpha and lambda tuned on {count(len(val), 'validation unit')}"
    else:
        wpmi = f" (wpmi's lambda = {values['lam']:g})" if "wpmi" in metrics else ""
        how = (
            f"alpha = {args.alpha:g}{wpmi} for every metric, not tuned ({count(len(val), 'validation unit')} left out)"
        )
    print(f"meta-AUPRC on {len(test):,} test units x {conc.n_columns:,} concepts; {how}; seed {values['seed']}")
    print(format_table(table))
    print(f"* passes the paper's sanity checks; random baseline about 1/{conc.n_columns:,}", flush=True)
    if out is not None:
        print(f"wrote {out}", flush=True)
    return 0


def format_table(table: pl.DataFrame) -> str:
    """The meta table as aligned text, one row per metric in the table's order."""

    def number(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    head = ["  metric", "alpha", "lambda", "validation meta-AUPRC", "test meta-AUPRC", "NaN scores"]
    rows = [
        [
            ("* " if r["passes_sanity_in_paper"] else "  ") + r["metric"],
            number(r["alpha"], "g"),
            number(r["lam"], "g"),
            number(r["validation_meta_auprc"], ".4f"),
            number(r["meta_auprc"], ".4f"),
            f"{r['nan_scores']:,}",
        ]
        for r in table.iter_rows(named=True)
    ]
    return align(head, rows, left=1)
