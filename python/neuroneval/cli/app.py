"""The command line's top: the parser of every command and the mapping of errors to exit codes
(`neuroneval.cli` documents the commands; its `main` imports this module when it runs)."""

from __future__ import annotations

import argparse
import warnings

from neuroneval import __version__
from neuroneval.errors import NeuronEvalError

from . import causal, circuits, compare, crowd, demo, label, meta, report, sanity, score
from .common import PROG, Command, Parser, check_outputs, one_line, print_error

__all__ = ["main", "parser"]


def main(argv: list[str] | None = None) -> int:
    """Runs the command line on `argv` (default `sys.argv[1:]`) and returns the exit code."""
    args = None
    try:
        try:
            args = parser().parse_args(argv)
        except SystemExit as e:  # bad values and usage errors (2), --help and --version (0)
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        command: Command = args.command
        with warnings.catch_warnings():
            # A library warning (threads capped at the CPU count, ...) is one line too.
            warnings.showwarning = lambda message, *_, **__: print_error(f"warning: {one_line(message)}")
            check_outputs(args)
            return command(args)
    except KeyboardInterrupt:
        resumes = getattr(args, "resumes", False)
        print_error("interrupted; run the same command again to resume" if resumes else "interrupted")
        return 130
    except ValueError as e:  # bad input, the library's `InvalidInputError`s among them
        print_error(f"error: {one_line(e)}")
        return 2
    except OSError as e:  # a full disk, a permission denied: `OutputWriteError` among them
        print_error(f"error: {one_line(e)}")
        return 1
    except NeuronEvalError as e:
        print_error(f"error: {one_line(e)}")
        return 2


def parser() -> argparse.ArgumentParser:
    """The whole command line: one subcommand per module."""
    top = Parser(
        prog=PROG,
        description="Exact, fast NeuronEval metrics: is this explanation of a neuron any good?",
    )
    top.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = top.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for command in (score, sanity, meta, crowd, label, compare, circuits, causal, report, demo):
        command.add(commands)
    return top
