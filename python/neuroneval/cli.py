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

The same commands run as `python -m neuroneval score ...`.

Inputs
    ACTIVATIONS is a `.npy` file, a shard directory (`neuroneval.sources.write_shards`) or a
    `.npz` file holding a `scipy.sparse` matrix (`scipy.sparse.save_npz`). CONCEPTS takes the
    same forms, plus a `.parquet`/`.csv` table of `(input, concept, probability)` rows.

Output
    Without `--pairs`, `neuroneval.evaluate` writes the table block by block; an interrupted
    run resumes when the same command is run again (`--restart` discards an unfinished run
    made with other arguments). With `--pairs`, `neuroneval.score` computes the table, which
    is written aside and renamed into place. On a terminal a progress bar shows on stderr;
    after success a short summary (each unit's best concept under the first metric) goes to
    stdout. `--quiet` turns both off.

Exit codes
    0 on success; 2 for bad input or arguments (one line on stderr says what is wrong); 1 for
    other operating-system errors (a full disk, a permission denied); 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from . import __version__, evaluate, score
from ._registry import METRICS
from ._score import DEFAULT_ALPHA, DEFAULT_TOP_RANDOM_ALPHA, metric_list
from .errors import NeuronEvalError, ParameterError, SourceError
from .sources import Source, open_activations, open_concepts

__all__ = ["main"]

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
    except SystemExit as e:  # usage errors (2), --help and --version (0)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    command: Command = args.command
    try:
        return command(args)
    except KeyboardInterrupt:
        _print_error("interrupted; run the same command again to resume")
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
    p.set_defaults(command=_score)


def _score(args: argparse.Namespace) -> int:
    metrics = metric_list(_split_metrics(args.metrics))
    out = Path(args.out)
    if out.is_dir():
        raise ParameterError(f"--out {out} is a directory; expected the path of a parquet file")
    if args.threads is not None and args.threads < 1:
        raise ParameterError(f"--threads must be a positive integer; got {args.threads}")
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


def _write_atomic(table: pl.DataFrame, out: Path) -> None:
    """`table` to `out`: written to `<out>.tmp`, then renamed into place."""
    if not out.parent.is_dir():
        raise FileNotFoundError(f"the output directory {out.parent} does not exist")
    tmp = out.with_name(out.name + ".tmp")
    try:
        table.write_parquet(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


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
