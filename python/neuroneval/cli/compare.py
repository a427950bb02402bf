"""`neuroneval compare`: which explainer explains the units better, with bootstrap intervals
(`neuroneval.compare`)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import polars as pl

from neuroneval import compare as comparison
from neuroneval import label as judges
from neuroneval.compare import COMPARE_OPTIONS
from neuroneval.errors import ParameterError
from neuroneval.label import JUDGE_OPTIONS

from .common import (
    Excludes,
    Needs,
    add_activations,
    add_threads,
    names_list,
    not_empty,
    output_dir,
    threads,
)
from .label import _add_judge_options, _cache, _judge, add_judging_options, judging_options

RULES = (
    Needs((), ("--concepts", "--judge"), "give the concepts (--concepts FILE) or a judge to make them (--judge NAME)"),
    Excludes("--concepts", (("--judge", "--concepts and --judge exclude each other: give one source of concepts"),)),
    Needs(("--judge",), ("--inputs",), "--judge needs --inputs FILE, the probing inputs it judges"),
    Needs(("--inputs",), ("--judge",), "--inputs is for --judge (with --concepts, the concepts are given)"),
    Needs(
        ("--sae-release",),
        ("--sae-id",),
        "--sae-release needs --sae-id (SAEBench names its results file RELEASE_ID_eval_results.json)",
    ),
    Needs(
        ("--sae-id",),
        ("--sae-release",),
        "--sae-id needs --sae-release (SAEBench names its results file RELEASE_ID_eval_results.json)",
    ),
)


def add(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "compare",
        help="compare explainers: which explains the units better, with bootstrap intervals",
        description=(
            "Score each explainer's explanation of each unit (one concept column per explanation row, from "
            "--concepts or labelled by --judge), then print per metric the explainers ranked by their mean over "
            "units with a bootstrap interval, against a random and a shuffled baseline, and the paired "
            "differences between explainers under the first metric; write the tables, the settings and a "
            "SAEBench eval output into --out (see docs/compare.md)."
        ),
        rules=RULES,
    )
    add_activations(p)
    p.add_argument(
        "explanations",
        metavar="EXPLANATIONS",
        help="a .csv/.parquet/.jsonl table with the columns unit (an index or a name), explainer, explanation; "
        "or a delphi explanations directory, or a Neuronpedia export (batch-N.jsonl.gz files)",
    )
    p.add_argument(
        "--module",
        type=not_empty,
        metavar="HOOKPOINT",
        help="the hookpoint whose explanations to compare, when EXPLANATIONS hold several (a delphi run's "
        "explanations/ directory); default: the hookpoint of a delphi latent cache directory given as ACTIVATIONS",
    )
    p.add_argument(
        "--concepts",
        metavar="CONCEPTS",
        help="inputs x explanation rows (column e for row e): a .npy file, a shard directory, a .npz sparse "
        "matrix, or a .parquet/.csv (input, concept, probability) table naming each row's concept",
    )
    p.add_argument("--unit-names", metavar="FILE", help="the units' names, one per line (for a unit column of names)")
    p.add_argument(
        "--metrics",
        type=names_list,
        default=list(comparison.DEFAULT_METRICS),
        metavar="LIST",
        help=f"comma-separated metric names (default {','.join(comparison.DEFAULT_METRICS)}); the first leads",
    )
    COMPARE_OPTIONS.but("baselines").add_arguments(p)
    p.add_argument("--no-baselines", action="store_true", help="leave out the random and shuffled baselines")
    p.add_argument("--out", required=True, type=output_dir, metavar="DIR", help="the directory to write into")
    # The SAE whose latents are the units, for the SAEBench eval output.
    p.add_argument(
        "--sae-release",
        type=not_empty,
        metavar="RELEASE",
        help="the SAE's release (SAE Lens's release id): with --sae-id, the SAEBench output is named "
        "RELEASE_ID_eval_results.json, as SAEBench names its results",
    )
    p.add_argument("--sae-id", type=not_empty, metavar="ID", help="the SAE's id within its release (SAE Lens's sae id)")
    p.add_argument(
        "--sae-config",
        metavar="FILE",
        help="the SAE's config for the SAEBench output's sae_cfg_dict: a JSON object with architecture and d_sae "
        "(SAE Lens's cfg.json, or an SAE Lens directory holding it)",
    )
    # Instead of --concepts: label each explanation with a judge (neuroneval label's options).
    _add_judge_options(p, default="")
    p.set_defaults(judge=None)  # optional here: --concepts is the other source of concepts
    p.add_argument("--inputs", metavar="FILE", help="with --judge: the probing inputs, as INPUTS of `label`")
    add_judging_options(p, when="with --judge: ")
    add_threads(p)
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(command=run)


def _judged_concepts(args: argparse.Namespace, table: pl.DataFrame) -> np.ndarray:
    judging = judging_options(args)
    judge = _judge(args)
    inputs = judges.read_inputs(args.inputs, column=judging["column"])
    options = {"cache": _cache(args), "batch_size": judging["batch_size"], "progress": not args.quiet}
    concepts, labels = comparison.judged_concepts(judge, inputs, table, **options)
    if not args.quiet:
        print(f"{judge.name}: {labels.stats.summary()}", flush=True)
    return concepts


def _explanations(args: argparse.Namespace) -> pl.DataFrame:
    try:
        return comparison.explanation_table(args.explanations, module=args.module, activations=args.activations)
    except comparison.HookpointChoiceError as e:
        raise ParameterError(e.message("--module HOOKPOINT")) from None


def run(args: argparse.Namespace) -> int:
    # every option checked before any file is read or any input judged
    options = COMPARE_OPTIONS.resolve(**{**COMPARE_OPTIONS.from_args(args), "baselines": not args.no_baselines})
    judging_options(args)
    JUDGE_OPTIONS.resolve(**JUDGE_OPTIONS.from_args(args))
    sae_cfg = comparison.read_sae_config(args.sae_config) if args.sae_config is not None else None
    table = _explanations(args)
    with threads(args.threads):
        concepts: Any = args.concepts if args.judge is None else _judged_concepts(args, table)
        result = comparison.compare(
            args.activations,
            table,
            concepts,
            metrics=args.metrics,
            unit_names=args.unit_names,
            **options,
        )
    written = result.write(
        args.out, sae_lens_release_id=args.sae_release, sae_lens_id=args.sae_id, sae_cfg_dict=sae_cfg
    )
    if not args.quiet:
        print("\n\n".join(result.ranking(m) for m in result.metrics), flush=True)
        print(f"\n{result.differences_text(result.metrics[0])}", flush=True)
        print(f"\nwrote {', '.join(p.name for p in written)} to {args.out}", flush=True)
    return 0
