"""`neuroneval report`: one self-contained HTML page of a results directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from neuroneval import report
from neuroneval.errors import ParameterError, SourceError

from .common import count, output_file, positive_int


def add(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "report",
        help="write one self-contained HTML page of a results directory",
        description=(
            "Write one HTML page that needs no network of a results directory (scores.parquet, and when "
            "present sanity/, crowd/, comparison.json, circuit runs, causal runs, top_inputs.parquet, inputs/, report.json; "
            "see neuroneval.report): per layer, histograms of the trustworthy metrics and a table of units with "
            "their best explanation, its scores and their top-activating inputs; the sanity checks, the crowd "
            "simulation, a comparison of explainers (neuroneval compare --out) and circuit runs' CPR/CMD table "
            "and faithfulness curves (neuroneval circuits run --out), and causal runs' IIA table and IIA per layer "
            "(neuroneval causal run --out)."
        ),
    )
    p.add_argument(
        "results",
        metavar="RESULTS_DIR",
        help="the results directory (holding scores.parquet, comparison.json, circuit runs or causal runs)",
    )
    p.add_argument(
        "-o",
        "--out",
        type=output_file(".html", ".htm"),
        metavar="FILE",
        help="the page to write, a .html file (default: RESULTS_DIR/report.html)",
    )
    p.add_argument(
        "--max-units",
        type=positive_int,
        default=report.MAX_UNITS,
        metavar="N",
        help=f"units listed per layer; a larger layer lists its N best-explained (default {report.MAX_UNITS})",
    )
    p.add_argument(
        "--inputs-per-unit",
        type=positive_int,
        default=report.INPUTS_PER_UNIT,
        metavar="N",
        help=f"top-activating inputs shown per unit (default {report.INPUTS_PER_UNIT})",
    )
    p.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    results = Path(args.results)
    if not results.exists():
        raise SourceError(f"results directory {results} does not exist")
    if not results.is_dir():
        raise ParameterError(f"RESULTS_DIR {results} is a file; expected a directory holding {report.SCORES}")
    out: Path = results / "report.html" if args.out is None else args.out
    written = report.write_report(results, out, max_units=args.max_units, inputs_per_unit=args.inputs_per_unit)
    print(f"wrote {written} ({size(written.stat().st_size)})", flush=True)
    return 0


def size(n: int) -> str:
    """ "812 bytes", "1.4 MB".

    Examples
    --------
    >>> size(812), size(1_400_000)
    ('812 bytes', '1.4 MB')
    """
    if n < 1000:
        return count(n, "byte")
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"
