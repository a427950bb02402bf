"""`neuroneval score`: score (unit, concept) pairs and write a parquet table."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import polars as pl

from neuroneval import METRICS, evaluate, score
from neuroneval.files import output_lock, write_atomic
from neuroneval.indices import read_pairs
from neuroneval.options import SCORE_OPTIONS
from neuroneval.params import ScoreParams, metric_list
from neuroneval.sources import Source

from .common import (
    SUMMARY_UNITS,
    Excludes,
    OutputPath,
    add_concepts,
    add_threads,
    names_list,
    open_inputs,
    positive_int,
    threads,
)

RULES = (
    Excludes(
        "--pairs",
        (
            ("--top", "--top cannot be combined with --pairs (which scores exactly the pairs given)"),
            ("--ray", "--ray cannot be combined with --pairs"),
        ),
    ),
)


def parquet_path(text: str) -> Path:
    """--out: a file's path, not a directory (the library says when its directory is missing)."""
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{Path(text)} is a directory; expected the path of a parquet file")
    return OutputPath(text)


def add(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "score",
        help="score explanations (concepts) of units and write a parquet table",
        description=(
            "Score every (unit, concept) pair, or the pairs of --pairs, under the given metrics "
            "and write one parquet row per pair: unit, concept, [rank,] one column per metric."
        ),
        epilog=f"metrics: {', '.join(METRICS)}",
        rules=RULES,
    )
    p.add_argument(
        "activations",
        metavar="ACTIVATIONS",
        help="inputs x units: a .npy file, a shard directory, or a .npz scipy sparse matrix",
    )
    add_concepts(p)
    p.add_argument("--out", required=True, type=parquet_path, metavar="FILE", help="the parquet file to write")
    p.add_argument(
        "--metrics",
        type=names_list,
        metavar="LIST",
        help="comma-separated metric names (default: all); the first one ranks --top and the summary",
    )
    SCORE_OPTIONS.add_arguments(p)
    p.add_argument("--unit-names", metavar="FILE", help="unit names, one per line")
    p.add_argument("--concept-names", metavar="FILE", help="concept names, one per line")
    p.add_argument(
        "--top",
        type=positive_int,
        metavar="N",
        help="keep each unit's N best concepts under the first metric, with a rank column (default: all)",
    )
    p.add_argument(
        "--pairs",
        metavar="FILE",
        help="score only these pairs: a CSV with integer columns unit,concept or an (M, 2) integer .npy",
    )
    add_threads(p)
    p.add_argument(
        "--block-units",
        type=positive_int,
        metavar="N",
        help="units per block (default: as many as fit in 256 MiB of activations; not used with --pairs)",
    )
    p.add_argument(
        "--restart",
        action="store_true",
        help="discard an unfinished run on --out that was started with other arguments or data (not used with --pairs)",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help=(
            "score as Ray tasks (neuroneval.distributed; needs the ray extra): on the cluster at ADDRESS, "
            "or on a local Ray started for this run when no address is given; files must be on a path "
            "every worker sees; --block-units are the units per task, --threads each task's CPUs"
        ),
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar, notices or summary")
    p.set_defaults(command=run, resumes=True)


def run(args: argparse.Namespace) -> int:
    metrics = metric_list(args.metrics)
    out = Path(args.out)
    # Checked by the core before any file is read.
    params = ScoreParams(**SCORE_OPTIONS.from_args(args))
    parameters: dict[str, Any] = params.to_dict()
    acts, conc = open_inputs(args.activations, args.concepts, args.unit_names, args.concept_names)
    keep: Literal["all"] | int = "all" if args.top is None else args.top
    with threads(args.threads):
        if args.ray is not None:
            from neuroneval import distributed

            distributed.evaluate(
                acts,
                conc,
                metrics,
                **parameters,
                out=out,
                address=args.ray or None,
                units_per_task=args.block_units,
                cpus_per_task=args.threads or 1,
                keep=keep,
                restart=args.restart,
                progress=not args.quiet,
            )
        elif args.pairs is None:
            evaluate(
                acts,
                conc,
                metrics,
                **parameters,
                out=out,
                keep=keep,
                block_units=args.block_units,
                restart=args.restart,
                progress=not args.quiet,
            )
        else:
            pairs = read_pairs(args.pairs)
            with output_lock(out):
                table = score(acts, conc, metrics, **parameters, pairs=pairs)
                write_atomic(out, table.write_parquet, step="writing the scores")
    if not args.quiet:
        print(summary(str(args.out), metrics, acts, conc, top=args.top, pairs=args.pairs is not None), flush=True)
    return 0


def summary(out: str, metrics: Sequence[str], acts: Source, conc: Source, *, top: int | None, pairs: bool) -> str:
    """What was written, then each unit's best concept under the first metric (NaN ignored,
    ties to the earlier row), for the first `SUMMARY_UNITS` units in the table's order.

    Reads only the unit, concept and first-metric columns of the written file.
    """
    first = metrics[0]
    table = pl.scan_parquet(out).select("unit", "concept", first)
    rows = int(table.select(pl.len()).collect().item())
    if pairs:
        shape = f"{rows:,} pairs"
    elif top is None:
        shape = f"{acts.n_columns:,} units x {conc.n_columns:,} concepts"
    else:
        shape = f"{acts.n_columns:,} units x top {min(top, conc.n_columns):,} of {conc.n_columns:,} concepts"
    lines = [f"wrote {out}: {rows:,} rows ({shape}), {len(metrics)} metric{'s' if len(metrics) != 1 else ''}"]

    units = table.select(pl.col("unit").unique(maintain_order=True)).collect().to_series()
    shown = units.head(SUMMARY_UNITS)
    defined = pl.col(first).is_not_nan()
    best = (
        table.filter(pl.col("unit").is_in(shown.to_list()))
        .group_by("unit", maintain_order=True)
        .agg(
            pl.col("concept")
            .filter(defined)
            .sort_by(pl.col(first).filter(defined), descending=True, maintain_order=True)
            .first(),
            pl.col(first).filter(defined).max(),
        )
        .collect()
    )
    for unit, concept, value in best.iter_rows():
        if value is None:
            lines.append(f"unit {unit}: no defined {first} score")
        else:
            lines.append(f"unit {unit}: best {concept} ({first} = {value:.3f})")
    if len(units) > len(shown):
        lines.append(f"... and {len(units) - len(shown):,} more units")
    return "\n".join(lines)
