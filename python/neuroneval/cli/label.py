"""`neuroneval label`, `calibrate`, `judge-server` and `crowd judge`: explanation texts turned into
concept labels by judges (`neuroneval.label`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from neuroneval import label as judges
from neuroneval.errors import ParameterError, SourceError
from neuroneval.files import read_json, write_atomic
from neuroneval.indices import read_pairs
from neuroneval.label import JUDGE_OPTIONS, LABEL_OPTIONS, LLM_OPTIONS, SERVER_OPTIONS, STUDY_OPTIONS
from neuroneval.options import Option, Options
from neuroneval.sources import open_activations

from .common import count, output_file, positive_int, write_table

_JUDGES = ", ".join(judges.judge_names())
_JUDGE_HELP = f"the judge: {_JUDGES}"

#: The options of the commands themselves: the name `judge-server` serves its model under and
#: the environment variable of the key it requires (the library takes the key), and the cheap
#: judge of `crowd judge` (the library takes a judge, not its name).
COMMAND_OPTIONS = Options(
    Option("model_name", "text", "smollm2", "the model's name at the endpoint", flag="--name", metavar="NAME"),
    Option(
        "api_key_env",
        "text",
        None,
        "require the key held in this environment variable; none requires no key",
        optional=True,
        metavar="NAME",
    ),
    Option(
        "cheap",
        "text",
        "minilm",
        f"the cheap judge, which labels every input to guide the draws; one of {_JUDGES}",
        metavar="JUDGE",
    ),
)
#: The options of how inputs are judged that the judging commands take (`LABEL_OPTIONS`).
_JUDGING = ("column", "batch_size")
#: The options of the model `judge-server` serves (its batches are the server's: one request at a time).
_MODEL = LLM_OPTIONS.only("device", "dtype")


def add(commands: Any) -> None:
    _add_label(commands)
    _add_calibrate(commands)
    _add_server(commands)


def _add_judge_options(
    p: argparse.ArgumentParser,
    *,
    option: str = "--judge",
    default: str | None = None,
    judge_help: str = _JUDGE_HELP,
    calibration: bool = True,
) -> None:
    """The judge and its options; `default` makes the judge optional (`compare` labels only with one)."""
    p.add_argument(option, required=default is None, default=default, metavar="JUDGE", help=judge_help)
    JUDGE_OPTIONS.add_arguments(p)
    p.add_argument("--checkpoint", metavar="FILE", help="a clip:ARCHITECTURE judge's weights")
    if calibration:
        p.add_argument("--calibration", metavar="FILE", help="a calibration (.json, from `neuroneval calibrate`)")


def add_judging_options(p: argparse.ArgumentParser, *, when: str = "") -> None:
    """The options of how inputs are judged and kept (`label`'s, and `compare`'s `when` its --judge
    is given): the inputs table's column, the cache, the batch size."""
    column, batch_size = (dataclasses.replace(LABEL_OPTIONS[n], help=when + LABEL_OPTIONS[n].help) for n in _JUDGING)
    column.add_argument(p)
    p.add_argument(
        "--cache",
        metavar="FILE",
        help=f"{when}the judgement cache, a SQLite file (default $NEURONEVAL_CACHE or {judges.default_cache_path()})",
    )
    p.add_argument("--no-cache", action="store_true", help=f"{when}judge every pair, store nothing")
    batch_size.add_argument(p)


def judging_options(args: argparse.Namespace) -> dict[str, Any]:
    """--column and --batch-size (`LABEL_OPTIONS`), checked before any input is read."""
    options = LABEL_OPTIONS.only(*_JUDGING)
    return options.resolve(**options.from_args(args))


def _add_io(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "inputs",
        metavar="INPUTS",
        help="the inputs: .txt (one text per line), .csv/.parquet/.jsonl (a `text` column) or .npy images (N, H, W, 3)",
    )
    p.add_argument(
        "explanations",
        metavar="EXPLANATIONS",
        help="the explanations: .csv/.parquet/.jsonl with an `explanation` column (named by `concept` or `unit`), "
        "or .txt (one per line)",
    )
    add_judging_options(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def _add_label(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "label",
        help="turn explanation texts into concept labels with a judge",
        description=(
            "Judge whether each explanation applies to each input, and write the long (input, concept, "
            "probability) table that `neuroneval score` reads as CONCEPTS. Every judgement goes through a "
            "cache: a rerun makes no model call, and an interrupted run resumes where it stopped."
        ),
    )
    _add_io(p)
    _add_judge_options(p)
    p.add_argument("--out", required=True, type=output_file(".parquet", ".csv"), metavar="FILE", help="the table")
    p.set_defaults(command=run_label, resumes=True)


def _add_calibrate(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "calibrate",
        help="fit a judge's sigmoid on labelled data",
        description=(
            "Fit the sigmoid p = 1 / (1 + exp(-a (score - b))) from a judge's raw scores to probabilities on "
            "labelled (input, explanation) pairs, and write it as JSON for `neuroneval label --calibration`."
        ),
    )
    _add_io(p)
    p.add_argument(
        "labels",
        metavar="LABELS",
        help="0/1 labels: an (N, T) .npy, or a table of input, concept, label (absent pairs are 0)",
    )
    _add_judge_options(p, calibration=False)  # it fits the calibration: it takes none
    p.add_argument("--out", required=True, type=output_file(".json"), metavar="FILE", help="the calibration")
    p.set_defaults(command=run_calibrate, resumes=True)


def _add_server(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "judge-server",
        help="serve a local LLM judge as an OpenAI-compatible endpoint",
        description=(
            "Serve SmolLM2 (or a GGUF file / transformers directory given with --model) over HTTP as an "
            "OpenAI-compatible chat-completions endpoint that returns next-token log-probabilities, for "
            "`neuroneval label --judge openai:NAME --base-url http://HOST:PORT/v1` (and, with --max-tokens above "
            "1, greedy answers of up to that many tokens, for an explainer such as the SAE study's --endpoint). It runs on uvicorn and "
            "starlette; the model judges one request at a time, and every request is bounded by the caps and "
            "timeouts below."
        ),
    )
    p.add_argument("--model", metavar="PATH", help="a GGUF file or model directory (default: SmolLM2-135M-Instruct)")
    COMMAND_OPTIONS.only("model_name", "api_key_env").add_arguments(p)
    _MODEL.add_arguments(p)
    SERVER_OPTIONS.add_arguments(p)
    p.set_defaults(command=run_server)


def add_crowd_judge(steps: Any) -> None:
    """`crowd judge`, registered by `neuroneval.cli.crowd`."""
    p: argparse.ArgumentParser = steps.add_parser(
        "judge",
        help="estimate correlations with an expensive judge's labels from a few of them (MG-IS)",
        description=(
            "The crowd study with judges as raters: the cheap judge (--cheap) labels every input, its "
            "probabilities are the concept model of an MG-IS plan, the expensive judge (--judge) labels only the "
            "drawn inputs, and each (unit, explanation) pair's correlation with the expensive judge's labels is "
            "estimated with an interval. --verify also judges every input with the expensive judge and reports "
            "coverage. The cost of each judge, and of --verify, is printed after the run."
        ),
    )
    p.add_argument("activations", metavar="ACTIVATIONS", help="inputs x units, as ACTIVATIONS of `score`")
    _add_io(p)
    p.add_argument("--pairs", required=True, metavar="FILE", help="(unit, explanation) index pairs: a CSV unit,concept")
    COMMAND_OPTIONS["cheap"].add_argument(p)
    _add_judge_options(
        p,
        judge_help=f"the expensive judge, which labels only the drawn inputs (the one whose labels are estimated; "
        f"--calibration applies to it): {_JUDGES}",
    )
    p.add_argument(
        "--budget", type=positive_int, required=True, metavar="N", help="expensive judgements drawn per pair"
    )
    STUDY_OPTIONS.only("seed", "verify").add_arguments(p)
    p.add_argument("--out", required=True, type=output_file(".csv", ".parquet"), metavar="FILE", help="the estimates")
    p.set_defaults(command=run_crowd_judge, resumes=True)


# --------------------------------------------------------------------------- running


def _judge(args: argparse.Namespace, spec: str | None = None) -> judges.Judge:
    """The judge of --judge (with --calibration), or the one `spec` names (uncalibrated)."""
    calibration = None
    if spec is None and getattr(args, "calibration", None):
        value = read_json(args.calibration)
        try:
            calibration = judges.Calibration.from_dict(value)
        except ValueError as e:
            raise SourceError(f"{args.calibration} is not a calibration: {e}") from None
    return judges.make_judge(
        spec or args.judge, **JUDGE_OPTIONS.from_args(args), checkpoint=args.checkpoint, calibration=calibration
    )


def _cache(args: argparse.Namespace) -> str | os.PathLike[str] | None:
    if args.no_cache:
        return None
    return args.cache or judges.default_cache_path()


def run_label(args: argparse.Namespace) -> int:
    options = judging_options(args)
    judge = _judge(args)
    inputs = judges.read_inputs(args.inputs, column=options["column"])
    explanations = judges.read_explanations(args.explanations)
    result = judges.label(
        judge, inputs, explanations, cache=_cache(args), batch_size=options["batch_size"], progress=not args.quiet
    )
    write_table(result.table(), args.out)
    if not args.quiet:
        print(f"{judge.name}: {result.stats.summary()}; wrote {args.out}", flush=True)
    return 0


def _label_matrix(path: str, n: int, concepts: list[str]) -> np.ndarray:
    from neuroneval.sources import read_concept_table

    p = Path(path)
    if p.suffix == ".npy":
        try:
            y = np.load(p, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise SourceError(f"cannot read the labels {p}: {e}") from e
    else:
        y = read_concept_table(p, n_inputs=n, concept_names=concepts).dense()
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (n, len(concepts)):
        raise ParameterError(f"the labels {p} have shape {y.shape}; expected ({n}, {len(concepts)})")
    return y


def run_calibrate(args: argparse.Namespace) -> int:
    options = judging_options(args)
    judge = _judge(args)
    inputs = judges.read_inputs(args.inputs, column=options["column"])
    explanations = judges.read_explanations(args.explanations)
    y = _label_matrix(args.labels, len(inputs), explanations["concept"].to_list())
    fitted = judges.calibrate(judge, inputs, explanations, y, cache=_cache(args), batch_size=options["batch_size"])
    c = fitted.calibration
    assert c is not None
    write_atomic(args.out, lambda tmp: tmp.write_text(json.dumps(c.to_dict(), indent=2) + "\n"))
    if not args.quiet:
        print(f"{judge.name}: a = {c.a:.4g}, b = {c.b:.4g} from {count(y.size, 'labelled pair')}; wrote {args.out}")
    return 0


def run_server(args: argparse.Namespace) -> int:
    # every option checked before the model is found or the port taken
    own = COMMAND_OPTIONS.only("model_name", "api_key_env")
    command = own.resolve(**own.from_args(args))
    model = _MODEL.resolve(**_MODEL.from_args(args))
    serving = SERVER_OPTIONS.resolve(**SERVER_OPTIONS.from_args(args))
    name, key_env = command["model_name"], command["api_key_env"]
    api_key = None
    if key_env:
        api_key = os.environ.get(key_env)
        if not api_key:
            raise ParameterError(f"--api-key-env {key_env}: that environment variable is not set")
    path = Path(args.model) if args.model else judges.smollm2_path()
    judge = judges.LocalLLMJudge(path, name=name, **model)
    server = judges.JudgeServer(judge, model_name=name, api_key=api_key, **serving)
    print(f"serving {name} ({path.name}) at {server.url}", flush=True)
    server.serve_forever()
    return 0


def run_crowd_judge(args: argparse.Namespace) -> int:
    options = judging_options(args)
    drawn = STUDY_OPTIONS.only("seed", "verify").resolve(seed=args.seed, verify=args.verify)
    cheap_name = COMMAND_OPTIONS.only("cheap").resolve(cheap=args.cheap)["cheap"]
    expensive = _judge(args)
    cheap = _judge(args, cheap_name) if cheap_name != args.judge else expensive
    inputs = judges.read_inputs(args.inputs, column=options["column"])
    explanations = judges.read_explanations(args.explanations)
    acts = open_activations(args.activations).dense()
    pairs = read_pairs(args.pairs, n_units=acts.shape[1], n_concepts=explanations.height)
    study = judges.judged_correlations(
        acts,
        pairs,
        inputs,
        explanations,
        cheap=cheap,
        expensive=expensive,
        budget=args.budget,
        seed=drawn["seed"],
        cache=_cache(args),
        verify=drawn["verify"],
        batch_size=options["batch_size"],
        progress=not args.quiet,
    )
    write_table(study.table, args.out)
    if not args.quiet:
        print(_crowd_summary(study, cheap.name, expensive.name), flush=True)
        if drawn["verify"]:
            print(f"intervals holding the all-input correlation: {study.coverage():.0%}", flush=True)
        print(f"wrote {args.out}", flush=True)
    return 0


def _crowd_summary(study: judges.JudgedStudy, cheap: str, expensive: str) -> str:
    """What `crowd judge` did and cost: the share the expensive judge judged, then each judge's
    (and --verify's) judgements, model calls, cache hits, tokens and cost."""
    lines = [
        f"{count(study.table.height, 'pair')}: the expensive judge {expensive} judged {study.expensive.pairs:,} of "
        f"{study.n_inputs * study.explanations_used:,} (input, explanation) pairs ({study.expensive_fraction:.1%})",
        f"  expensive judge {expensive}, the estimate: {study.expensive.summary()}",
        f"  cheap judge {cheap}, every input: {study.cheap.summary()}",
    ]
    parts = [study.expensive, study.cheap]
    if study.verification is not None:
        lines.append(f"  expensive judge {expensive}, --verify: {study.verification.summary()}")
        parts.append(study.verification)
    total = sum(s.cost for s in parts)
    if total:
        lines.append(f"  estimated cost in all: {total:.4f}")
    return "\n".join(lines)
