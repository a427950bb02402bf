"""`neuroneval crowd`: crowdsourced correlation (SPEC section 6) in four steps: `plan` the rating
tasks, `aggregate` the votes, `estimate` each pair's correlation, `simulate` budgets."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from neuroneval import crowd
from neuroneval.errors import ParameterError, ShapeError, SourceError
from neuroneval.files import write_files_atomic
from neuroneval.indices import read_pairs
from neuroneval.sources import Source, input_file, open_activations, open_concepts

from .common import (
    SUMMARY_UNITS,
    TABLE_SUFFIXES,
    AtLeast,
    Needs,
    add_activations,
    add_table_out,
    align,
    chart_wanted,
    check_fits,
    count,
    output_dir,
    output_file,
    output_file_problem,
    table_writer,
    write_table,
    write_together,
)
from .label import add_crowd_judge

# --------------------------------------------------------------------------- converters


def count_list(text: str) -> list[int]:
    """--raters of `simulate`: comma-separated integers, returned sorted without repeats (each is
    checked where the library checks raters_per_input)."""
    return budget_list(text)


def configuration_list(text: str) -> list[tuple[str, str]]:
    """--configurations: comma-separated SAMPLING+AGGREGATION, e.g. uniform+majority,mgis+debiased."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        sampling, _, method = part.partition("+")
        if sampling not in ("uniform", "mgis") or method not in crowd.METHODS:
            raise argparse.ArgumentTypeError(
                f"must be SAMPLING+AGGREGATION (sampling uniform or mgis; aggregation {', '.join(crowd.METHODS)}); "
                f"got {part!r}"
            )
        out.append((sampling, method))
    if not out:
        raise argparse.ArgumentTypeError("is empty; give configurations such as uniform+majority,mgis+bragg")
    return list(dict.fromkeys(out))


def budget_list(text: str) -> list[int]:
    """--budgets: comma-separated positive integers, returned sorted without repeats."""
    parts = [s.strip() for s in text.split(",") if s.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("is empty; give ratings per pair such as 60,120,240")
    for part in parts:
        if not re.fullmatch(r"[0-9][0-9_]*", part):
            raise argparse.ArgumentTypeError(f"must be comma-separated positive integers; got {part!r} in {text!r}")
    return sorted({int(part) for part in parts})


# --------------------------------------------------------------------------- parsers


def add(commands: Any) -> None:
    crowd_parser: argparse.ArgumentParser = commands.add_parser(
        "crowd",
        help="crowdsourced correlation: plan rating tasks, aggregate votes, estimate, simulate budgets",
        description=(
            "Crowdsourced evaluation (SPEC section 6): the correlation of a unit with an explanation from a "
            "few noisy human ratings. `plan` picks the inputs to rate (model-guided importance sampling) and "
            "writes a task table; `next` writes the next round's tasks of a sequential plan; `rate` answers "
            "tasks with simulated raters, to rehearse a study; `aggregate` turns the raters' votes into soft labels (BRAgg, majority, mean); "
            "`estimate` gives each pair's correlation with a bootstrap interval; `simulate` measures the "
            "relative correlation error of each configuration per budget with simulated raters."
        ),
    )
    steps = crowd_parser.add_subparsers(title="steps", metavar="STEP", required=True)
    _add_plan(steps)
    _add_next(steps)
    _add_rate(steps)
    _add_aggregate(steps)
    _add_estimate(steps)
    _add_simulate(steps)
    add_crowd_judge(steps)


def _add_model_and_pairs(p: argparse.ArgumentParser) -> None:
    """CONCEPT_MODEL and --pairs, as `crowd plan` and `crowd simulate` take them."""
    p.add_argument(
        "concept_model",
        metavar="CONCEPT_MODEL",
        help="inputs x explanations: a cheap model's probabilities in [0, 1], as CONCEPTS of `score`",
    )
    p.add_argument(
        "--pairs",
        required=True,
        metavar="FILE",
        help="the (unit, explanation) pairs: a CSV with integer columns unit,concept or an (M, 2) integer .npy",
    )


@dataclass(frozen=True)
class _AtLeastRaters(AtLeast):
    """`AtLeast` against --raters, whose flag is None when not given: its declared default stands
    in. A --raters outside its domain passes here; the library refuses it, naming it."""

    def violation(self, args: argparse.Namespace) -> str | None:
        if getattr(args, "rating", None) == "sequential":  # a budget buys votes one at a time
            return None
        raters = args.raters_per_input
        default = crowd.PLAN_OPTIONS["raters_per_input"].default
        return super().violation(argparse.Namespace(**vars(args), raters=default if raters is None else raters))


def _add_plan(steps: Any) -> None:
    p: argparse.ArgumentParser = steps.add_parser(
        "plan",
        help="draw the inputs raters see for each (unit, explanation) pair; write the plan and a task table",
        description=(
            "Draw budget // raters inputs per (unit, explanation) pair, with replacement, from the MG-IS "
            "proposal (inputs where the unit's standardised activation times the concept model's "
            "standardised probability is large, floor gamma / N) or uniformly. A repeated input is shown "
            "once, so a pair never needs more than --budget ratings. With --rating sequential, raters are "
            "asked round by round until BRAgg's posterior is --confidence sure (at most --raters votes an "
            "input), and a pair counts its first draws whose votes fit in --budget: `crowd next` writes each "
            "next round's tasks. Writes the plan (for `next`, `aggregate` and `estimate`) and the first "
            "round's task table for a crowdsourcing platform (task, pair, unit, unit_name, concept, "
            "explanation, input, rated, raters: votes so far and to ask)."
        ),
        rules=(_AtLeastRaters("--budget", "--raters", "--budget must be at least --raters ({bound}); got {value}"),),
    )
    add_activations(p)
    _add_model_and_pairs(p)
    p.add_argument(
        "--budget", required=True, type=int, metavar="N", help="ratings per pair (a fixed plan: at least --raters)"
    )
    crowd.PLAN_OPTIONS.only("raters_per_input", "rating", "confidence", "eta", "prior").add_arguments(p)
    sampling = p.add_mutually_exclusive_group()
    crowd.PLAN_OPTIONS["gamma"].add_argument(sampling)
    sampling.add_argument("--uniform", action="store_true", help="draw uniformly instead of by MG-IS")
    crowd.PLAN_OPTIONS["seed"].add_argument(p)
    p.add_argument("--unit-names", metavar="FILE", help="unit names, one per line (for the task table)")
    p.add_argument(
        "--explanations",
        metavar="FILE",
        help="the explanations' texts, one per line (default: CONCEPT_MODEL's names, else 'concept T')",
    )
    crowd.TASK_OPTIONS.add_arguments(p)
    p.add_argument(
        "--out", required=True, type=output_file(".parquet"), metavar="PLAN", help="the plan to write (.parquet)"
    )
    _add_table_file(
        p,
        "--tasks",
        "FILE",
        "the task table to write (.csv or .parquet; default: <PLAN stem>-tasks.csv beside the plan)",
    )
    p.set_defaults(command=plan)


#: The aggregations that take --eta and --prior (BRAgg's), as `Needs` reads --method: a value, or
#: None (not given) where the declared default is one of them.
_BRAGG_METHODS = ("bragg", "debiased", "composite")
_TAKE_ETA = tuple(
    ("--method", m)
    for m in (*_BRAGG_METHODS, None)
    if m is not None or crowd.AGGREGATE_OPTIONS["method"].default in _BRAGG_METHODS
)


def _add_aggregate(steps: Any) -> None:
    p: argparse.ArgumentParser = steps.add_parser(
        "aggregate",
        help="turn the raters' votes into one soft label per (pair, input)",
        description=(
            "Aggregate binary votes into one label per rated (pair, input): BRAgg's posterior (raters wrong "
            "with rate eta, a prior that the concept is present), the majority vote (1/2 on a tie), the "
            "mean vote, BRAgg's posterior debiased into an unbiased estimate of the 0/1 truth (for "
            "`crowd estimate --estimator debiased`), or both (composite: label and debiased, for "
            "`--estimator composite`). Every rated (pair, input) must be one the plan drew. Writes pair, "
            "input, votes, positive, label (and debiased)."
        ),
        rules=(
            Needs(
                ("--eta", "--prior"),
                _TAKE_ETA,
                "{given}: only for --method bragg, debiased or composite",
            ),
            Needs(("--rater-rates",), (("--eta", "estimate"),), "--rater-rates needs --eta estimate"),
        ),
    )
    p.add_argument("ratings", nargs="+", metavar="RATINGS", help=_RATINGS_HELP)
    p.add_argument("--plan", required=True, metavar="PLAN", help="the plan written by `crowd plan`")
    crowd.AGGREGATE_OPTIONS.only("method", "eta", "prior").add_arguments(p)
    _add_table_file(p, "--out", "LABELS", "the labels table to write (.csv or .parquet)", required=True)
    _add_table_file(
        p, "--rater-rates", "FILE", "with --eta estimate: also write rater, eta, votes to this .csv or .parquet file"
    )
    p.set_defaults(command=aggregate)


def _add_estimate(steps: Any) -> None:
    p: argparse.ArgumentParser = steps.add_parser(
        "estimate",
        help="each planned pair's correlation from the labels, with a bootstrap interval",
        description=(
            "The importance-weighted correlation of each planned (unit, explanation) pair (SPEC section 6), "
            "with the standard error and percentile interval of a seeded bootstrap over the draws (or the "
            "delta method's). --estimator debiased (labels of `crowd aggregate --method debiased`) gives an "
            "estimate without the bias floor of plug-in labels; --estimator composite (labels of "
            "`--method composite`) weighs it against the plug-in one by precision. Prints one line per pair."
        ),
    )
    p.add_argument("--plan", required=True, metavar="PLAN", help="the plan written by `crowd plan`")
    p.add_argument(
        "--labels",
        required=True,
        metavar="LABELS",
        help="the labels written by `crowd aggregate` (.csv or .parquet: pair, input, label)",
    )
    crowd.ESTIMATE_OPTIONS.add_arguments(p)
    add_table_out(p)
    p.set_defaults(command=estimate)


def _add_simulate(steps: Any) -> None:
    p: argparse.ArgumentParser = steps.add_parser(
        "simulate",
        help="relative correlation error per configuration and budget, with simulated raters",
        description=(
            "Plan a budget: for each configuration (uniform or MG-IS sampling, majority vote or BRAgg), "
            "budget and trial, draw inputs, let simulated raters (each wrong with rate --eta) label them, "
            "aggregate and estimate; the relative correlation error (RCE) is measured against the exact "
            "correlation with the true labels. Prints the RCE table and the ratings per pair each "
            "configuration needs to reach --target."
        ),
        rules=(
            _AtLeastRaters(
                "--budgets", "--raters", "--budgets must all be at least the smallest --raters ({bound}); got {value}"
            ),
        ),
    )
    add_activations(p)
    p.add_argument(
        "labels",
        metavar="LABELS",
        help="inputs x explanations: the true binary labels, as CONCEPTS of `score`",
    )
    _add_model_and_pairs(p)
    p.add_argument(
        "--budgets",
        required=True,
        type=budget_list,
        metavar="LIST",
        help="comma-separated ratings per pair, e.g. 60,120,240,480",
    )
    options = crowd.SIMULATE_OPTIONS
    options["eta"].add_argument(p)
    raters = options["raters_per_input"]
    p.add_argument(
        raters.flag,
        dest=raters.name,
        type=count_list,
        default=None,
        metavar="LIST",
        help=replace(raters, help=f"{raters.help}: one number, or a comma-separated list to compare").help_text(),
    )
    p.add_argument(
        "--configurations",
        type=configuration_list,
        default=list(crowd.CONFIGURATIONS),
        metavar="LIST",
        help=(
            "comma-separated SAMPLING+AGGREGATION, sampling uniform or mgis, aggregation majority, bragg, mean or "
            "debiased (default: uniform+majority,uniform+bragg,mgis+majority,mgis+bragg)"
        ),
    )
    options.only("rating", "confidence", "trials", "gamma", "prior", "target", "seed").add_arguments(p)
    p.add_argument(
        "--out", type=output_dir, metavar="DIR", help="write rce.csv, needed.csv and rce.png into this directory"
    )
    p.add_argument("--no-chart", action="store_true", help="with --out, do not draw rce.png (needs matplotlib)")
    p.set_defaults(command=simulate)


# --------------------------------------------------------------------------- shared


def _add_table_file(p: argparse.ArgumentParser, flag: str, metavar: str, help: str, required: bool = False) -> None:
    """An output table's flag: a .csv or .parquet path, checked before any work."""
    p.add_argument(flag, required=required, type=output_file(*TABLE_SUFFIXES), metavar=metavar, help=help)


def _check_rows(src: Source, acts: Source, what: str) -> None:
    if src.n_rows != acts.n_rows:
        raise ShapeError(f"{what} has {src.n_rows:,} inputs (rows) but ACTIVATIONS has {acts.n_rows:,}")


def _local_indices(pairs: npt.NDArray[np.int64]) -> tuple[np.ndarray, np.ndarray, npt.NDArray[np.int64]]:
    """The units and concepts the pairs use, and the pairs as indices into those lists."""
    units, unit_of = np.unique(pairs[:, 0], return_inverse=True)
    concepts, concept_of = np.unique(pairs[:, 1], return_inverse=True)
    return units, concepts, np.column_stack([unit_of, concept_of])


def _original_pairs(table: pl.DataFrame, pairs: npt.NDArray[np.int64]) -> pl.DataFrame:
    """The pairs table with the original (unit, concept) indices."""
    return table.with_columns(
        pl.Series("unit", pairs[:, 0], dtype=pl.Int64), pl.Series("concept", pairs[:, 1], dtype=pl.Int64)
    )


def _read_table(path: str, what: str) -> pl.DataFrame:
    """A .csv or .parquet table."""
    p = input_file(path, f"{what} file")
    if p.suffix not in TABLE_SUFFIXES:
        raise SourceError(f"cannot read {what} from {p}: expected a .csv or .parquet file")
    try:
        return pl.read_parquet(p) if p.suffix == ".parquet" else pl.read_csv(p)
    except Exception as e:  # polars raises many kinds; all mean the file is unreadable
        raise SourceError(f"cannot read the {what} file {p}: {e}") from e


def _read_plan(path: str) -> crowd.Plan:
    return crowd.Plan.read(input_file(path, "plan file"))


def _same_file(a: Path, b: Path, flags: str) -> None:
    if a.resolve() == b.resolve():
        raise ParameterError(f"{flags} are the same file, {b}")


def _prior_text(prior: float | str) -> str:
    return "the concept model's probability" if prior == "model" else f"{prior:g}"


# --------------------------------------------------------------------------- plan


def plan(args: argparse.Namespace) -> int:
    # Every option checked before any work, where the library checks it.
    given = crowd.PLAN_OPTIONS.from_args(args) | {"sampling": "uniform" if args.uniform else None}
    options = crowd.PLAN_OPTIONS.resolve(**given)
    batch_size = crowd.TASK_OPTIONS.resolve(**crowd.TASK_OPTIONS.from_args(args))["batch_size"]
    out: Path = args.out
    tasks_out: Path | None = args.tasks
    if tasks_out is None:
        tasks_out = out.with_name(f"{out.stem}-tasks.csv")
        problem = output_file_problem(tasks_out, TABLE_SUFFIXES)
        if problem is not None:
            raise ParameterError(f"--tasks {problem}")
    _same_file(tasks_out, out, "--tasks and --out")
    acts = open_activations(args.activations, unit_names=args.unit_names)
    model = open_concepts(args.concept_model, n_inputs=acts.n_rows, concept_names=args.explanations)
    _check_rows(model, acts, "CONCEPT_MODEL")
    pairs = read_pairs(args.pairs, n_units=acts.n_columns, n_concepts=model.n_columns)
    units, concepts, local = _local_indices(pairs)
    check_fits(8 * acts.n_rows * (units.size + concepts.size), "crowd plan")
    # Seven 8-byte columns per draw, held twice (the draws and the plan's table).
    check_fits(
        2
        * 7
        * 8
        * len(pairs)
        * (args.budget // (1 if options["rating"] == "sequential" else options["raters_per_input"])),
        "crowd plan",
        holds="",
        remedy="use a smaller --budget",
        error=ParameterError,
    )
    # Only the columns the pairs use are read; the plan's pairs keep their original indices.
    result = crowd.plan(
        local,
        acts.dense(units),
        model.dense(concepts),
        args.budget,
        **options,
        # crowd.plan's default names, of the original indices.
        unit_names=[f"unit {k}" if acts.names is None else acts.names[k] for k in units],
        explanations=[f"concept {t}" if model.names is None else model.names[t] for t in concepts],
    )
    result = replace(result, pairs=_original_pairs(result.pairs, pairs))
    tasks = crowd.next_tasks(result, batch_size=batch_size)
    write_together([(out, result.write), (tasks_out, table_writer(tasks, tasks_out))])
    print(_plan_summary(result, args.budget, options["seed"], batch_size, out, tasks_out, tasks), flush=True)
    return 0


def _plan_summary(
    result: crowd.Plan, budget: int, seed: int, batch_size: int, out: Path, tasks_out: Path, tasks: pl.DataFrame
) -> str:
    if result.rating == "sequential":
        return _sequential_plan_summary(result, budget, seed, batch_size, out, tasks_out, tasks)
    shown = result.inputs().group_by("pair", maintain_order=True).len("inputs")
    table = result.pairs.join(shown, on="pair", how="left", maintain_order="left")
    raters = result.raters_per_input
    how = "uniform sampling" if result.sampling == "uniform" else f"MG-IS (gamma {result.gamma:g})"
    lines = [
        f"planned {count(result.pairs.height, 'pair')} over {result.n_inputs:,} inputs by {how}, seed {seed}: "
        f"{count(budget // raters, 'draw')} per pair, {count(raters, 'rater')} per shown input",
    ]
    head = ["pair", "unit", "explanation", "distinct inputs", "ratings"]
    rows = [
        [str(r["pair"]), r["unit_name"], r["explanation"], f"{r['inputs']:,}", f"{r['inputs'] * raters:,}"]
        for r in table.head(SUMMARY_UNITS).iter_rows(named=True)
    ]
    lines.append(align(head, rows, left=3))
    if table.height > SUMMARY_UNITS:
        lines.append(f"... and {table.height - SUMMARY_UNITS:,} more pairs")
    per_pair = table["inputs"].to_numpy() * raters
    lines.append(
        f"ratings needed: {result.ratings_needed():,} in all, {int(per_pair.min()):,} to {int(per_pair.max()):,} "
        f"per pair (budget {budget:,} per pair; repeated inputs are rated once)"
    )
    n_tasks = tasks["task"].n_unique()
    lines.append(f"wrote the plan to {out}")
    lines.append(
        f"wrote {count(n_tasks, 'task')} (at most {batch_size:,} inputs each, {tasks.height:,} rows) to {tasks_out}"
    )
    return "\n".join(lines)


def _sequential_plan_summary(
    result: crowd.Plan, budget: int, seed: int, batch_size: int, out: Path, tasks_out: Path, tasks: pl.DataFrame
) -> str:
    how = "uniform sampling" if result.sampling == "uniform" else f"MG-IS (gamma {result.gamma:g})"
    lines = [
        f"planned {count(result.pairs.height, 'pair')} over {result.n_inputs:,} inputs by {how}, seed {seed}: "
        f"{budget:,} ratings per pair, asked round by round",
        f"sequential rating: {_rule_text(result)}",
        f"wrote the plan to {out}",
        _round_text(tasks, batch_size, tasks_out, 1),
    ]
    return "\n".join(lines)


def _rule_text(p: crowd.Plan) -> str:
    return (
        f"one vote at a time until BRAgg (eta {p.eta:g}, prior {_prior_text(p.prior)}) is {p.confidence:g} sure, "
        f"at most {count(p.raters_per_input, 'vote')} an input"
    )


def _round_text(tasks: pl.DataFrame, batch_size: int, tasks_out: Path, round_number: int | None) -> str:
    """What a round's task table asks, and where it was written."""
    name = "the next round" if round_number is None else f"round {round_number}"
    return (
        f"{name} asks {count(int(tasks['raters'].sum()), 'vote')} on {count(tasks.height, 'input')} in "
        f"{count(tasks['task'].n_unique(), 'task')} (at most {batch_size:,} inputs each): wrote {tasks_out}"
    )


# --------------------------------------------------------------------------- next


def _add_next(steps: Any) -> None:
    p: argparse.ArgumentParser = steps.add_parser(
        "next",
        help="the next round's tasks: which inputs need how many more votes, given the ratings so far",
        description=(
            "Given the plan and every rating so far, write the next round's task table: each (pair, input) "
            "the plan still asks about, with the votes it has (rated) and the votes to ask now (raters). A "
            "sequential plan asks each input the fewest votes that could decide it, over the draws expected "
            "to fit in the budget; a fixed plan asks what its one round still lacks. When nothing is left to "
            "ask, the study is finished: the table is empty and `aggregate` and `estimate` follow."
        ),
    )
    p.add_argument("ratings", nargs="*", metavar="RATINGS", help=_RATINGS_HELP + " (none: the first round)")
    p.add_argument("--plan", required=True, metavar="PLAN", help="the plan written by `crowd plan`")
    crowd.TASK_OPTIONS.add_arguments(p)
    _add_table_file(p, "--tasks", "FILE", "the next round's task table to write (.csv or .parquet)", required=True)
    p.set_defaults(command=next_round)


_RATINGS_HELP = (
    "the votes so far: .csv or .parquet tables, one row per vote: pair, input, vote (0/1), and rater "
    "(for --eta estimate); several files are read as one"
)


def next_round(args: argparse.Namespace) -> int:
    batch_size = crowd.TASK_OPTIONS.resolve(**crowd.TASK_OPTIONS.from_args(args))["batch_size"]
    out: Path = args.tasks
    the_plan = _read_plan(args.plan)
    ratings = _read_ratings(args.ratings) if args.ratings else None
    tasks = crowd.next_tasks(the_plan, ratings, batch_size)
    write_table(tasks, out)
    spent = 0 if ratings is None else ratings.height
    head = f"{count(spent, 'rating')} so far"
    if the_plan.rating == "sequential":
        head += f"; sequential rating: {_rule_text(the_plan)}"
    if tasks.height == 0:
        print(f"{head}\nthe study is finished: no input needs a vote (wrote an empty {out}); aggregate and estimate")
    else:
        print(f"{head}\n{_round_text(tasks, batch_size, out, None)}", flush=True)
    return 0


def _read_ratings(paths: list[str]) -> pl.DataFrame:
    """The ratings files, as one table (their columns must agree)."""
    tables = [_read_table(path, "ratings") for path in paths]
    try:
        return pl.concat(tables, how="vertical_relaxed")
    except pl.exceptions.PolarsError as e:
        raise SourceError(f"the ratings files {', '.join(paths)} do not hold the same columns: {e}") from e


# --------------------------------------------------------------------------- rate


def _add_rate(steps: Any) -> None:
    p: argparse.ArgumentParser = steps.add_parser(
        "rate",
        help="answer a round's tasks with simulated raters, to rehearse a study",
        description=(
            "Simulated raters answer a task table (of `crowd plan` or `crowd next`): each asked vote is wrong "
            "with probability --eta against LABELS, the true labels. The j-th vote on a (pair, input) comes "
            "from its own seeded stream, so a study's votes do not depend on how its rounds were cut; a "
            "study rehearsed round by round ends with the ratings of `neuroneval.crowd.simulate_study`. "
            "Writes pair, input, rater (the vote's index on its input) and vote."
        ),
    )
    p.add_argument("tasks", metavar="TASKS", help="a task table (.csv or .parquet) of `crowd plan` or `crowd next`")
    p.add_argument(
        "labels", metavar="LABELS", help="inputs x explanations: the true binary labels, as CONCEPTS of `score`"
    )
    crowd.RATE_OPTIONS.add_arguments(p)
    _add_table_file(p, "--out", "RATINGS", "the votes to write (.csv or .parquet)", required=True)
    p.set_defaults(command=rate)


def rate(args: argparse.Namespace) -> int:
    options = crowd.RATE_OPTIONS.resolve(**crowd.RATE_OPTIONS.from_args(args))
    out: Path = args.out
    tasks = _read_table(args.tasks, "tasks")
    labels = open_concepts(args.labels)
    votes = crowd.simulated_votes(tasks, labels.dense(np.arange(labels.n_columns)), **options)
    write_table(votes, out)
    print(
        f"simulated raters wrong with rate {options['eta']:g}, seed {options['seed']}: "
        f"{count(votes.height, 'vote')} on {count(tasks.height, 'input')}, "
        f"{int(votes['vote'].sum()):,} 'present'; wrote {out}",
        flush=True,
    )
    return 0


# --------------------------------------------------------------------------- aggregate


def aggregate(args: argparse.Namespace) -> int:
    given = crowd.AGGREGATE_OPTIONS.from_args(args)
    options = crowd.AGGREGATE_OPTIONS.resolve(**given)  # before any work
    method, eta, prior = options["method"], options["eta"], options["prior"]
    out: Path = args.out
    rates_out: Path | None = args.rater_rates
    if rates_out is not None:
        _same_file(rates_out, out, "--rater-rates and --out")
    ratings = _read_ratings(args.ratings)
    if eta == "estimate" and "rater" not in ratings.columns:
        raise ParameterError(
            f"--eta estimate needs a rater column in {', '.join(args.ratings)}; it has {ratings.columns}"
        )
    the_plan = _read_plan(args.plan)
    if the_plan.rating == "sequential":  # the plan's rule stands in for --eta and --prior not given
        eta = the_plan.eta if given.get("eta") is None else eta
        prior = the_plan.prior if given.get("prior") is None else prior
    labels = crowd.aggregate(ratings, **options | {"eta": eta, "prior": prior}, plan=the_plan)
    rates = crowd.rater_error_rates(ratings, prior=prior, plan=the_plan) if eta == "estimate" else None
    writes = [(out, table_writer(labels, out))]
    if rates is not None and rates_out is not None:
        writes.append((rates_out, table_writer(rates, rates_out)))
    write_together(writes)

    if method in _BRAGG_METHODS:
        rate = "eta fitted per rater" if eta == "estimate" else f"eta {eta:g}"
        kind = {"bragg": "BRAgg", "debiased": "debiased BRAgg", "composite": "BRAgg and debiased BRAgg"}[method]
        how = f"{kind} ({rate}, prior {_prior_text(prior)})"
    else:
        how = f"the {method} vote"
    n_votes = int(labels["votes"].sum())
    lines = [
        f"aggregated {count(n_votes, 'vote')} into {count(labels.height, 'label')} "
        f"({n_votes / labels.height:.2f} votes per (pair, input)) by {how}; "
        f"{int((labels['label'] >= 0.5).sum()):,} labels >= 0.5"
    ]
    if rates is not None:
        lines.append("each rater's fitted error rate (one-coin Dawid-Skene):")
        rows = [[str(r["rater"]), f"{r['eta']:.4f}", f"{r['votes']:,}"] for r in rates.iter_rows(named=True)]
        lines.append(align(["rater", "eta", "votes"], rows, left=1, indent="  "))
    unrated = the_plan.inputs().join(labels.select("pair", "input"), on=["pair", "input"], how="anti").height
    if the_plan.rating == "sequential":
        lines += _study_notes(the_plan, labels)
    elif unrated:
        lines.append(
            f"note: {unrated:,} of the plan's {the_plan.inputs().height:,} (pair, input) have no rating yet; "
            "`crowd estimate` needs them all"
        )
    lines.append(f"wrote {out}" + ("" if rates_out is None else f" and {rates_out}"))
    print("\n".join(lines), flush=True)
    return 0


def _study_notes(the_plan: crowd.Plan, labels: pl.DataFrame) -> list[str]:
    """Where a sequential study stands: the draws counted so far, the inputs still asked, the
    votes on draws beyond the budget."""
    status = crowd.counted_draws(the_plan, labels)
    counted = status.filter("counted")
    waiting = counted.filter(pl.col("ask") > 0).select("pair", "input").n_unique()
    beyond = labels.join(counted.select("pair", "input"), on=["pair", "input"], how="anti")
    lines = []
    if waiting:
        lines.append(
            f"note: the study is not finished: {count(waiting, 'input')} still need votes "
            "(`crowd next` writes the next round's tasks)"
        )
    else:
        lines.append(
            f"the study is finished: {count(counted.height, 'draw')} counted over "
            f"{count(the_plan.pairs.height, 'pair')} (the draws whose votes fit in {the_plan.budget:,} per pair)"
        )
    if beyond.height:
        lines.append(
            f"{count(int(beyond['votes'].sum()), 'vote')} on {count(beyond.height, 'input')} beyond the "
            "budget: labelled, not counted by `crowd estimate`"
        )
    return lines


# --------------------------------------------------------------------------- estimate


def estimate(args: argparse.Namespace) -> int:
    options = crowd.ESTIMATE_OPTIONS.resolve(**crowd.ESTIMATE_OPTIONS.from_args(args))  # before any work
    level, resamples, estimator = options["level"], options["bootstrap"], options["estimator"]
    out: Path | None = args.out
    the_plan = _read_plan(args.plan)
    labels = _read_table(args.labels, "labels")
    # The bootstrap of the largest pair: an index, three values and their stacked terms per resampled draw.
    largest = int(the_plan.draws.group_by("pair").len()["len"].max())  # type: ignore[arg-type]
    check_fits(
        10 * 8 * resamples * largest,
        "crowd estimate",
        holds="",
        remedy="use a smaller --bootstrap",
        error=ParameterError,
    )
    table = crowd.estimate(the_plan, labels, **options)
    if out is not None:
        write_table(table, out)
    sampling = "uniform sampling" if the_plan.sampling == "uniform" else f"MG-IS (gamma {the_plan.gamma:g})"
    weights = "self-normalised weights" if options["self_normalised"] else "weights 1 / (N q)"
    kind = options["interval"] or crowd.default_interval(estimator)
    if kind == "delta":
        interval = f"{level:.0%} interval and SE by the delta method"
    elif kind == "fisher":
        interval = f"{level:.0%} interval and SE by Fisher's z at Kish's effective sample size"
    elif resamples:
        interval = (
            f"{level:.0%} percentile interval and SE from {resamples:,} bootstrap resamples, seed {options['seed']}"
        )
    else:
        interval = "no bootstrap"
    labels_kind = "" if estimator == "plug-in" else f", the {estimator} estimator"
    print(f"correlation of {count(table.height, 'pair')} from {sampling} with {weights}{labels_kind}; {interval}")
    ci = f"{level:.0%} CI"

    def number(v: float) -> str:
        return "-" if math.isnan(v) else f"{v:.4f}"

    rows = [
        [
            r["unit_name"],
            r["explanation"],
            number(r["rho"]),
            "-" if math.isnan(r["ci_low"]) else f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]",
            number(r["se"]),
            f"{r['draws']:,}",
            f"{r['inputs']:,}",
        ]
        for r in table.iter_rows(named=True)
    ]
    print(align(["unit", "explanation", "rho", ci, "SE", "draws", "inputs"], rows, left=2))
    if table["rho"].is_nan().any():
        print("-: undefined (the pair's labels are constant)")
    if out is not None:
        print(f"wrote {out}")
    sys.stdout.flush()
    return 0


# --------------------------------------------------------------------------- simulate


def simulate(args: argparse.Namespace) -> int:
    raters: list[int] | None = args.raters_per_input
    # Every option checked before any work, where the library checks it; of --raters the
    # smallest, which the memory check divides by (the library checks each).
    given = crowd.SIMULATE_OPTIONS.from_args(args) | {"raters_per_input": None if raters is None else min(raters)}
    options = crowd.SIMULATE_OPTIONS.resolve(**given)
    out: Path | None = args.out
    chart = chart_wanted(out, args.no_chart, "rce.png")
    acts = open_activations(args.activations)
    labels = open_concepts(args.labels, n_inputs=acts.n_rows)
    # A concept table orders its concepts by name: give it LABELS' order (names or not, a
    # matrix's columns are in the order they have).
    table = Path(args.concept_model).suffix in TABLE_SUFFIXES
    model = open_concepts(args.concept_model, n_inputs=acts.n_rows, concept_names=labels.names if table else None)
    _check_rows(labels, acts, "LABELS")
    _check_rows(model, acts, "CONCEPT_MODEL")
    if model.n_columns != labels.n_columns:
        raise ShapeError(
            f"CONCEPT_MODEL has {model.n_columns:,} explanations (columns) but LABELS has {labels.n_columns:,}"
        )
    pairs = read_pairs(args.pairs, n_units=acts.n_columns, n_concepts=labels.n_columns)
    units, concepts, local = _local_indices(pairs)
    check_fits(8 * acts.n_rows * (units.size + 2 * concepts.size), "crowd simulate")
    # Per pair and budget: the draws of every trial, their weights, labels and products.
    check_fits(
        # sequentially an input may take a single vote: as many draws as ratings
        24
        * 8
        * options["trials"]
        * (max(args.budgets) // (1 if options["rating"] == "sequential" else options["raters_per_input"])),
        "crowd simulate",
        holds="",
        remedy="use smaller --budgets or fewer --trials",
        error=ParameterError,
    )
    # Only the columns the pairs use are read; the result's pairs keep their original indices.
    sim = crowd.simulate(
        acts.dense(units),
        labels.dense(concepts),
        model.dense(concepts),
        local,
        args.budgets,
        configurations=args.configurations,
        **options | {"raters_per_input": raters},
    )
    sim = replace(sim, pairs=_original_pairs(sim.pairs, pairs))
    needed = sim.needed()
    written: list[Path] = []
    if out is not None:
        files: dict[str, Callable[[Path], object]] = {
            "rce.csv": sim.rce.write_csv,
            "needed.csv": needed.write_csv,
            "cheapest.csv": sim.cheapest().write_csv,
        }
        if chart:
            files["rce.png"] = sim.plot
        written = write_files_atomic(out, files)
    print(_simulate_summary(sim, needed, options), flush=True)
    if out is not None:
        print(f"wrote {', '.join(p.name for p in written)} to {out}", flush=True)
    return 0


def _simulate_summary(sim: crowd.Simulation, needed: pl.DataFrame, options: dict[str, Any]) -> str:
    raters = ", ".join(map(str, sim.raters))
    if sim.rating == "sequential":
        raters = f"one at a time until BRAgg is {options['confidence']:g} sure, at most {raters}"
    lines = [
        f"simulated raters wrong with rate {sim.eta:g}, {raters} per shown input, "
        f"{count(sim.pairs.height, 'pair')} x {count(sim.trials, 'trial')}; MG-IS gamma {options['gamma']:g}, "
        f"BRAgg prior {_prior_text(options['prior'])}; seed {options['seed']}",
        "relative correlation error (mean |rho_hat - rho| / |rho|) per ratings budget per pair:",
    ]
    budgets = list(sim.budgets)
    rows = []
    for (sampling, method, m), group in sim.rce.group_by("sampling", "aggregation", "raters", maintain_order=True):
        by_budget = dict(zip(group["budget"].to_list(), group["rce"].to_list(), strict=True))
        rows.append(
            [
                crowd.configuration_name(str(sampling), str(method)),
                str(m),
                *(f"{by_budget[b]:.3f}" if b in by_budget else "-" for b in budgets),
            ]
        )
    lines.append(align(["configuration", "raters", *(f"{b:,}" for b in budgets)], rows, left=1, indent="  "))
    if len(sim.raters) > 1 and budgets[0] < sim.raters[-1]:
        lines.append("(-: a budget below the raters per input)")
    nan = int(sim.rce["nan_estimates"].sum())
    if nan:
        lines.append(f"({nan:,} estimates were undefined, e.g. constant labels, and count as rho_hat = 0)")
    model = "undefined" if math.isnan(sim.model_rce) else f"{sim.model_rce:.3f}"
    lines.append(f"the concept model alone (no rating): RCE {model}")
    lines.append(
        f"cheapest ratings per pair for RCE <= {sim.target:g} (the RCE stays at or below it up to the largest budget):"
    )
    rows = [
        [
            crowd.configuration_name(r["sampling"], r["aggregation"]),
            "-" if r["raters"] is None else str(r["raters"]),
            "-" if r["inputs"] is None else f"{r['inputs']:,.0f}",
            f"not within {budgets[-1]:,}" if r["needed"] is None else f"{r['needed']:,.0f}",
        ]
        for r in sim.cheapest().iter_rows(named=True)
    ]
    lines.append(align(["configuration", "raters", "inputs", "ratings"], rows, left=1, indent="  "))
    return "\n".join(lines)
