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

The same commands run as `python -m neuroneval score ...` (or `sanity`, `meta`).

Inputs
    ACTIVATIONS is a `.npy` file, a shard directory (`neuroneval.sources.write_shards`) or a
    `.npz` file holding a `scipy.sparse` matrix (`scipy.sparse.save_npz`). CONCEPTS takes the
    same forms, plus a `.parquet`/`.csv` table of `(input, concept, probability)` rows.
    `score` reads them in place; `sanity` and `meta` read them into memory (`meta` only the
    activations) and refuse, with one line, matrices that would not fit.

    TRUTH (`sanity`, `meta`) gives each unit's correct concept: a `.npy` file of K integer
    concept indices, or a text file with one line per unit holding a concept name (of
    CONCEPTS' table, shard manifest or `--concept-names`) or else a concept index.

Output
    Without `--pairs`, `neuroneval.evaluate` writes the table block by block; an interrupted
    run resumes when the same command is run again (`--restart` discards an unfinished run
    made with other arguments). With `--pairs`, `neuroneval.score` computes the table, which
    is written aside and renamed into place. On a terminal a progress bar shows on stderr;
    after success a short summary (each unit's best concept under the first metric) goes to
    stdout. `--quiet` turns both off.

    `sanity` prints Table 3 as markdown and a one-line verdict; with `--out DIR` it writes
    table.csv, table.md, records.csv and chart.png there (each complete or absent). `meta`
    prints its table best first and writes it, with `--out`, to a `.csv` or `.parquet` file
    (written aside and renamed into place).

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
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from . import __version__, evaluate, meta, sanity, score
from ._files import write_atomic
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
    parameters: dict[str, Any] = {
        "alpha": args.alpha,
        "lam": args.lam,
        "k": args.k,
        "top_alpha": args.top_alpha,
        "seed": args.seed,
    }
    acts, conc = _open_inputs(args.activations, args.concepts, args.unit_names, args.concept_names)
    with _threads(args.threads):
        if args.pairs is None:
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
        written = _write_sanity(result, out, chart)
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


def _write_sanity(result: sanity.SanityResult, out: Path, chart: bool) -> list[Path]:
    """`result.write`: all files or none, and no directory left behind on failure."""
    return result.write(out, chart=chart)


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
