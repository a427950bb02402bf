"""`neuroneval label`, `calibrate`, `judge-server` and `crowd judge`: explanation texts turned into
concept labels by judges (`neuroneval.label`)."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from neuroneval import label as judges
from neuroneval.errors import ParameterError, SourceError
from neuroneval.files import read_json, write_atomic
from neuroneval.indices import read_pairs
from neuroneval.label import server as judge_server
from neuroneval.sources import open_activations

from .common import checked, count, non_negative_int, output_file, positive_int, positive_number, write_table

_JUDGES = ", ".join(judges.judge_names())
_JUDGE_HELP = f"the judge: {_JUDGES}"
port_number = checked(int, lambda v: 0 <= v <= 65535, "be a port number in 0..65535")
price = checked(float, lambda v: math.isfinite(v) and v >= 0, "be a non-negative number")


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
        type=price,
        default=0.0,
        metavar="PER_MILLION",
        help="the endpoint's price per million tokens, for the cost estimate (default 0)",
    )
    p.add_argument("--checkpoint", metavar="FILE", help="a clip:ARCHITECTURE judge's weights")
    p.add_argument("--device", default="cpu", help="where local models run (default cpu)")
    if calibration:
        p.add_argument("--calibration", metavar="FILE", help="a calibration (.json, from `neuroneval calibrate`)")


def add_judging_options(p: argparse.ArgumentParser, *, when: str = "") -> None:
    """The options of how inputs are judged and kept (`label`'s, and `compare`'s `when` its --judge
    is given): the inputs table's column, the cache, the batch size."""
    p.add_argument("--column", default="text", help=f"{when}the inputs table's text column (default text)")
    p.add_argument(
        "--cache",
        metavar="FILE",
        help=f"{when}the judgement cache, a SQLite file (default $NEURONEVAL_CACHE or {judges.default_cache_path()})",
    )
    p.add_argument("--no-cache", action="store_true", help=f"{when}judge every pair, store nothing")
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=32,
        metavar="N",
        help=f"{when}inputs handed to the judge at once, each batch stored in the cache as soon as it is judged "
        "(default 32); the LLM judges run their own fixed batches of 16, so their results do not depend on it",
    )


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
            "`neuroneval label --judge openai:NAME --base-url http://HOST:PORT/v1`. It runs on uvicorn and "
            "starlette; the model judges one request at a time, and every request is bounded by the caps and "
            "timeouts below."
        ),
    )
    p.add_argument("--model", metavar="PATH", help="a GGUF file or model directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--name", default="smollm2", help="the model's name at the endpoint (default smollm2)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=port_number,
        default=8000,
        metavar="N",
        help="the port, 0..65535 (default 8000; 0 picks a free one)",
    )
    p.add_argument("--device", default="cpu", help="where the model runs (default cpu)")
    p.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default="float32",
        help="the model's precision (default float32; float64 is slower and batch-independent to 1e-12)",
    )
    p.add_argument(
        "--max-waiting",
        type=non_negative_int,
        metavar="N",
        help="answer 429 (with Retry-After) when N requests already wait for the model (default: no bound)",
    )
    p.add_argument("--api-key-env", metavar="NAME", help="require the key in this environment variable")
    p.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=judge_server.MAX_BODY_BYTES,
        metavar="N",
        help=f"answer 413 to a larger request body (default {judge_server.MAX_BODY_BYTES:,})",
    )
    p.add_argument(
        "--max-prompt-tokens",
        type=positive_int,
        default=judge_server.MAX_PROMPT_TOKENS,
        metavar="N",
        help=f"answer 400 to a longer prompt, counted after the chat template (default {judge_server.MAX_PROMPT_TOKENS:,})",
    )
    p.add_argument(
        "--read-timeout",
        type=positive_number,
        default=judge_server.READ_TIMEOUT,
        metavar="SECONDS",
        help="seconds for a request's head after its first byte, and for its body after the head; a client "
        f"slower than that is answered 408 or disconnected (default {judge_server.READ_TIMEOUT:g})",
    )
    p.add_argument(
        "--idle-timeout",
        type=positive_number,
        default=judge_server.IDLE_TIMEOUT,
        metavar="SECONDS",
        help=f"seconds a connection may stay open with no request in progress (default {judge_server.IDLE_TIMEOUT:g})",
    )
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
    p.add_argument(
        "--cheap",
        default="minilm",
        metavar="JUDGE",
        help=f"the cheap judge, which labels every input to guide the draws (default minilm): {_JUDGES}",
    )
    _add_judge_options(
        p,
        judge_help=f"the expensive judge, which labels only the drawn inputs (the one whose labels are estimated; "
        f"--calibration applies to it): {_JUDGES}",
    )
    p.add_argument(
        "--budget", type=positive_int, required=True, metavar="N", help="expensive judgements drawn per pair"
    )
    p.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="the seed of the draws and the interval (default 0)",
    )
    p.add_argument(
        "--verify", action="store_true", help="also judge every input with the expensive judge and report coverage"
    )
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
        judge,
        host=args.host,
        port=args.port,
        model_name=args.name,
        max_waiting=args.max_waiting,
        api_key=api_key,
        max_body_bytes=args.max_body_bytes,
        max_prompt_tokens=args.max_prompt_tokens,
        read_timeout=args.read_timeout,
        idle_timeout=args.idle_timeout,
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
        print(_crowd_summary(study, cheap.name, expensive.name), flush=True)
        if args.verify:
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
