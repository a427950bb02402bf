"""The `neuroneval` command line.

Usage
-----
Score every (unit, concept) pair under some metrics and write a parquet table::

    neuroneval score acts.npy concepts.npy --metrics correlation,auprc --out scores.parquet

Keep each unit's five best concepts under the first metric, with names from text files
(one name per line), on eight threads::

    neuroneval score acts/ concepts.csv --metrics auprc,f1 --alpha 0.01 --top 5 \\
        --unit-names units.txt --concept-names concepts.txt --threads 8 --out best.parquet

Score only some (unit, concept) index pairs (a CSV with columns `unit,concept`, or an
`(M, 2)` integer `.npy` file), in their order::

    neuroneval score acts.npy concepts.npz --pairs pairs.csv --out pairs.parquet

Run the sanity checks of SPEC section 4 on real units (the experimental test, with each
unit's correct concept from a file) and the theoretical test, print the paper's Table 3 and
write it with its records and a bar chart into a directory::

    neuroneval sanity acts.npy concepts.npy --truth truth.txt --theoretical --out sanity/

Only the theoretical test (no data needed), smaller than the paper's::

    neuroneval sanity --theoretical --n 100000 --seeds 200

Meta-evaluation 2 (SPEC section 5): each metric's meta-AUPRC on test units with known
concepts, alpha and lambda tuned on validation units, as a table::

    neuroneval meta acts.npy concepts.csv --truth truth.npy --out meta.csv

Crowdsourced evaluation (SPEC section 6): the correlation of each (unit, explanation) pair
from a few noisy human ratings. Draw the inputs raters see (MG-IS with a cheap concept model)
and write the plan and a task table for a crowdsourcing platform; turn the returned votes
(a table of pair, input, rater, vote) into soft labels; estimate each pair's correlation with a
bootstrap interval::

    neuroneval crowd plan acts.npy model.npy --pairs pairs.csv --budget 540 \
        --unit-names units.txt --explanations texts.txt --out plan.parquet --tasks tasks.csv
    neuroneval crowd aggregate ratings.csv --plan plan.parquet --eta estimate --out labels.csv
    neuroneval crowd estimate --plan plan.parquet --labels labels.csv --out rho.csv

Choose a budget first with simulated raters on units with known labels: the relative
correlation error of each configuration (uniform or MG-IS sampling, majority vote or BRAgg)
per budget, and the budget each needs to reach a target::

    neuroneval crowd simulate acts.npy labels.npy model.npy --pairs pairs.csv \
        --budgets 60,120,240,480,960 --target 0.275 --out simulation/

One self-contained HTML page of a results directory (what `python -m neuroneval.demo --out DIR`
writes, or any directory holding a scores.parquet; `neuroneval.report` says what it reads)::

    neuroneval report demo-out -o report.html

The same commands run as `python -m neuroneval score ...` (or `sanity`, `meta`, `crowd`, `report`).

Inputs
    ACTIVATIONS is a `.npy` file, a shard directory (`neuroneval.sources.write_shards`) or a
    `.npz` file holding a `scipy.sparse` matrix (`scipy.sparse.save_npz`). CONCEPTS takes the
    same forms, plus a `.parquet`/`.csv` table of `(input, concept, probability)` rows.
    `score` reads them in place; `sanity` and `meta` read them into memory (`meta` only the
    activations) and refuse, with one line, matrices that would not fit.

    `crowd plan` and `crowd simulate` take ACTIVATIONS and their CONCEPT_MODEL (a cheap model's
    probabilities) and LABELS (true labels) in the same forms, and read into memory only the
    columns their pairs use. RATINGS and LABELS of `crowd aggregate` and `crowd estimate` are
    `.csv` or `.parquet` tables.

    TRUTH (`sanity`, `meta`) gives each unit's correct concept: a `.npy` file of K integer
    concept indices, or a text file with one line per unit holding a concept name (of
    CONCEPTS' table, shard manifest or `--concept-names`) or else a concept index.

Output
    Without `--pairs`, `neuroneval.evaluate` writes the table block by block; an interrupted
    run resumes when the same command is run again (`--restart` discards an unfinished run
    made with other arguments). With `--ray [ADDRESS]`, `neuroneval.distributed.evaluate` writes
    the same table as Ray tasks, on the cluster at ADDRESS or on a local Ray. With `--pairs`, `neuroneval.score` computes the table, which
    is written aside and renamed into place. On a terminal a progress bar shows on stderr;
    after success a short summary (each unit's best concept under the first metric) goes to
    stdout. `--quiet` turns both off.

    `sanity` prints Table 3 as markdown and a one-line verdict; with `--out DIR` it writes
    table.csv, table.md, records.csv and chart.png there (each complete or absent). `meta`
    prints its table best first and writes it, with `--out`, to a `.csv` or `.parquet` file
    (written aside and renamed into place).

    `crowd plan` writes the plan (parquet) and the task table (`.csv` or `.parquet`; default
    `<plan stem>-tasks.csv` beside the plan); `crowd aggregate` the labels and, with `--eta
    estimate --rater-rates`, each rater's fitted error rate; `crowd estimate` its table with
    `--out`; each command's files are written aside and renamed into place, all or none.
    `crowd simulate --out DIR` writes rce.csv, needed.csv and rce.png there (all or none).

    `report` writes its page (default RESULTS_DIR/report.html) aside and renames it into
    place, then prints its path and size.

Exit codes
    0 on success; 2 for bad input or arguments (one line on stderr says what is wrong); 1 for
    other operating-system errors (a full disk, a permission denied); 130 when interrupted.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import polars as pl

from . import __version__, crowd, evaluate, meta, report, sanity, score
from ._files import write_atomic, write_files_atomic
from ._registry import METRICS
from ._score import DEFAULT_ALPHA, DEFAULT_TOP_RANDOM_ALPHA, metric_list
from .errors import NeuronEvalError, ParameterError, ShapeError, SourceError
from .sources import Source, open_activations, open_concepts

__all__ = ["main", "read_pairs", "read_truth"]

PROG = "neuroneval"
#: Units listed in the summary after a run.
SUMMARY_UNITS = 10
_THREADS_VARIABLE = "NEURONEVAL_NUM_THREADS"

Command = Callable[[argparse.Namespace], int]


def main(argv: list[str] | None = None) -> int:
    """Runs the command line on `argv` (default `sys.argv[1:]`) and returns the exit code.

    Examples
    --------
    >>> main(["--version"])  # doctest: +ELLIPSIS
    neuroneval ...
    0
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        check: Callable[[argparse.Namespace], None] | None = getattr(args, "check", None)
        if check is not None:
            check(args)  # usage errors that argparse cannot express (which options go together)
    except SystemExit as e:  # usage errors (2), --help and --version (0)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    command: Command = args.command
    try:
        return command(args)
    except KeyboardInterrupt:
        resumes = getattr(args, "resumes", False)
        _print_error("interrupted; run the same command again to resume" if resumes else "interrupted")
        return 130
    except (NeuronEvalError, ValueError, FileNotFoundError) as e:
        _print_error(f"error: {_one_line(e)}")
        return 2
    except OSError as e:
        _print_error(f"error: {_one_line(e)}")
        return 1


def _print_error(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def _one_line(e: BaseException) -> str:
    """The exception's message on one line (some messages quote multi-line library errors)."""
    text = " ".join(str(e).split())
    return text or type(e).__name__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Exact, fast NeuronEval metrics: is this explanation of a neuron any good?",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    _add_score(commands)
    _add_sanity(commands)
    _add_meta(commands)
    _add_crowd(commands)
    _add_report(commands)
    _add_demo(commands)
    return parser


# --------------------------------------------------------------------------- score


def _add_score(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "score",
        help="score explanations (concepts) of units and write a parquet table",
        description=(
            "Score every (unit, concept) pair, or the pairs of --pairs, under the given metrics "
            "and write one parquet row per pair: unit, concept, [rank,] one column per metric."
        ),
        epilog=f"metrics: {', '.join(METRICS)}",
    )
    p.add_argument(
        "activations",
        metavar="ACTIVATIONS",
        help="inputs x units: a .npy file, a shard directory, or a .npz scipy sparse matrix",
    )
    p.add_argument(
        "concepts",
        metavar="CONCEPTS",
        help="inputs x concepts: as ACTIVATIONS, or a .parquet/.csv table of (input, concept, probability)",
    )
    p.add_argument("--out", required=True, metavar="FILE", help="the parquet file to write")
    p.add_argument(
        "--metrics",
        metavar="LIST",
        help="comma-separated metric names (default: all); the first one ranks --top and the summary",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_ALPHA,
        help=f"top-alpha fraction that binarises each unit, in (0, 1] (default {DEFAULT_ALPHA})",
    )
    p.add_argument("--lam", type=float, default=1.0, help="wpmi's lambda, >= 0 (default 1.0)")
    p.add_argument("--k", type=int, default=25, help="samples per half of the top-random metrics (default 25)")
    p.add_argument(
        "--top-alpha",
        type=float,
        default=DEFAULT_TOP_RANDOM_ALPHA,
        help=f"top fraction of the top-random metrics (default {DEFAULT_TOP_RANDOM_ALPHA})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the top-random metrics (default 0)")
    p.add_argument("--unit-names", metavar="FILE", help="unit names, one per line")
    p.add_argument("--concept-names", metavar="FILE", help="concept names, one per line")
    p.add_argument(
        "--top",
        type=int,
        metavar="N",
        help="keep each unit's N best concepts under the first metric, with a rank column (default: all)",
    )
    p.add_argument(
        "--pairs",
        metavar="FILE",
        help="score only these pairs: a CSV with integer columns unit,concept or an (M, 2) integer .npy",
    )
    p.add_argument("--threads", type=int, metavar="N", help=f"threads to use (default: ${_THREADS_VARIABLE} or all)")
    p.add_argument(
        "--block-units",
        type=int,
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
    p.set_defaults(command=_score, resumes=True)


def _score(args: argparse.Namespace) -> int:
    metrics = metric_list(_split_metrics(args.metrics))
    out = Path(args.out)
    if out.is_dir():
        raise ParameterError(f"--out {out} is a directory; expected the path of a parquet file")
    _check_threads(args.threads)
    if args.top is not None and args.top < 1:
        raise ParameterError(f"--top must be a positive integer; got {args.top}")
    if args.block_units is not None and args.block_units < 1:
        raise ParameterError(f"--block-units must be a positive integer; got {args.block_units}")
    if args.pairs is not None and args.top is not None:
        raise ParameterError("--top cannot be combined with --pairs (which scores exactly the pairs given)")
    if args.pairs is not None and args.ray is not None:
        raise ParameterError("--ray cannot be combined with --pairs")
    parameters: dict[str, Any] = {
        "alpha": args.alpha,
        "lam": args.lam,
        "k": args.k,
        "top_alpha": args.top_alpha,
        "seed": args.seed,
    }
    acts, conc = _open_inputs(args.activations, args.concepts, args.unit_names, args.concept_names)
    with _threads(args.threads):
        if args.ray is not None:
            from . import distributed

            distributed.evaluate(
                acts,
                conc,
                metrics,
                **parameters,
                out=out,
                address=args.ray or None,
                units_per_task=args.block_units,
                cpus_per_task=args.threads or 1,
                keep="all" if args.top is None else args.top,
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
                keep="all" if args.top is None else args.top,
                block_units=args.block_units,
                restart=args.restart,
                progress=not args.quiet,
            )
        else:
            table = score(acts, conc, metrics, **parameters, pairs=read_pairs(args.pairs))
            _write_atomic(table, out)
    if not args.quiet:
        print(_summary(args.out, metrics, acts, conc, top=args.top, pairs=args.pairs is not None), flush=True)
    return 0


def _split_metrics(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [m.strip() for m in text.split(",") if m.strip()]


def _open_inputs(
    activations: str, concepts: str, unit_names: str | None, concept_names: str | None
) -> tuple[Source, Source]:
    """Both sources, with their names.

    The sources are opened once here and handed to `evaluate`/`score` (which take a `Source`
    as is), so a concept table is read once and the summary knows the shapes.
    """
    acts = open_activations(activations, unit_names=unit_names)
    conc = open_concepts(concepts, n_inputs=acts.n_rows, concept_names=concept_names)
    return acts, conc


def read_pairs(path: str | os.PathLike[str]) -> np.ndarray:
    """(unit, concept) index pairs from a CSV file with integer columns `unit` and `concept`,
    or from a `.npy` file holding an (M, 2) integer array.

    Examples
    --------
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "pairs.csv")
    >>> _ = open(p, "w").write("unit,concept\\n3,0\\n1,2\\n")
    >>> read_pairs(p).tolist()
    [[3, 0], [1, 2]]
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"pairs file {p} does not exist")
    if p.suffix == ".npy":
        try:
            arr = np.load(p, allow_pickle=False)
        except Exception as e:  # numpy raises ValueError, OSError, EOFError, ... on corrupt files
            raise SourceError(f"pairs file {p} is not a valid .npy file: {e}") from e
        if arr.ndim != 2 or arr.shape[1] != 2 or arr.dtype.kind not in "iu":
            raise SourceError(
                f"pairs file {p} holds a {arr.dtype} array of shape {arr.shape}; expected (M, 2) integers"
            )
        return np.ascontiguousarray(arr, dtype=np.int64)
    if p.suffix != ".csv":
        raise SourceError(f"cannot read pairs from {p}: expected a .csv or .npy file")
    try:
        table = pl.read_csv(p)
    except Exception as e:  # polars raises many kinds; all mean the file is unreadable
        raise SourceError(f"cannot read the pairs file {p}: {e}") from e
    missing = [c for c in ("unit", "concept") if c not in table.columns]
    if missing:
        raise SourceError(f"pairs file {p} lacks the column(s) {missing}; it has {table.columns}")
    try:
        columns = [table[c].cast(pl.Int64, strict=True) for c in ("unit", "concept")]
    except Exception as e:
        raise SourceError(f"pairs file {p}: 'unit' and 'concept' must hold integer indices ({e})") from e
    if any(c.null_count() for c in columns):
        raise SourceError(f"pairs file {p} has empty cells")
    return np.column_stack([c.to_numpy() for c in columns]).astype(np.int64, copy=False).reshape(-1, 2)


@contextmanager
def _threads(threads: int | None) -> Iterator[None]:
    """Sets the library's thread count for the duration of one command."""
    if threads is None:
        yield
        return
    previous = os.environ.get(_THREADS_VARIABLE)
    os.environ[_THREADS_VARIABLE] = str(threads)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_THREADS_VARIABLE, None)
        else:
            os.environ[_THREADS_VARIABLE] = previous


def _write_atomic(table: pl.DataFrame, out: Path, *, csv: bool = False) -> None:
    """`table` to `out` as parquet (or CSV), atomically."""
    write_atomic(out, table.write_csv if csv else table.write_parquet)


def _summary(out: str, metrics: Sequence[str], acts: Source, conc: Source, *, top: int | None, pairs: bool) -> str:
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


def _check_threads(threads: int | None) -> None:
    if threads is not None and threads < 1:
        raise ParameterError(f"--threads must be a positive integer; got {threads}")


# --------------------------------------------------------------------------- sanity

#: Options of the experimental test only: (flag, attribute). Their defaults are None so that
#: giving one without ACTIVATIONS and CONCEPTS is a usage error rather than silently unused.
_EXPERIMENTAL_ONLY: tuple[tuple[str, str], ...] = (
    ("--truth", "truth"),
    ("--concept-names", "concept_names"),
    ("--alpha", "alpha"),
    ("--validation", "validation"),
    ("--setting", "setting"),
)
_THEORETICAL_ONLY: tuple[tuple[str, str], ...] = (("--n", "n"), ("--seeds", "seeds"))
_DEFAULT_VALIDATION = 0.05
_DEFAULT_N = 500_000
_DEFAULT_SEEDS = 1000
_DEFAULT_SETTING = "experimental"
#: Share of the machine's memory that `sanity` and `meta` may plan to fill with dense matrices.
_MEMORY_SHARE = 0.8


def _add_sanity(commands: Any) -> None:
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
    )
    p.add_argument(
        "activations",
        nargs="?",
        metavar="ACTIVATIONS",
        help="inputs x units, as for `score` (a .npy file, a shard directory, a .npz sparse matrix); read into memory",
    )
    p.add_argument(
        "concepts",
        nargs="?",
        metavar="CONCEPTS",
        help="inputs x concepts: as ACTIVATIONS, or a .parquet/.csv table of (input, concept, probability)",
    )
    p.add_argument(
        "--truth",
        metavar="FILE",
        help=(
            "each unit's correct concept: a .npy of K integer concept indices, or a text file with one "
            "concept name or index per unit (default: each unit's argmax-IoU concept at alpha 0.005)"
        ),
    )
    p.add_argument(
        "--concept-names",
        metavar="FILE",
        help="concept names, one per line (for names in --truth; a concept table or manifest brings its own)",
    )
    p.add_argument("--metrics", metavar="LIST", help="comma-separated metric names (default: all)")
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
        type=float,
        metavar="FRACTION",
        help=f"experimental test: share of the units used for tuning, in (0, 1) (default {_DEFAULT_VALIDATION})",
    )
    p.add_argument(
        "--keep",
        type=float,
        default=0.5,
        help="missing labels: probability of keeping each label, in [0, 1] (default 0.5)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=2.0,
        help="extra labels: expected label mass after / before, >= 1 (default 2)",
    )
    p.add_argument(
        "--n",
        type=int,
        help=f"theoretical test: number of inputs (default {_DEFAULT_N:,}; at least 10,000 for gamma 0.0001)",
    )
    p.add_argument("--seeds", type=int, help=f"theoretical test: seeds per gamma (default {_DEFAULT_SEEDS:,})")
    p.add_argument(
        "--setting",
        metavar="NAME",
        help=f"experimental test: the setting's name in records.csv (default {_DEFAULT_SETTING!r})",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write table.csv, table.md, records.csv and chart.png into this directory (created if needed)",
    )
    p.add_argument("--no-chart", action="store_true", help="with --out, do not draw chart.png (needs matplotlib)")
    p.add_argument("--threads", type=int, metavar="N", help=f"threads to use (default: ${_THREADS_VARIABLE} or all)")

    def check(args: argparse.Namespace) -> None:
        data = args.activations is not None
        if data and args.concepts is None:
            p.error("CONCEPTS is missing: the experimental test needs ACTIVATIONS and CONCEPTS")
        if not data and not args.theoretical:
            p.error("give ACTIVATIONS and CONCEPTS (the experimental test), --theoretical, or both")
        if not data:
            given = [flag for flag, name in _EXPERIMENTAL_ONLY if getattr(args, name) is not None]
            if given:
                p.error(f"{', '.join(given)}: only for the experimental test, which needs ACTIVATIONS and CONCEPTS")
        if not args.theoretical:
            given = [flag for flag, name in _THEORETICAL_ONLY if getattr(args, name) is not None]
            if given:
                p.error(f"{', '.join(given)}: only for the theoretical test; add --theoretical")
            if args.lam is not None and args.alpha is None:
                p.error("--lam needs --alpha here: without it the experimental test tunes alpha and lambda together")

    p.set_defaults(command=_sanity, check=check)


def _sanity(args: argparse.Namespace) -> int:
    metrics = metric_list(_split_metrics(args.metrics))
    _check_parameters(args)
    if not 0.0 <= args.keep <= 1.0:
        raise ParameterError(f"--keep must be a probability in [0, 1]; got {args.keep:g}")
    if not (math.isfinite(args.rate) and args.rate >= 1.0):
        raise ParameterError(f"--rate must be a finite number >= 1; got {args.rate:g}")
    n = _DEFAULT_N if args.n is None else args.n
    seeds = _DEFAULT_SEEDS if args.seeds is None else args.seeds
    if n < 2:
        raise ParameterError(f"--n must be an integer >= 2; got {n}")
    if seeds < 1:
        raise ParameterError(f"--seeds must be a positive integer; got {seeds}")
    smallest = min(sanity.GAMMAS)
    if args.theoretical and math.floor(smallest * n) < 1:
        raise ParameterError(
            f"--n {n} is too small: the smallest gamma, {smallest:g}, needs n >= {math.ceil(1 / smallest):,} "
            "(at least one positive input)"
        )
    setting = _DEFAULT_SETTING if args.setting is None else args.setting
    if not setting.strip():
        raise ParameterError("--setting must not be empty")
    out = None if args.out is None else Path(args.out)
    if out is not None and out.exists() and not out.is_dir():
        raise ParameterError(f"--out {out} is a file; expected a directory")
    chart = out is not None and not args.no_chart
    if chart and importlib.util.find_spec("matplotlib") is None:
        raise ParameterError("chart.png needs matplotlib (pip install matplotlib); or pass --no-chart")
    lam = 1.0 if args.lam is None else args.lam
    common: dict[str, Any] = {"keep": args.keep, "rate": args.rate, "seed": args.seed}

    results = []
    lines = []
    with _threads(args.threads):
        if args.activations is not None:
            acts, conc = _open_inputs(args.activations, args.concepts, None, args.concept_names)
            truth = None if args.truth is None else read_truth(args.truth, acts.n_columns, conc.n_columns, conc.names)
            _check_fits(
                2 * _dense_bytes(acts) + _dense_bytes(conc) + 3 * 8 * conc.n_rows * conc.n_columns,
                "the experimental test",
            )
            validation = _DEFAULT_VALIDATION if args.validation is None else args.validation
            result = sanity.experimental(
                _dense(acts),
                _dense(conc),
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
                f"experimental test{'' if args.setting is None else f' {setting!r}'}: {acts.n_rows:,} inputs, {conc.n_columns:,} concepts, "
                f"{acts.n_columns:,} units ({tuned}, Decrease Acc on {len(test):,}); correct concepts {source}"
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
    print(_verdict(result.table()), flush=True)
    if out is not None:
        written = result.write(out, chart=chart)
        print(f"wrote {', '.join(p.name for p in written)} to {out}", flush=True)
    return 0


def _check_parameters(args: argparse.Namespace) -> None:
    """The options `sanity` and `meta` share, checked before any file is read."""
    if args.alpha is not None and not 0.0 < args.alpha <= 1.0:
        raise ParameterError(f"--alpha must lie in (0, 1]; got {args.alpha:g}")
    if args.lam is not None and not (math.isfinite(args.lam) and args.lam >= 0.0):
        raise ParameterError(f"--lam must be a finite number >= 0; got {args.lam:g}")
    if args.validation is not None and not 0.0 < args.validation < 1.0:
        raise ParameterError(f"--validation must be a fraction in (0, 1); got {args.validation:g}")
    if args.seed < 0:
        raise ParameterError(f"--seed must be a non-negative integer; got {args.seed}")
    _check_threads(args.threads)


def _count(n: int, noun: str) -> str:
    """ "1 unit", "2 units"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _verdict(table: pl.DataFrame) -> str:
    """One line: which metrics pass every test that was run."""
    passing = table.filter(pl.col("passes"))["metric"].to_list()
    rule = f"Decrease Acc >= {sanity.PASS_LEVEL:g}% in every test"
    if not passing:
        return f"verdict: no metric passes ({rule}); {table.height} tested"
    return f"verdict: {len(passing)} of {table.height} metrics pass ({rule}): {', '.join(passing)}"


# --------------------------------------------------------------------------- meta


def _add_meta(commands: Any) -> None:
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
    )
    p.add_argument(
        "activations",
        metavar="ACTIVATIONS",
        help="inputs x units, as for `score` (a .npy file, a shard directory, a .npz sparse matrix); read into memory",
    )
    p.add_argument(
        "concepts",
        metavar="CONCEPTS",
        help="inputs x concepts: as ACTIVATIONS, or a .parquet/.csv table of (input, concept, probability)",
    )
    p.add_argument(
        "--truth",
        required=True,
        metavar="FILE",
        help="each unit's correct concept: a .npy of K integer concept indices, or a text file with one concept name or index per unit",
    )
    p.add_argument(
        "--concept-names",
        metavar="FILE",
        help="concept names, one per line (for names in --truth; a concept table or manifest brings its own)",
    )
    p.add_argument("--metrics", metavar="LIST", help="comma-separated metric names (default: all)")
    p.add_argument(
        "--alpha",
        type=float,
        help="use this alpha, in (0, 1], for every metric instead of tuning (default: tuned on validation)",
    )
    p.add_argument("--lam", type=float, help="with --alpha: wpmi's lambda, >= 0 (default 1; tuned without --alpha)")
    p.add_argument(
        "--validation",
        type=float,
        default=_DEFAULT_VALIDATION,
        metavar="FRACTION",
        help=f"share of the units used for tuning, in (0, 1) (default {_DEFAULT_VALIDATION})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the validation/test split (default 0)")
    p.add_argument("--out", metavar="FILE", help="also write the table to this .csv or .parquet file")
    p.add_argument("--threads", type=int, metavar="N", help=f"threads to use (default: ${_THREADS_VARIABLE} or all)")

    def check(args: argparse.Namespace) -> None:
        if args.lam is not None and args.alpha is None:
            p.error("--lam needs --alpha: without it alpha and lambda are tuned together")

    p.set_defaults(command=_meta, check=check)


def _meta(args: argparse.Namespace) -> int:
    metrics = metric_list(_split_metrics(args.metrics))
    _check_parameters(args)
    out = None if args.out is None else Path(args.out)
    if out is not None:
        if out.is_dir():
            raise ParameterError(f"--out {out} is a directory; expected a .csv or .parquet file")
        if out.suffix not in (".csv", ".parquet"):
            raise ParameterError(f"--out {out}: expected a file name ending in .csv or .parquet")
        if not out.parent.is_dir():
            raise FileNotFoundError(f"the output directory {out.parent} does not exist")
    acts, conc = _open_inputs(args.activations, args.concepts, None, args.concept_names)
    truth = read_truth(args.truth, acts.n_columns, conc.n_columns, conc.names)
    _check_fits(2 * _dense_bytes(acts), "meta-evaluation")
    lam = None if args.alpha is None else (1.0 if args.lam is None else args.lam)
    with _threads(args.threads):
        table = meta.meta_evaluate(
            _dense(acts), conc, truth, metrics, validation=args.validation, seed=args.seed, alpha=args.alpha, lam=lam
        )
    table = table.sort(pl.col("meta_auprc").fill_nan(None), descending=True, nulls_last=True, maintain_order=True)
    if out is not None:
        _write_atomic(table, out, csv=out.suffix == ".csv")
    val, test = meta.split_units(acts.n_columns, args.validation, args.seed)
    if args.alpha is None:
        how = f"alpha and lambda tuned on {_count(len(val), 'validation unit')}"
    else:
        fixed = f"alpha = {args.alpha:g}" + (f" (wpmi's lambda = {lam:g})" if "wpmi" in metrics else "")
        how = f"{fixed} for every metric, not tuned ({_count(len(val), 'validation unit')} left out)"
    print(f"meta-AUPRC on {len(test):,} test units x {conc.n_columns:,} concepts; {how}; seed {args.seed}")
    print(_format_meta(table))
    print(f"* passes the paper's sanity checks; random baseline about 1/{conc.n_columns:,}", flush=True)
    if out is not None:
        print(f"wrote {out}", flush=True)
    return 0


def _format_meta(table: pl.DataFrame) -> str:
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
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    lines = []
    for row in [head, *rows]:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------- crowd

_CONFIGURATION_NAMES = {"mgis": "MG-IS", "uniform": "uniform", "bragg": "BRAgg", "majority": "majority", "mean": "mean"}
_DEFAULT_ETA = 0.23
_DEFAULT_PRIOR = 0.05
_DEFAULT_GAMMA = 0.2
_TABLE_SUFFIXES = (".csv", ".parquet")


def _add_crowd(commands: Any) -> None:
    crowd_parser: argparse.ArgumentParser = commands.add_parser(
        "crowd",
        help="crowdsourced correlation: plan rating tasks, aggregate votes, estimate, simulate budgets",
        description=(
            "Crowdsourced evaluation (SPEC section 6): the correlation of a unit with an explanation from a "
            "few noisy human ratings. `plan` picks the inputs to rate (model-guided importance sampling) and "
            "writes a task table; `aggregate` turns the raters' votes into soft labels (BRAgg, majority, mean); "
            "`estimate` gives each pair's correlation with a bootstrap interval; `simulate` measures the "
            "relative correlation error of each configuration per budget with simulated raters."
        ),
    )
    steps = crowd_parser.add_subparsers(title="steps", metavar="STEP", required=True)
    _add_crowd_plan(steps)
    _add_crowd_aggregate(steps)
    _add_crowd_estimate(steps)
    _add_crowd_simulate(steps)


def _add_crowd_plan(steps: Any) -> None:
    p: argparse.ArgumentParser = steps.add_parser(
        "plan",
        help="draw the inputs raters see for each (unit, explanation) pair; write the plan and a task table",
        description=(
            "Draw budget // raters inputs per (unit, explanation) pair, with replacement, from the MG-IS "
            "proposal (inputs where the unit's standardised activation times the concept model's "
            "standardised probability is large, floor gamma / N) or uniformly. A repeated input is shown "
            "once, so a pair never needs more than --budget ratings. Writes the plan (for `aggregate` and "
            "`estimate`) and the task table for a crowdsourcing platform (task, pair, unit, unit_name, "
            "concept, explanation, input, raters)."
        ),
    )
    p.add_argument(
        "activations",
        metavar="ACTIVATIONS",
        help="inputs x units, as for `score` (a .npy file, a shard directory, a .npz sparse matrix)",
    )
    _add_model_and_pairs(p)
    p.add_argument("--budget", required=True, type=int, metavar="N", help="ratings per pair (at least --raters)")
    p.add_argument("--raters", type=int, default=3, metavar="N", help="raters per shown input (default 3)")
    p.add_argument(
        "--gamma",
        type=float,
        help=f"MG-IS: share of uniform sampling mixed in, in (0, 1] (default {_DEFAULT_GAMMA}; 1 is uniform)",
    )
    p.add_argument("--uniform", action="store_true", help="draw uniformly instead of by MG-IS")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    p.add_argument("--unit-names", metavar="FILE", help="unit names, one per line (for the task table)")
    p.add_argument(
        "--explanations",
        metavar="FILE",
        help="the explanations' texts, one per line (default: CONCEPT_MODEL's names, else 'concept T')",
    )
    p.add_argument(
        "--batch-size", type=int, default=20, metavar="N", help="inputs per task of the task table (default 20)"
    )
    p.add_argument("--out", required=True, metavar="PLAN", help="the plan to write (.parquet)")
    p.add_argument(
        "--tasks",
        metavar="FILE",
        help="the task table to write (.csv or .parquet; default: <PLAN stem>-tasks.csv beside the plan)",
    )

    def check(args: argparse.Namespace) -> None:
        if args.uniform and args.gamma is not None:
            p.error("--gamma is MG-IS's; it has no use with --uniform")

    p.set_defaults(command=_crowd_plan, check=check)


def _crowd_plan(args: argparse.Namespace) -> int:
    if args.raters < 1:
        raise ParameterError(f"--raters must be a positive integer; got {args.raters}")
    if args.budget < args.raters:
        raise ParameterError(f"--budget must be at least --raters ({args.raters}); got {args.budget}")
    gamma = _DEFAULT_GAMMA if args.gamma is None else args.gamma
    _check_gamma(gamma)
    _check_seed(args.seed)
    if args.batch_size < 1:
        raise ParameterError(f"--batch-size must be a positive integer; got {args.batch_size}")
    out = _output_file(args.out, "--out", (".parquet",))
    tasks_out = out.with_name(f"{out.stem}-tasks.csv") if args.tasks is None else Path(args.tasks)
    tasks_out = _output_file(tasks_out, "--tasks", _TABLE_SUFFIXES)
    if tasks_out.resolve() == out.resolve():
        raise ParameterError(f"--tasks and --out are the same file, {out}")
    pairs = read_pairs(args.pairs)
    acts = open_activations(args.activations, unit_names=args.unit_names)
    model = open_concepts(args.concept_model, n_inputs=acts.n_rows, concept_names=args.explanations)
    _check_rows(model, acts, "CONCEPT_MODEL")
    _check_pairs(pairs, args.pairs, acts.n_columns, model.n_columns)
    units, unit_of = np.unique(pairs[:, 0], return_inverse=True)
    concepts, concept_of = np.unique(pairs[:, 1], return_inverse=True)
    _check_fits(8 * acts.n_rows * (units.size + concepts.size), "crowd plan")
    # Only the columns the pairs use are read; the plan's pairs keep their original indices.
    result = crowd.plan(
        np.column_stack([unit_of, concept_of]),
        _dense_columns(acts, units),
        _dense_columns(model, concepts),
        args.budget,
        raters_per_input=args.raters,
        gamma=gamma,
        sampling="uniform" if args.uniform else "mgis",
        seed=args.seed,
        # crowd.plan's default names, of the original indices.
        unit_names=[f"unit {k}" if acts.names is None else acts.names[k] for k in units],
        explanations=[f"concept {t}" if model.names is None else model.names[t] for t in concepts],
    )
    result = replace(
        result,
        pairs=result.pairs.with_columns(
            pl.Series("unit", pairs[:, 0], dtype=pl.Int64), pl.Series("concept", pairs[:, 1], dtype=pl.Int64)
        ),
    )
    tasks = result.tasks(args.batch_size)
    _write_together([(out, result.write), (tasks_out, _table_writer(tasks, tasks_out))])
    print(_plan_summary(result, args, out, tasks_out, tasks), flush=True)
    return 0


def _plan_summary(result: crowd.Plan, args: argparse.Namespace, out: Path, tasks_out: Path, tasks: pl.DataFrame) -> str:
    shown = result.inputs().group_by("pair", maintain_order=True).len("inputs")
    table = result.pairs.join(shown, on="pair", how="left", maintain_order="left")
    draws = args.budget // args.raters
    how = "uniform sampling" if args.uniform else f"MG-IS (gamma {result.gamma:g})"
    lines = [
        f"planned {_count(result.pairs.height, 'pair')} over {result.n_inputs:,} inputs by {how}, seed {args.seed}: "
        f"{_count(draws, 'draw')} per pair, {_count(args.raters, 'rater')} per shown input",
    ]
    head = ["pair", "unit", "explanation", "distinct inputs", "ratings"]
    rows = [
        [str(r["pair"]), r["unit_name"], r["explanation"], f"{r['inputs']:,}", f"{r['inputs'] * args.raters:,}"]
        for r in table.head(SUMMARY_UNITS).iter_rows(named=True)
    ]
    lines.append(_align(head, rows, left=3))
    if table.height > SUMMARY_UNITS:
        lines.append(f"... and {table.height - SUMMARY_UNITS:,} more pairs")
    per_pair = table["inputs"] * args.raters
    lines.append(
        f"ratings needed: {result.ratings_needed():,} in all, {int(per_pair.min()):,} to {int(per_pair.max()):,} "
        f"per pair (budget {args.budget:,} per pair; repeated inputs are rated once)"
    )
    n_tasks = tasks["task"].n_unique()
    lines.append(f"wrote the plan to {out}")
    lines.append(
        f"wrote {_count(n_tasks, 'task')} (at most {args.batch_size:,} inputs each, {tasks.height:,} rows) to {tasks_out}"
    )
    return "\n".join(lines)


def _add_crowd_aggregate(steps: Any) -> None:
    p: argparse.ArgumentParser = steps.add_parser(
        "aggregate",
        help="turn the raters' votes into one soft label per (pair, input)",
        description=(
            "Aggregate binary votes into one label per rated (pair, input): BRAgg's posterior (raters wrong "
            "with rate eta, a prior that the concept is present), the majority vote (1/2 on a tie) or the "
            "mean vote. Every rated (pair, input) must be one the plan drew. Writes pair, input, votes, "
            "positive, label."
        ),
    )
    p.add_argument(
        "ratings",
        metavar="RATINGS",
        help="a .csv or .parquet table, one row per vote: pair, input, vote (0/1), and rater (for --eta estimate)",
    )
    p.add_argument("--plan", required=True, metavar="PLAN", help="the plan written by `crowd plan`")
    p.add_argument(
        "--method",
        choices=("bragg", "majority", "mean"),
        default="bragg",
        help="bragg (default), majority or mean",
    )
    p.add_argument(
        "--eta",
        metavar="RATE",
        help=(
            f"BRAgg: the raters' error rate, in (0, 0.5) (default {_DEFAULT_ETA}), or 'estimate' to fit each "
            "rater's own rate (one-coin Dawid-Skene; needs a rater column)"
        ),
    )
    p.add_argument(
        "--prior",
        metavar="P",
        help=f"BRAgg: the prior that the concept is present, in (0, 1) (default {_DEFAULT_PRIOR}), or 'model' for the concept model's probability",
    )
    p.add_argument("--out", required=True, metavar="LABELS", help="the labels table to write (.csv or .parquet)")
    p.add_argument(
        "--rater-rates",
        metavar="FILE",
        help="with --eta estimate: also write rater, eta, votes to this .csv or .parquet file",
    )

    def check(args: argparse.Namespace) -> None:
        if args.method != "bragg":
            given = [flag for flag, name in (("--eta", "eta"), ("--prior", "prior")) if getattr(args, name) is not None]
            if given:
                p.error(f"{', '.join(given)}: only for --method bragg")
        if args.rater_rates is not None and args.eta != "estimate":
            p.error("--rater-rates needs --eta estimate")

    p.set_defaults(command=_crowd_aggregate, check=check)


def _crowd_aggregate(args: argparse.Namespace) -> int:
    eta = _parse_eta(args.eta, estimate=True)
    prior = _parse_prior(args.prior)
    out = _output_file(args.out, "--out", _TABLE_SUFFIXES)
    rates_out = None if args.rater_rates is None else _output_file(args.rater_rates, "--rater-rates", _TABLE_SUFFIXES)
    if rates_out is not None and rates_out.resolve() == out.resolve():
        raise ParameterError(f"--rater-rates and --out are the same file, {out}")
    ratings = _read_table(args.ratings, "ratings")
    if eta == "estimate" and "rater" not in ratings.columns:
        raise ParameterError(f"--eta estimate needs a rater column in {args.ratings}; it has {ratings.columns}")
    plan = _read_plan(args.plan)
    labels = crowd.aggregate(ratings, args.method, eta=eta, prior=prior, plan=plan)
    rates = crowd.rater_error_rates(ratings, prior=prior, plan=plan) if eta == "estimate" else None
    writes = [(out, _table_writer(labels, out))]
    if rates is not None and rates_out is not None:
        writes.append((rates_out, _table_writer(rates, rates_out)))
    _write_together(writes)

    if args.method == "bragg":
        rate = "eta fitted per rater" if eta == "estimate" else f"eta {eta:g}"
        prior_text = "the concept model's probability" if prior == "model" else f"{prior:g}"
        how = f"BRAgg ({rate}, prior {prior_text})"
    else:
        how = f"the {args.method} vote"
    n_votes = int(labels["votes"].sum())
    lines = [
        f"aggregated {_count(n_votes, 'vote')} into {_count(labels.height, 'label')} "
        f"({n_votes / labels.height:.2f} votes per (pair, input)) by {how}; "
        f"{int((labels['label'] >= 0.5).sum()):,} labels >= 0.5"
    ]
    if rates is not None:
        lines.append("each rater's fitted error rate (one-coin Dawid-Skene):")
        rows = [[str(r["rater"]), f"{r['eta']:.4f}", f"{r['votes']:,}"] for r in rates.iter_rows(named=True)]
        lines.append(_align(["rater", "eta", "votes"], rows, left=1, indent="  "))
    unrated = plan.inputs().join(labels.select("pair", "input"), on=["pair", "input"], how="anti").height
    if unrated:
        lines.append(
            f"note: {unrated:,} of the plan's {plan.inputs().height:,} (pair, input) have no rating yet; "
            "`crowd estimate` needs them all"
        )
    lines.append(f"wrote {out}" + ("" if rates_out is None else f" and {rates_out}"))
    print("\n".join(lines), flush=True)
    return 0


def _add_crowd_estimate(steps: Any) -> None:
    p: argparse.ArgumentParser = steps.add_parser(
        "estimate",
        help="each planned pair's correlation from the labels, with a bootstrap interval",
        description=(
            "The importance-weighted correlation of each planned (unit, explanation) pair (SPEC section 6), "
            "with the standard error and percentile interval of a seeded bootstrap over the draws. Prints "
            "one line per pair."
        ),
    )
    p.add_argument("--plan", required=True, metavar="PLAN", help="the plan written by `crowd plan`")
    p.add_argument(
        "--labels",
        required=True,
        metavar="LABELS",
        help="the labels written by `crowd aggregate` (.csv or .parquet: pair, input, label)",
    )
    p.add_argument(
        "--self-normalised",
        action="store_true",
        help="divide by the sum of the weights instead of the number of draws",
    )
    p.add_argument("--level", type=float, default=0.95, help="confidence level, in (0, 1) (default 0.95)")
    p.add_argument(
        "--bootstrap", type=int, default=2000, metavar="N", help="bootstrap resamples (default 2000; 0: none)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    p.add_argument("--out", metavar="FILE", help="also write the table to this .csv or .parquet file")
    p.set_defaults(command=_crowd_estimate)


def _crowd_estimate(args: argparse.Namespace) -> int:
    if not 0.0 < args.level < 1.0:
        raise ParameterError(f"--level must lie in (0, 1); got {args.level:g}")
    if args.bootstrap < 0:
        raise ParameterError(f"--bootstrap must be a non-negative integer; got {args.bootstrap}")
    _check_seed(args.seed)
    out = None if args.out is None else _output_file(args.out, "--out", _TABLE_SUFFIXES)
    plan = _read_plan(args.plan)
    labels = _read_table(args.labels, "labels")
    table = crowd.estimate(
        plan,
        labels,
        self_normalised=args.self_normalised,
        level=args.level,
        bootstrap=args.bootstrap,
        seed=args.seed,
    )
    if out is not None:
        write_atomic(out, _table_writer(table, out))
    sampling = "uniform sampling" if plan.sampling == "uniform" else f"MG-IS (gamma {plan.gamma:g})"
    weights = "self-normalised weights" if args.self_normalised else "weights 1 / (N q)"
    interval = (
        f"{args.level:.0%} percentile interval and SE from {args.bootstrap:,} bootstrap resamples, seed {args.seed}"
        if args.bootstrap
        else "no bootstrap"
    )
    print(f"correlation of {_count(table.height, 'pair')} from {sampling} with {weights}; {interval}")
    ci = f"{args.level:.0%} CI"

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
    print(_align(["unit", "explanation", "rho", ci, "SE", "draws", "inputs"], rows, left=2))
    if table["rho"].is_nan().any():
        print("-: undefined (the pair's labels are constant)")
    if out is not None:
        print(f"wrote {out}")
    sys.stdout.flush()
    return 0


def _add_crowd_simulate(steps: Any) -> None:
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
    )
    p.add_argument(
        "activations",
        metavar="ACTIVATIONS",
        help="inputs x units, as for `score` (a .npy file, a shard directory, a .npz sparse matrix)",
    )
    p.add_argument(
        "labels",
        metavar="LABELS",
        help="inputs x explanations: the true binary labels, as CONCEPTS of `score`",
    )
    _add_model_and_pairs(p)
    p.add_argument(
        "--budgets", required=True, metavar="LIST", help="comma-separated ratings per pair, e.g. 60,120,240,480"
    )
    p.add_argument(
        "--eta",
        type=float,
        default=_DEFAULT_ETA,
        help=f"simulated raters' error rate, in (0, 0.5) (default {_DEFAULT_ETA})",
    )
    p.add_argument("--raters", type=int, default=3, metavar="N", help="raters per shown input (default 3)")
    p.add_argument(
        "--trials", type=int, default=20, metavar="N", help="trials per configuration and budget (default 20)"
    )
    p.add_argument(
        "--gamma",
        type=float,
        default=_DEFAULT_GAMMA,
        help=f"MG-IS: share of uniform sampling mixed in, in (0, 1] (default {_DEFAULT_GAMMA})",
    )
    p.add_argument(
        "--prior",
        metavar="P",
        help=f"BRAgg's prior, in (0, 1) (default {_DEFAULT_PRIOR}), or 'model' for the concept model's probability",
    )
    p.add_argument("--target", type=float, default=0.275, help="the RCE to reach, > 0 (default 0.275)")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws and the simulated votes (default 0)")
    p.add_argument("--out", metavar="DIR", help="write rce.csv, needed.csv and rce.png into this directory")
    p.add_argument("--no-chart", action="store_true", help="with --out, do not draw rce.png (needs matplotlib)")
    p.set_defaults(command=_crowd_simulate)


def _crowd_simulate(args: argparse.Namespace) -> int:
    budgets = _parse_budgets(args.budgets)
    if args.raters < 1:
        raise ParameterError(f"--raters must be a positive integer; got {args.raters}")
    if budgets[0] < args.raters:
        raise ParameterError(f"--budgets must all be at least --raters ({args.raters}); got {budgets[0]}")
    if not 0.0 < args.eta < 0.5:
        raise ParameterError(f"--eta must be a number in (0, 0.5); got {args.eta:g}")
    prior = _parse_prior(args.prior)
    _check_gamma(args.gamma)
    if args.trials < 1:
        raise ParameterError(f"--trials must be a positive integer; got {args.trials}")
    if not (math.isfinite(args.target) and args.target > 0):
        raise ParameterError(f"--target must be a positive number; got {args.target:g}")
    _check_seed(args.seed)
    out = None if args.out is None else Path(args.out)
    if out is not None and out.exists() and not out.is_dir():
        raise ParameterError(f"--out {out} is a file; expected a directory")
    chart = out is not None and not args.no_chart
    if chart and importlib.util.find_spec("matplotlib") is None:
        raise ParameterError("rce.png needs matplotlib (pip install matplotlib); or pass --no-chart")
    pairs = read_pairs(args.pairs)
    acts = open_activations(args.activations)
    labels = open_concepts(args.labels, n_inputs=acts.n_rows)
    # A concept table orders its concepts by name: give it LABELS' order (names or not, a
    # matrix's columns are in the order they have).
    table = Path(args.concept_model).suffix in _TABLE_SUFFIXES
    model = open_concepts(args.concept_model, n_inputs=acts.n_rows, concept_names=labels.names if table else None)
    _check_rows(labels, acts, "LABELS")
    _check_rows(model, acts, "CONCEPT_MODEL")
    if model.n_columns != labels.n_columns:
        raise ShapeError(
            f"CONCEPT_MODEL has {model.n_columns:,} explanations (columns) but LABELS has {labels.n_columns:,}"
        )
    _check_pairs(pairs, args.pairs, acts.n_columns, labels.n_columns)
    units, unit_of = np.unique(pairs[:, 0], return_inverse=True)
    concepts, concept_of = np.unique(pairs[:, 1], return_inverse=True)
    _check_fits(8 * acts.n_rows * (units.size + 2 * concepts.size), "crowd simulate")
    # Only the columns the pairs use are read; the result's pairs keep their original indices.
    sim = crowd.simulate(
        _dense_columns(acts, units),
        _dense_columns(labels, concepts),
        _dense_columns(model, concepts),
        np.column_stack([unit_of, concept_of]),
        budgets,
        eta=args.eta,
        raters_per_input=args.raters,
        trials=args.trials,
        gamma=args.gamma,
        prior=prior,
        target=args.target,
        seed=args.seed,
    )
    sim = replace(
        sim,
        pairs=sim.pairs.with_columns(
            pl.Series("unit", pairs[:, 0], dtype=pl.Int64), pl.Series("concept", pairs[:, 1], dtype=pl.Int64)
        ),
    )
    needed = sim.needed()
    written: list[Path] = []
    if out is not None:
        files: dict[str, Callable[[Path], object]] = {
            "rce.csv": sim.rce.write_csv,
            "needed.csv": needed.write_csv,
        }
        if chart:
            files["rce.png"] = sim.plot
        written = write_files_atomic(out, files)
    print(_simulate_summary(sim, needed, args, prior), flush=True)
    if out is not None:
        print(f"wrote {', '.join(p.name for p in written)} to {out}", flush=True)
    return 0


def _simulate_summary(sim: crowd.Simulation, needed: pl.DataFrame, args: argparse.Namespace, prior: Any) -> str:
    prior_text = "the concept model's probability" if prior == "model" else f"{prior:g}"
    lines = [
        f"simulated raters wrong with rate {sim.eta:g}, {_count(args.raters, 'rater')} per shown input, "
        f"{_count(sim.pairs.height, 'pair')} x {_count(sim.trials, 'trial')}; MG-IS gamma {args.gamma:g}, "
        f"BRAgg prior {prior_text}; seed {args.seed}",
        "relative correlation error (mean |rho_hat - rho| / |rho|) per ratings budget per pair:",
    ]
    budgets = list(sim.budgets)
    rows = []
    for (sampling, method), group in sim.rce.group_by("sampling", "aggregation", maintain_order=True):
        by_budget = dict(zip(group["budget"].to_list(), group["rce"].to_list(), strict=True))
        rows.append([_configuration(str(sampling), str(method)), *(f"{by_budget[b]:.3f}" for b in budgets)])
    lines.append(_align(["configuration", *(f"{b:,}" for b in budgets)], rows, left=1, indent="  "))
    nan = int(sim.rce["nan_estimates"].sum())
    if nan:
        lines.append(f"({nan:,} estimates had constant labels and count as rho_hat = 0)")
    lines.append(f"ratings per pair needed for RCE <= {sim.target:g}:")
    rows = [
        [
            _configuration(r["sampling"], r["aggregation"]),
            f"not reached within the largest budget ({budgets[-1]:,})"
            if r["needed"] is None
            else f"{r['needed']:,.0f}",
        ]
        for r in needed.iter_rows(named=True)
    ]
    lines.append(_align(["configuration", "ratings"], rows, left=2, indent="  "))
    return "\n".join(lines)


def _configuration(sampling: str, method: str) -> str:
    return f"{_CONFIGURATION_NAMES.get(sampling, sampling)} + {_CONFIGURATION_NAMES.get(method, method)}"


def _check_gamma(gamma: float) -> None:
    if not 0.0 < gamma <= 1.0:
        raise ParameterError(f"--gamma must lie in (0, 1]; got {gamma:g}")


def _check_seed(seed: int) -> None:
    if seed < 0:
        raise ParameterError(f"--seed must be a non-negative integer; got {seed}")


def _parse_eta(text: str | None, *, estimate: bool) -> float | Literal["estimate"]:
    """--eta: a rate in (0, 0.5), or (where `estimate`) the word 'estimate'."""
    if text is None:
        return _DEFAULT_ETA
    if estimate and text.strip() == "estimate":
        return "estimate"
    expected = "a number in (0, 0.5)" + (" or 'estimate'" if estimate else "")
    try:
        eta = float(text)
    except ValueError:
        raise ParameterError(f"--eta must be {expected}; got {text!r}") from None
    if not 0.0 < eta < 0.5:
        raise ParameterError(f"--eta must be {expected}; got {eta:g}")
    return eta


def _parse_prior(text: str | None) -> float | Literal["model"]:
    """--prior: a probability in (0, 1), or 'model'."""
    if text is None:
        return _DEFAULT_PRIOR
    if text.strip() == "model":
        return "model"
    try:
        prior = float(text)
    except ValueError:
        raise ParameterError(f"--prior must be a number in (0, 1) or 'model'; got {text!r}") from None
    if not 0.0 < prior < 1.0:
        raise ParameterError(f"--prior must be a number in (0, 1) or 'model'; got {prior:g}")
    return prior


def _parse_budgets(text: str) -> list[int]:
    """--budgets: comma-separated positive integers, returned sorted without repeats."""
    parts = [s.strip() for s in text.split(",") if s.strip()]
    if not parts:
        raise ParameterError("--budgets is empty; give ratings per pair such as 60,120,240")
    budgets = []
    for part in parts:
        if not re.fullmatch(r"[0-9][0-9_]*", part):
            raise ParameterError(f"--budgets must be comma-separated positive integers; got {part!r} in {text!r}")
        budgets.append(int(part))
    return sorted(set(budgets))


def _check_rows(src: Source, acts: Source, what: str) -> None:
    if src.n_rows != acts.n_rows:
        raise ShapeError(f"{what} has {src.n_rows:,} inputs (rows) but ACTIVATIONS has {acts.n_rows:,}")


def _check_pairs(pairs: np.ndarray, path: str, n_units: int, n_concepts: int) -> None:
    if pairs.shape[0] == 0:
        raise ParameterError(f"pairs file {path} holds no pair")
    bad = (pairs[:, 0] < 0) | (pairs[:, 0] >= n_units) | (pairs[:, 1] < 0) | (pairs[:, 1] >= n_concepts)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ShapeError(
            f"pairs file {path} row {i}: pair ({pairs[i, 0]}, {pairs[i, 1]}) is outside "
            f"{n_units:,} units x {n_concepts:,} explanations"
        )


def _dense_columns(src: Source, columns: npt.NDArray[np.int64]) -> np.ndarray:
    """Some columns of the source as one in-memory array, keeping its dtype."""
    core = src.core
    if isinstance(core, tuple):  # CSC: (rows, indptr, indices, values)
        _, indptr, indices, values = core
        dense = np.zeros((src.n_rows, columns.size), dtype=values.dtype)
        for j, c in enumerate(columns):
            lo, hi = int(indptr[c]), int(indptr[c + 1])
            dense[indices[lo:hi], j] = values[lo:hi]
        return dense
    if isinstance(core, list):  # dense row shards
        return np.concatenate([np.asarray(s[:, columns]) for s in core], axis=0)
    return np.asarray(np.asarray(core)[:, columns])


def _output_file(path: str | os.PathLike[str], flag: str, suffixes: Sequence[str]) -> Path:
    """An output file's path, checked before any work: its suffix, and a directory to go into."""
    p = Path(path)
    if p.is_dir():
        raise ParameterError(f"{flag} {p} is a directory; expected a {' or '.join(suffixes)} file")
    if p.suffix not in suffixes:
        raise ParameterError(f"{flag} {p}: expected a file name ending in {' or '.join(suffixes)}")
    if not p.parent.is_dir():
        raise FileNotFoundError(f"the output directory {p.parent} does not exist")
    return p


def _table_writer(table: pl.DataFrame, path: Path) -> Callable[[Path], object]:
    """Writes `table` as CSV or parquet, by `path`'s suffix."""
    return table.write_csv if path.suffix == ".csv" else table.write_parquet


def _write_together(files: Sequence[tuple[Path, Callable[[Path], object]]]) -> None:
    """Writes several files (anywhere) aside, then renames them into place: if one cannot be
    written, none is (each is `write_atomic`, nested: the later ones are renamed into place
    only after the earlier ones were written in full)."""
    if not files:
        return
    (path, write), rest = files[0], files[1:]

    def write_all(tmp: Path) -> None:
        write(tmp)
        _write_together(rest)

    write_atomic(path, write_all)


def _read_table(path: str, what: str) -> pl.DataFrame:
    """A .csv or .parquet table."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} file {p} does not exist")
    if p.suffix not in _TABLE_SUFFIXES:
        raise SourceError(f"cannot read {what} from {p}: expected a .csv or .parquet file")
    try:
        return pl.read_parquet(p) if p.suffix == ".parquet" else pl.read_csv(p)
    except Exception as e:  # polars raises many kinds; all mean the file is unreadable
        raise SourceError(f"cannot read the {what} file {p}: {e}") from e


def _read_plan(path: str) -> crowd.Plan:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"plan file {p} does not exist")
    return crowd.Plan.read(p)


def _align(head: Sequence[str], rows: Sequence[Sequence[str]], *, left: int, indent: str = "") -> str:
    """Rows as aligned text: the first `left` columns left-aligned, the rest right-aligned."""
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    lines = []
    for row in [head, *rows]:
        cells = [
            cell.ljust(w) if i < left else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------- report


def _add_report(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "report",
        help="write one self-contained HTML page of a results directory",
        description=(
            "Write one HTML page that needs no network of a results directory (scores.parquet, and when "
            "present sanity/, crowd/, top_inputs.parquet, inputs/, report.json; see neuroneval.report): per "
            "layer, histograms of the trustworthy metrics and a table of units with their best explanation, "
            "its scores and their top-activating inputs; the sanity checks and the crowd simulation."
        ),
    )
    p.add_argument("results", metavar="RESULTS_DIR", help="the results directory (holding scores.parquet)")
    p.add_argument(
        "-o", "--out", metavar="FILE", help="the page to write, a .html file (default: RESULTS_DIR/report.html)"
    )
    p.add_argument(
        "--max-units",
        type=int,
        default=report.MAX_UNITS,
        metavar="N",
        help=f"units listed per layer; a larger layer lists its N best-explained (default {report.MAX_UNITS})",
    )
    p.add_argument(
        "--inputs-per-unit",
        type=int,
        default=report.INPUTS_PER_UNIT,
        metavar="N",
        help=f"top-activating inputs shown per unit (default {report.INPUTS_PER_UNIT})",
    )
    p.set_defaults(command=_report)


def _report(args: argparse.Namespace) -> int:
    for flag, value in (("--max-units", args.max_units), ("--inputs-per-unit", args.inputs_per_unit)):
        if value < 1:
            raise ParameterError(f"{flag} must be a positive integer; got {value}")
    results = Path(args.results)
    if not results.exists():
        raise FileNotFoundError(f"results directory {results} does not exist")
    if not results.is_dir():
        raise ParameterError(f"RESULTS_DIR {results} is a file; expected a directory holding {report.SCORES}")
    out = results / "report.html" if args.out is None else _output_file(args.out, "--out", (".html", ".htm"))
    written = report.write_report(results, out, max_units=args.max_units, inputs_per_unit=args.inputs_per_unit)
    size = written.stat().st_size
    print(f"wrote {written} ({_size(size)})", flush=True)
    return 0


def _size(n: int) -> str:
    """ "812 bytes", "1.4 MB"."""
    if n < 1000:
        return _count(n, "byte")
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


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


# --------------------------------------------------------------------------- demo


def _add_demo(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "demo",
        help="the whole story on a model shipped in installed wheels (digits CNN, or MiniLM with --text)",
        description=(
            "Train a small CNN on scikit-learn's digits, score its units with every metric, run the sanity "
            "checks and a crowd simulation, and write a report (make demo). With --text: MiniLM's FFN neurons "
            "over gensim's Lee news corpus with lexicon concepts (needs the text extra)."
        ),
    )
    p.add_argument("--text", action="store_true", help="the MiniLM text demo instead of the digits CNN")
    p.add_argument("--out", metavar="DIR", help="output directory (default: demo-out, or demo-text-out with --text)")
    p.add_argument("--seed", type=int, default=0, help="seed of everything (default: 0)")
    p.set_defaults(command=_demo)


def _demo(args: argparse.Namespace) -> int:
    from . import demo

    argv = ["--seed", str(args.seed)]
    if args.out is not None:
        argv += ["--out", args.out]
    if args.text:
        from . import demo_text

        return demo_text.main(argv)
    return demo.main(argv)


# --------------------------------------------------------------------------- shared


def read_truth(
    path: str | os.PathLike[str], n_units: int, n_concepts: int, concept_names: Sequence[str] | None = None
) -> np.ndarray:
    """Each unit's correct concept index, from a `.npy` file of `n_units` integer concept
    indices, or a text file with one line per unit.

    A line that is one of `concept_names` is that concept (names win: a concept may be named
    "3"); otherwise it must be an integer index. Trailing blank lines are ignored.

    Examples
    --------
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "truth.txt")
    >>> _ = open(p, "w").write("dog\\n2\\ncat\\n")
    >>> read_truth(p, 3, 3, ["cat", "dog", "bird"]).tolist()
    [1, 2, 0]
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"truth file {p} does not exist")
    if p.suffix == ".npy":
        try:
            arr = np.load(p, allow_pickle=False)
        except Exception as e:  # numpy raises ValueError, OSError, EOFError, ... on corrupt files
            raise SourceError(f"truth file {p} is not a valid .npy file: {e}") from e
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise SourceError(
                f"truth file {p} holds a {arr.dtype} array of shape {arr.shape}; expected ({n_units},) integer concept indices"
            )
        if arr.shape[0] != n_units:
            raise ShapeError(f"truth file {p} has {arr.shape[0]} entries for {n_units} units")
        idx: npt.NDArray[np.int64] = arr.astype(np.int64)
        place = "entry"
    else:
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise SourceError(f"truth file {p} is not UTF-8 text (or give a .npy file of indices): {e}") from e
        while lines and not lines[-1].strip():
            lines.pop()
        if len(lines) != n_units:
            raise ShapeError(f"truth file {p} has {len(lines)} lines for {n_units} units")
        column_of = {name: i for i, name in enumerate(concept_names or [])}
        idx = np.empty(len(lines), dtype=np.int64)
        for i, line in enumerate(lines):
            text = line.strip()
            hit = column_of.get(line, column_of.get(text))
            if hit is not None:
                idx[i] = hit
            elif re.fullmatch(r"[+-]?[0-9]+", text):
                idx[i] = int(text)
            elif not text:
                raise SourceError(f"truth file {p} line {i + 1} is empty")
            elif concept_names is None:
                raise SourceError(
                    f"truth file {p} line {i + 1}: {text!r} is not a concept index, and the concepts have no "
                    "names to match (give --concept-names)"
                )
            else:
                known = ", ".join(repr(n) for n in list(column_of)[:5]) + (", ..." if len(column_of) > 5 else "")
                raise SourceError(f"truth file {p} line {i + 1}: unknown concept name {text!r} (known: {known})")
        place = "line"
    bad = (idx < 0) | (idx >= n_concepts)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        where = f"entry {i}" if place == "entry" else f"line {i + 1}"
        raise ShapeError(f"truth file {p} {where}: concept index {idx[i]} is out of range 0..{n_concepts - 1}")
    return idx


def _dense_bytes(src: Source) -> int:
    return src.n_rows * src.n_columns * src.dtype.itemsize


def _dense(src: Source) -> np.ndarray:
    """The source as one in-memory (or memory-mapped) array, keeping its dtype."""
    core = src.core
    if isinstance(core, tuple):  # CSC: (rows, indptr, indices, values)
        _, indptr, indices, values = core
        dense = np.zeros(src.shape, dtype=values.dtype)
        dense[indices, np.repeat(np.arange(src.n_columns), np.diff(indptr))] = values
        return dense
    if isinstance(core, list):  # dense row shards
        return np.concatenate(core, axis=0)
    return np.asarray(core)


def _memory_bytes() -> int | None:
    """This machine's physical memory, when the system says."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _check_fits(need: int, what: str) -> None:
    """One clear error, instead of a MemoryError or the OOM killer, for matrices too big to hold."""
    total = _memory_bytes()
    if total is not None and need > _MEMORY_SHARE * total:
        raise ShapeError(
            f"{what} reads the matrices into memory and would need about {need / 2**30:.1f} GiB, more than "
            f"{_MEMORY_SHARE:.0%} of this machine's {total / 2**30:.1f} GiB; use fewer units, concepts or inputs"
        )
