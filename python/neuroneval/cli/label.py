"""`neuroneval label`, `calibrate`, `judge-server` and `crowd judge`: explanation texts turned into
concept labels by judges (`neuroneval.label`)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from neuroneval import label as judges
from neuroneval.errors import ParameterError, SourceError
from neuroneval.files import write_atomic
from neuroneval.indices import read_pairs
from neuroneval.sources import open_activations

from .common import count, output_file, positive_int, write_table

_JUDGE_HELP = "the judge: " + ", ".join(judges.judge_names())


def add(commands: Any) -> None:
    _add_label(commands)
    _add_calibrate(commands)
    _add_server(commands)


def _add_judge_options(p: argparse.ArgumentParser, *, option: str = "--judge", default: str | None = None) -> None:
    p.add_argument(option, required=default is None, default=default, metavar="JUDGE", help=_JUDGE_HELP)
    p.add_argument("--base-url", metavar="URL", help="an openai:MODEL judge's endpoint (default $OPENAI_BASE_URL)")
    p.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="the environment variable holding the endpoint's API key (default OPENAI_API_KEY)",
    )
    p.add_argument("--concurrency", type=positive_int, default=8, metavar="N", help="requests in flight (default 8)")
    p.add_argument(
        "--price",
        type=float,
        default=0.0,
        metavar="PER_MILLION",
        help="the endpoint's price per million tokens, for the cost estimate (default 0)",
    )
    p.add_argument("--checkpoint", metavar="FILE", help="a clip:ARCHITECTURE judge's weights")
    p.add_argument("--device", default="cpu", help="where local models run (default cpu)")
    p.add_argument("--calibration", metavar="FILE", help="a calibration (.json, from `neuroneval calibrate`)")


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
    p.add_argument("--column", default="text", help="the inputs table's text column (default text)")
    p.add_argument(
        "--cache",
        metavar="FILE",
        help=f"the judgement cache, a SQLite file (default $NEURONEVAL_CACHE or {judges.default_cache_path()})",
    )
    p.add_argument("--no-cache", action="store_true", help="judge every pair, store nothing")
    p.add_argument(
        "--batch-size", type=positive_int, default=32, metavar="N", help="inputs per model call (default 32)"
    )
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
    _add_judge_options(p)
    p.add_argument("--out", required=True, type=output_file(".json"), metavar="FILE", help="the calibration")
    p.set_defaults(command=run_calibrate, resumes=True)


def _add_server(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "judge-server",
        help="serve a local LLM judge as an OpenAI-compatible endpoint",
        description=(
            "Serve SmolLM2 (or a GGUF file / transformers directory given with --model) over HTTP as an "
            "OpenAI-compatible chat-completions endpoint that returns next-token log-probabilities, for "
            "`neuroneval label --judge openai:NAME --base-url http://HOST:PORT/v1`."
        ),
    )
    p.add_argument("--model", metavar="PATH", help="a GGUF file or model directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--name", default="smollm2", help="the model's name at the endpoint (default smollm2)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="the port (default 8000; 0 picks a free one)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--max-waiting", type=int, metavar="N", help="answer 429 when N requests already wait")
    p.add_argument("--api-key-env", metavar="NAME", help="require the key in this environment variable")
    p.set_defaults(command=run_server)


def add_crowd_judge(steps: Any) -> None:
    """`crowd judge`, registered by `neuroneval.cli.crowd`."""
    p: argparse.ArgumentParser = steps.add_parser(
        "judge",
        help="estimate correlations with an expensive judge's labels from a few of them (MG-IS)",
        description=(
            "The crowd study with judges as raters: a cheap judge labels every input, its probabilities are "
            "the concept model of an MG-IS plan, an expensive judge labels only the drawn inputs, and each "
            "(unit, explanation) pair's correlation with the expensive judge's labels is estimated with an "
            "interval. --verify also judges every input with the expensive judge and reports coverage."
        ),
    )
    p.add_argument("activations", metavar="ACTIVATIONS", help="inputs x units, as ACTIVATIONS of `score`")
    _add_io(p)
    p.add_argument("--pairs", required=True, metavar="FILE", help="(unit, explanation) index pairs: a CSV unit,concept")
    p.add_argument("--cheap", default="minilm", metavar="JUDGE", help="the cheap judge (default minilm)")
    _add_judge_options(p)
    p.add_argument("--budget", type=positive_int, required=True, metavar="N", help="expensive judgements per pair")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verify", action="store_true", help="also judge every input and report coverage")
    p.add_argument("--out", required=True, type=output_file(".csv", ".parquet"), metavar="FILE", help="the estimates")
    p.set_defaults(command=run_crowd_judge, resumes=True)


# --------------------------------------------------------------------------- running


def _judge(args: argparse.Namespace, spec: str | None = None) -> judges.Judge:
    """The judge of --judge (with --calibration), or the one `spec` names (uncalibrated)."""
    calibration = None
    if spec is None and getattr(args, "calibration", None):
        path = Path(args.calibration)
        try:
            calibration = judges.Calibration.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as e:
            raise SourceError(f"cannot read the calibration {path}: {e}") from e
    return judges.make_judge(
        spec or args.judge,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        concurrency=args.concurrency,
        price_per_million_tokens=args.price,
        checkpoint=args.checkpoint,
        device=args.device,
        calibration=calibration,
    )


def _cache(args: argparse.Namespace) -> str | os.PathLike[str] | None:
    if args.no_cache:
        return None
    return args.cache or judges.default_cache_path()


def run_label(args: argparse.Namespace) -> int:
    judge = _judge(args)
    inputs = judges.read_inputs(args.inputs, column=args.column)
    explanations = judges.read_explanations(args.explanations)
    result = judges.label(
        judge, inputs, explanations, cache=_cache(args), batch_size=args.batch_size, progress=not args.quiet
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
    judge = _judge(args)
    inputs = judges.read_inputs(args.inputs, column=args.column)
    explanations = judges.read_explanations(args.explanations)
    y = _label_matrix(args.labels, len(inputs), explanations["concept"].to_list())
    fitted = judges.calibrate(judge, inputs, explanations, y, cache=_cache(args), batch_size=args.batch_size)
    c = fitted.calibration
    assert c is not None
    write_atomic(args.out, lambda tmp: tmp.write_text(json.dumps(c.to_dict(), indent=2) + "\n"))
    if not args.quiet:
        print(f"{judge.name}: a = {c.a:.4g}, b = {c.b:.4g} from {count(y.size, 'labelled pair')}; wrote {args.out}")
    return 0


def run_server(args: argparse.Namespace) -> int:
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ParameterError(f"--api-key-env {args.api_key_env}: that environment variable is not set")
    path = Path(args.model) if args.model else judges.smollm2_path()
    judge = judges.LocalLLMJudge(path, name=args.name, device=args.device, dtype=args.dtype)
    server = judges.JudgeServer(
        judge, host=args.host, port=args.port, model_name=args.name, max_waiting=args.max_waiting, api_key=api_key
    )
    print(f"serving {args.name} ({path.name}) at {server.url}", flush=True)
    server.serve_forever()
    return 0


def run_crowd_judge(args: argparse.Namespace) -> int:
    expensive = _judge(args)
    cheap = _judge(args, args.cheap) if args.cheap != args.judge else expensive
    inputs = judges.read_inputs(args.inputs, column=args.column)
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
        seed=args.seed,
        cache=_cache(args),
        verify=args.verify,
        batch_size=args.batch_size,
        progress=not args.quiet,
    )
    write_table(study.table, args.out)
    if not args.quiet:
        print(
            f"{count(study.table.height, 'pair')}: {expensive.name} judged {study.expensive.pairs:,} of "
            f"{study.n_inputs * study.explanations_used:,} (input, explanation) pairs "
            f"({study.expensive_fraction:.1%}); {study.expensive.summary()}",
            flush=True,
        )
        if args.verify:
            print(f"intervals holding the all-input correlation: {study.coverage():.0%}", flush=True)
        print(f"wrote {args.out}", flush=True)
    return 0
