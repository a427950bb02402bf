"""`neuroneval causal`: MIB's causal-variable track (SPEC section 7). `run` measures how well each
featurizer localizes a task's causal variables (IIA per layer and position, trained featurizers
fitted on a training split, IIA on held-out pairs) and writes the run; `table` prints IIA per
featurizer and variable across runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from neuroneval.causal.results import (
    CAUSAL_FEATURIZERS,
    CAUSAL_MODEL_OPTIONS,
    CAUSAL_MODELS,
    CAUSAL_OPTIONS,
    CAUSAL_RUN_FILE,
    CAUSAL_SAE_OPTIONS,
    CausalRun,
    causal_table,
    format_causal_table,
    read_causal_run,
    write_causal_run,
)
from neuroneval.errors import ParameterError, SourceError
from neuroneval.files import check_writable

from .common import Stages, choice, output_dir

TASKS = tuple(dict.fromkeys(t for tasks in CAUSAL_MODELS.values() for t in tasks))
FORMATS = ("text", "csv", "json")
#: `--featurizers all`: every featurizer but the SAE's when no SAE is trained or given.
ALL = CAUSAL_FEATURIZERS
SAES_DIR = "saes"


def featurizer_list(text: str) -> list[str]:
    """--featurizers: ``all`` or comma-separated featurizer names, each known, in order without repeats."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    if names == ["all"]:
        return list(ALL)
    unknown = [m for m in names if m not in CAUSAL_FEATURIZERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"names the unknown featurizer {unknown[0]!r}; choose 'all' or some of {', '.join(CAUSAL_FEATURIZERS)}"
            if unknown
            else f"is empty; give 'all' or some of {', '.join(CAUSAL_FEATURIZERS)}"
        )
    return list(dict.fromkeys(names))


def layer_list(text: str) -> list[int] | None:
    """--layers: ``all``, comma-separated layers, or ranges ``a-b`` (inclusive) and ``a-b:step``."""
    if text.strip() == "all":
        return None
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            if "-" in part:
                span, _, step = part.partition(":")
                lo, hi = (int(v) for v in span.split("-"))
                out += list(range(lo, hi + 1, int(step) if step else 1))
            else:
                out.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"cannot read {part!r}: give 'all', layers such as 0,5 or ranges such as 0-29:3"
            ) from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"must name layers 0 and up; got {text!r}")
    return sorted(set(out))


def add(commands: Any) -> None:
    top: argparse.ArgumentParser = commands.add_parser(
        "causal",
        help="MIB's causal-variable track: IIA of featurizers (full vector, neurons, PCA, SAE, DAS, DBM) on a task's variables",
        description=(
            "MIB's causal-variable localization track (SPEC section 7; docs/causal.md). `run` intervenes on the "
            "residual stream of a model (or, with --site, on its MLP's input or hidden units) at each layer and "
            "token position, swapping a featurizer's selected "
            "features from a counterfactual source, and measures interchange intervention accuracy (IIA) on "
            "held-out pairs; `table` prints IIA per featurizer and variable from run directories."
        ),
    )
    steps = top.add_subparsers(title="steps", metavar="STEP", required=True)
    p: argparse.ArgumentParser = steps.add_parser(
        "run",
        help="IIA of each featurizer on each variable of a task, written to a run directory",
        description=(
            "Draw the task's counterfactual datasets, keep the pairs the model gets right (base and source), fit "
            "or train each featurizer on --n-train of them per dataset and report IIA on the next --n-test, per "
            "layer and token position; average and highest over layers with bootstrap intervals. Writes "
            f"{CAUSAL_RUN_FILE} and hits.npz (and, when it trains SAEs, {SAES_DIR}/layer_<l>/ in SAELens's layout) "
            "into --out and prints the table. Needs PyTorch (the torch extra); smollm2 also needs transformers "
            "and the SmolLM2 weights (the label extra)."
        ),
    )
    p.add_argument("--model", required=True, type=choice("model", tuple(CAUSAL_MODELS)), metavar="MODEL",
                   help="smollm2 (SmolLM2-135M-Instruct) or planted (a 2-layer model trained here with a planted variable)")  # fmt: skip
    p.add_argument("--task", type=choice("task", TASKS), metavar="TASK",
                   help="ioi (default) or arithmetic for smollm2; planted for the planted model")  # fmt: skip
    p.add_argument("--featurizers", type=featurizer_list, default=None, metavar="LIST",
                   help=f"all (default) or comma-separated featurizers: {', '.join(CAUSAL_FEATURIZERS)}")  # fmt: skip
    p.add_argument("--layers", type=layer_list, default=None, metavar="LIST",
                   help="all (default), layers such as 0,5,29, or ranges such as 0-29:3")  # fmt: skip
    p.add_argument("--sae", metavar="DIR", default=None,
                   help="a directory of layer_<l>/ SAELens SAEs for the sae featurizers (default: train one per layer here)")  # fmt: skip
    CAUSAL_OPTIONS.add_arguments(p)
    CAUSAL_SAE_OPTIONS.add_arguments(p)
    CAUSAL_MODEL_OPTIONS.add_arguments(p)
    p.add_argument("--out", required=True, type=output_dir, metavar="DIR", help="the run directory to write")
    p.add_argument("--quiet", action="store_true", help="no progress and no table")
    p.set_defaults(command=run)
    t: argparse.ArgumentParser = steps.add_parser(
        "table",
        help="print IIA per featurizer and variable of causal runs",
        description=f"Read causal runs (directories holding {CAUSAL_RUN_FILE}) and print one row per run, variable and featurizer: average and highest IIA over layers with their intervals.",
    )
    t.add_argument("runs", nargs="+", metavar="DIR", help=f"a run directory ({CAUSAL_RUN_FILE})")
    t.add_argument("--format", type=choice("format", FORMATS), default="text", help="text (default), csv or json")
    t.set_defaults(command=table)


def _causal_track() -> Any:
    """`neuroneval.torch.causal.causal_track`, imported only now: torch is an optional extra."""
    try:
        import torch  # noqa: F401

        from neuroneval.torch.causal import causal_track
    except ModuleNotFoundError as e:
        raise ParameterError(
            f"neuroneval causal run needs the {e.name} package: pip install 'neuroneval[torch]'"
        ) from None
    return causal_track


def run(args: argparse.Namespace) -> int:
    task = args.task or CAUSAL_MODELS[args.model][0]
    if task not in CAUSAL_MODELS[args.model]:
        raise ParameterError(
            f"--task {task} is not a task of --model {args.model}; it runs {', '.join(CAUSAL_MODELS[args.model])}"
        )
    options = CAUSAL_OPTIONS.resolve(**CAUSAL_OPTIONS.from_args(args))
    sae_options = CAUSAL_SAE_OPTIONS.resolve(**CAUSAL_SAE_OPTIONS.from_args(args))
    model_options = CAUSAL_MODEL_OPTIONS.resolve(**CAUSAL_MODEL_OPTIONS.from_args(args))
    if args.sae is not None and not Path(args.sae).is_dir():
        raise SourceError(f"--sae {args.sae} is not a directory of layer_<l>/ SAELens SAEs")
    out = Path(args.out)
    check_writable(out)
    causal_track = _causal_track()
    stages = Stages(not args.quiet)
    try:
        result, saes = causal_track(
            model=args.model, task=task, featurizers=args.featurizers or list(ALL), layers=args.layers,
            sae=args.sae, progress=stages, **options, **sae_options, **model_options,
        )  # fmt: skip
    except ModuleNotFoundError as e:  # a package the model needs, imported as it loads (transformers)
        raise ParameterError(
            f"neuroneval causal run needs the {e.name} package: pip install 'neuroneval[label]'"
        ) from None
    finally:
        stages.close()
    write_causal_run(result, out)
    if saes and args.sae is None:
        from neuroneval.interop import write_saelens

        for layer, sae in saes.items():
            write_saelens(sae, out / SAES_DIR / f"layer_{layer}")
    if not args.quiet:
        print(format_causal_table(causal_table([result])), flush=True)
        print(f"\nwrote {CAUSAL_RUN_FILE} and hits.npz to {out}", flush=True)
    return 0


def _runs(directories: list[str]) -> list[CausalRun]:
    runs = []
    for d in directories:
        path = Path(d)
        if not (path / CAUSAL_RUN_FILE).is_file():
            raise SourceError(
                f"{path} holds no causal run ({CAUSAL_RUN_FILE}); neuroneval causal run --out DIR writes one"
            )
        runs.append(read_causal_run(path))
    return runs


def table(args: argparse.Namespace) -> int:
    rows = causal_table(_runs(args.runs))
    if args.format == "text":
        print(format_causal_table(rows), flush=True)
    elif args.format == "csv":
        head = list(rows[0]) if rows else []
        print(",".join(head))
        for r in rows:
            print(",".join(str(r[k]) for k in head))
    else:
        print(json.dumps(rows, indent=1), flush=True)
    return 0
