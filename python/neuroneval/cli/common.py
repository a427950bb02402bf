"""What the commands share: the parser class (one-line value errors, declared option rules),
the typed option converters, error printing, threads, output files and aligned text.

Every option is declared once, with `type=` one of the converters here (or a command's own):
a converter turns the text into the value and raises `argparse.ArgumentTypeError` with the
rest of the sentence ("must be a positive integer; got 0"); the parser prints it after the
flag as one line, `neuroneval: error: --top must be a positive integer; got 0`, and exits 2.
Which options go together is a table of `Needs`, `Excludes` and `AtLeast` rules handed to the
command's parser (`rules=`), which checks them after parsing.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import polars as pl

from neuroneval.errors import OutputError, ParameterError, ShapeError
from neuroneval.files import check_output, check_writable, write_atomic
from neuroneval.progress import Progress
from neuroneval.sources import Source, open_activations, open_concepts

PROG = "neuroneval"
#: Units (or pairs) listed in a summary after a run.
SUMMARY_UNITS = 10
THREADS_VARIABLE = "NEURONEVAL_NUM_THREADS"
#: Share of the machine's memory that a command may plan to fill with dense matrices.
MEMORY_SHARE = 0.8
TABLE_SUFFIXES = (".csv", ".parquet")
#: Share of the units that `sanity` and `meta` tune on.
DEFAULT_VALIDATION = 0.05

Command = Callable[[argparse.Namespace], int]
N = TypeVar("N", int, float)


# --------------------------------------------------------------------------- errors


def print_error(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def one_line(e: BaseException) -> str:
    """The exception's message on one line (some messages quote multi-line library errors)."""
    text = " ".join(str(e).split())
    return text or type(e).__name__


# --------------------------------------------------------------------------- option rules


def _dest(option: str) -> str:
    """The namespace attribute of an option ("--concept-names") or a positional ("ACTIVATIONS")."""
    return option.lstrip("-").replace("-", "_").lower()


def given(args: argparse.Namespace, option: str) -> bool:
    """Whether the option was given: its value is not the None (or False) of its default."""
    return getattr(args, _dest(option)) not in (None, False)


@dataclass(frozen=True)
class Needs:
    """Any of `options` given needs one of `any_of`: an option given, or `(option, value)`.

    With no `options`, one of `any_of` is always needed. The message may name the options
    given as `{given}`.
    """

    options: tuple[str, ...]
    any_of: tuple[str | tuple[str, object], ...]
    message: str

    def violation(self, args: argparse.Namespace) -> str | None:
        present = [o for o in self.options if given(args, o)]
        if self.options and not present:
            return None
        for need in self.any_of:
            if given(args, need) if isinstance(need, str) else getattr(args, _dest(need[0])) == need[1]:
                return None
        return self.message.format(given=", ".join(present))


@dataclass(frozen=True)
class Excludes:
    """`option` given excludes each of `others` (each with its own message)."""

    option: str
    others: tuple[tuple[str, str], ...]  # (other option, message)

    def violation(self, args: argparse.Namespace) -> str | None:
        if given(args, self.option):
            for other, message in self.others:
                if given(args, other):
                    return message
        return None


@dataclass(frozen=True)
class AtLeast:
    """`option`'s value (the smallest, of a list) is at least `bound`'s (the smallest, of a list): a value
    error, one line."""

    option: str
    bound: str
    message: str  # with {value} and {bound}

    def violation(self, args: argparse.Namespace) -> str | None:
        value, bound = getattr(args, _dest(self.option)), getattr(args, _dest(self.bound))
        smallest = min(value) if isinstance(value, list) else value
        bound = min(bound) if isinstance(bound, list) else bound
        return None if smallest >= bound else self.message.format(value=smallest, bound=bound)


Rule = Needs | Excludes | AtLeast


class Parser(argparse.ArgumentParser):
    """argparse with one-line value errors and declared option rules.

    Every error is one line: a converter's `ArgumentTypeError` and a violated `AtLeast` rule
    name the flag; usage errors (an unknown command, an option missing, options that do not
    go together) say where the usage is (`--help`) instead of printing it.
    """

    def __init__(self, *args: Any, rules: Sequence[Rule] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rules = tuple(rules)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        for rule in self.rules:
            message = rule.violation(parsed)
            if message is not None:
                if isinstance(rule, AtLeast):
                    self.fail(message)
                self.error(message)
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        # argparse calls this while handling the ArgumentError that it raised from a
        # converter's ArgumentTypeError: that is a bad value, told in one line.
        handled = sys.exc_info()[1]
        if isinstance(handled, argparse.ArgumentError) and isinstance(handled.__context__, argparse.ArgumentTypeError):
            flag = (handled.argument_name or "").split("/")[-1]  # "-o/--out": "--out"
            self.fail(f"{flag} {handled.__context__}")
        self.fail(f"{message} (see '{self.prog} --help')")

    def fail(self, message: str) -> NoReturn:
        """A bad value: `neuroneval: error: <message>` and exit code 2."""
        print_error(f"error: {message}")
        self.exit(2)


# --------------------------------------------------------------------------- converters


def checked(kind: Callable[[str], N], ok: Callable[[N], bool], rule: str) -> Callable[[str], N]:
    """A converter: `kind(text)` (where that fails, argparse says "invalid int value"), then
    the value if `ok(value)`, else the error "must <rule>; got <value>".

    Examples
    --------
    >>> positive_int("3")
    3
    >>> positive_int("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a positive integer; got 0
    """

    def convert(text: str) -> N:
        value = kind(text)
        if not ok(value):
            shown = f"{value:g}" if isinstance(value, float) else f"{value}"
            raise argparse.ArgumentTypeError(f"must {rule}; got {shown}")
        return value

    convert.__name__ = getattr(kind, "__name__", "value")
    return convert


positive_int = checked(int, lambda v: v >= 1, "be a positive integer")
non_negative_int = checked(int, lambda v: v >= 0, "be a non-negative integer")
#: A number in (0, 1): a confidence level; `fraction`: a share of the units.
open_fraction = checked(float, lambda v: 0.0 < v < 1.0, "lie in (0, 1)")
fraction = checked(float, lambda v: 0.0 < v < 1.0, "be a fraction in (0, 1)")
#: A number in (0, 1]: MG-IS's gamma.
share = checked(float, lambda v: 0.0 < v <= 1.0, "lie in (0, 1]")
positive_number = checked(float, lambda v: math.isfinite(v) and v > 0, "be a positive number")


def not_empty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def names_list(text: str) -> list[str]:
    """A comma-separated list, blanks dropped ("auprc, f1," is ["auprc", "f1"])."""
    return [m.strip() for m in text.split(",") if m.strip()]


class OutputPath(type(Path())):  # type: ignore[misc]
    """A path the command writes (an option's value from `output_file` or `output_dir`):
    `check_outputs` compares these with every input the command was given."""

    directory = False


class OutputDir(OutputPath):
    directory = True


def check_outputs(args: argparse.Namespace) -> None:
    """Before any work: no output of the command is (or, for a file, holds) one of its
    inputs, the existing paths among its other arguments (`neuroneval.files.check_output`)."""
    values = [v for value in vars(args).values() for v in (value if isinstance(value, list) else [value])]
    outputs = [v for v in values if isinstance(v, OutputPath)]
    if not outputs:
        return
    inputs = [Path(v) for v in values if isinstance(v, (str, Path)) and not isinstance(v, OutputPath) and v]
    inputs = [p for p in inputs if os.path.lexists(p)]
    for out in outputs:
        if out.directory:
            for p in inputs:  # a directory of outputs may hold inputs, but may not be one
                if p.resolve() == out.resolve():
                    raise OutputError(f"the output directory {out} is also an input of this command")
            check_writable(out)
        else:
            check_output(out, inputs)


def output_file(*suffixes: str) -> Callable[[str], Path]:
    """A converter for an output file's path (see `output_file_problem`)."""

    def convert(text: str) -> Path:
        problem = output_file_problem(Path(text), suffixes)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return OutputPath(text)

    return convert


def output_file_problem(p: Path, suffixes: Sequence[str]) -> str | None:
    """What is wrong with an output file's path, checked before any work: its suffix, and a
    directory to go into."""
    expected = " or ".join(suffixes)
    if p.is_dir():
        return f"{p} is a directory; expected a {expected} file"
    if p.suffix not in suffixes:
        return f"{p}: expected a file name ending in {expected}"
    if not p.parent.is_dir():
        return f"{p}: the output directory {p.parent} does not exist"
    return None


def output_dir(text: str) -> Path:
    """A directory to write into (created if needed): not an existing file."""
    p = OutputDir(text)
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{p} is a file; expected a directory")
    return p


def add_activations(p: argparse.ArgumentParser, *, optional: bool = False, note: str = "") -> None:
    p.add_argument(
        "activations",
        nargs="?" if optional else None,
        metavar="ACTIVATIONS",
        help=f"inputs x units, as for `score` (a .npy file, a shard directory, a .npz sparse matrix, a delphi latent cache directory){note}",
    )


def add_concepts(p: argparse.ArgumentParser, *, optional: bool = False) -> None:
    p.add_argument(
        "concepts",
        nargs="?" if optional else None,
        metavar="CONCEPTS",
        help="inputs x concepts: as ACTIVATIONS, or a .parquet/.csv table of (input, concept, probability)",
    )


def add_names_and_metrics(p: argparse.ArgumentParser) -> None:
    """--concept-names and --metrics, as `sanity` and `meta` take them."""
    p.add_argument(
        "--concept-names",
        metavar="FILE",
        help="concept names, one per line (for names in --truth; a concept table or manifest brings its own)",
    )
    p.add_argument("--metrics", type=names_list, metavar="LIST", help="comma-separated metric names (default: all)")


def add_table_out(p: argparse.ArgumentParser) -> None:
    """--out of a command that prints a table and may also write it."""
    p.add_argument(
        "--out",
        type=output_file(*TABLE_SUFFIXES),
        metavar="FILE",
        help="also write the table to this .csv or .parquet file",
    )


def add_threads(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads", type=positive_int, metavar="N", help=f"threads to use (default: ${THREADS_VARIABLE} or all)"
    )


# --------------------------------------------------------------------------- checks before work


def chart_wanted(out: Path | None, no_chart: bool, name: str) -> bool:
    """Whether to draw the chart `name` into `out`; it needs matplotlib."""
    chart = out is not None and not no_chart
    if chart and importlib.util.find_spec("matplotlib") is None:
        raise ParameterError(f"{name} needs matplotlib (pip install matplotlib); or pass --no-chart")
    return chart


def memory_bytes() -> int | None:
    """This machine's physical memory, when the system says."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def check_fits(
    need: int,
    what: str,
    *,
    holds: str = "reads the matrices into memory and",
    remedy: str = "use fewer units, concepts or inputs",
    error: type[Exception] = ShapeError,
) -> None:
    """One clear error, before any work, instead of a MemoryError or the OOM killer: for
    matrices too big to hold, or (with `holds=""`, a `remedy` naming the option and
    `error=ParameterError`) for draws, resamples or seeds too many (a count typed with too
    many zeros)."""
    total = memory_bytes()
    if total is not None and need > MEMORY_SHARE * total:
        raise error(
            f"{what} {holds + ' ' if holds else ''}would need about {need / 2**30:.1f} GiB of memory, more than "
            f"{MEMORY_SHARE:.0%} of this machine's {total / 2**30:.1f} GiB; {remedy}"
        )


def dense_bytes(src: Source) -> int:
    return src.n_rows * src.n_columns * src.dtype.itemsize


# --------------------------------------------------------------------------- running


def open_inputs(
    activations: str, concepts: str, unit_names: str | None, concept_names: str | None
) -> tuple[Source, Source]:
    """Both sources, with their names.

    The sources are opened once here and handed to the library (which takes a `Source` as
    is), so a concept table is read once and the summary knows the shapes.
    """
    acts = open_activations(activations, unit_names=unit_names)
    conc = open_concepts(concepts, n_inputs=acts.n_rows, concept_names=concept_names)
    return acts, conc


@contextmanager
def threads(count: int | None) -> Iterator[None]:
    """Sets the library's thread count for the duration of one command."""
    if count is None:
        yield
        return
    previous = os.environ.get(THREADS_VARIABLE)
    os.environ[THREADS_VARIABLE] = str(count)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(THREADS_VARIABLE, None)
        else:
            os.environ[THREADS_VARIABLE] = previous


def table_writer(table: pl.DataFrame, path: Path) -> Callable[[Path], object]:
    """Writes `table` as CSV or parquet, by `path`'s suffix."""
    return table.write_csv if path.suffix == ".csv" else table.write_parquet


def write_table(table: pl.DataFrame, out: Path) -> None:
    """`table` to `out` as CSV or parquet (by its suffix), written aside and renamed into place."""
    write_atomic(out, table_writer(table, out))


def write_together(files: Sequence[tuple[Path, Callable[[Path], object]]]) -> None:
    """Writes several files (anywhere) aside, then renames them into place: if one cannot be
    written, none is (each is `write_atomic`, nested: the later ones are renamed into place
    only after the earlier ones were written in full)."""
    if not files:
        return
    (path, write), rest = files[0], files[1:]

    def write_all(tmp: Path) -> None:
        write(tmp)
        write_together(rest)

    write_atomic(path, write_all)


# --------------------------------------------------------------------------- text


def count(n: int, noun: str) -> str:
    """ "1 unit", "2 units"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def align(head: Sequence[str], rows: Sequence[Sequence[str]], *, left: int, indent: str = "") -> str:
    """Rows as aligned text: the first `left` columns left-aligned, the rest right-aligned.

    Examples
    --------
    >>> print(align(["name", "n"], [["a", "10"], ["bcd", "2"]], left=1))
    name   n
    a     10
    bcd    2
    """
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    lines = []
    for row in [head, *rows]:
        cells = [
            cell.ljust(w) if i < left else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


def choice(kind: str, choices: tuple[str, ...]) -> Any:
    """An argparse type: one of `choices`, named `kind` in errors."""

    def convert(text: str) -> str:
        value = text.strip()
        if value not in choices:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(choices)}; got {text!r}")
        return value

    convert.__name__ = kind
    return convert


class Stages:
    """A long job's progress(stage, done, total): a bar per stage on a terminal, a notice
    when a stage starts otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.report = Progress(enabled)
        self.stage: str | None = None
        self.bar: Any = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != self.stage:
            self.close()
            self.stage = stage
            if not self.report.tty:
                self.report.say(stage if not total else f"{stage} ({total:,})")
            self.bar = self.report.bar(stage, total=total or None)
        if done > self.bar.n:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
