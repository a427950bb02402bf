"""`neuroneval demo`: the digits CNN (or, with --text, MiniLM) experiment end to end.

The experiments are imported only when the command runs: nothing else in the tools imports them.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from neuroneval.options import SCORE_OPTIONS

from .common import Needs, output_dir


def add(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "demo",
        help="the whole story on a model shipped in installed wheels (digits CNN, or MiniLM with --text)",
        description=(
            "Train a small CNN on scikit-learn's digits, score its units with every metric, run the sanity "
            "checks and a crowd simulation, and write a report (make demo). With --text: MiniLM's FFN neurons "
            "over gensim's Lee news corpus with lexicon concepts (needs the text extra). With --label: judges "
            "that turn explanation texts into concept labels, their quality against lexicon labels, and the "
            "crowd study with an LLM judge as the rater (needs the label extra). With --sae: SAE latents against "
            "MiniLM's FFN neurons on Wikipedia sentences, three explainers ranked with intervals (the label extra); "
            "with --sae --model smollm2: the same question on SmolLM2-135M-Instruct's MLP neurons, per token."
        ),
        rules=(
            Needs(("--model",), ("--sae",), "--model is the SAE study's model: it goes with --sae"),
            Needs(
                ("--endpoint", "--endpoint-model"),
                (("--model", "smollm2"),),
                "{given}: an endpoint explains in the SmolLM2 study: it goes with --sae --model smollm2",
            ),
            Needs(("--endpoint",), ("--endpoint-model",), "--endpoint needs --endpoint-model, the model's name there"),
            Needs(("--endpoint-model",), ("--endpoint",), "--endpoint-model needs --endpoint, where the model is"),
        ),  # fmt: skip
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--text", action="store_true", help="the MiniLM text demo instead of the digits CNN")
    mode.add_argument(
        "--label",
        action="store_true",
        help="the judges demo: explanation texts turned into labels by MiniLM, e5 and SmolLM2 (needs the label extra)",
    )
    mode.add_argument(
        "--sae",
        action="store_true",
        help="the SAE study: a TopK SAE trained on MiniLM, its latents against the FFN neurons, explainers compared",
    )
    p.add_argument(
        "--model",
        choices=("minilm", "smollm2"),
        default=None,
        help="with --sae: the model of the study: MiniLM per sentence (default), or SmolLM2-135M-Instruct per token",
    )
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help="with --sae --model smollm2: an OpenAI-compatible endpoint (http://HOST:PORT/v1) whose model explains "
        "too; its key is $OPENAI_API_KEY",
    )
    p.add_argument("--endpoint-model", metavar="NAME", help="the model to ask at --endpoint")
    p.add_argument(
        "--out",
        metavar="DIR",
        type=output_dir,
        help="output directory (default: demo-out; demo-text-out, demo-label-out, demo-sae-out with --text, --label, --sae)",
    )
    replace(SCORE_OPTIONS["seed"], help="seed of everything").add_argument(p)
    p.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    argv = ["--seed", str(SCORE_OPTIONS.resolve(seed=args.seed)["seed"])]
    if args.out is not None:
        argv += ["--out", str(args.out)]
    if args.sae and args.model == "smollm2":
        from neuroneval.experiments import sae_study_smollm2

        if args.endpoint is not None:
            argv += ["--endpoint", args.endpoint, "--endpoint-model", args.endpoint_model]
        return sae_study_smollm2.main(argv)
    if args.sae:
        from neuroneval.experiments import sae_study

        return sae_study.main(argv)
    if args.label:
        from neuroneval.experiments import labels

        return labels.main(argv)
    if args.text:
        from neuroneval.experiments import text_demo

        return text_demo.main(argv)
    from neuroneval.experiments import digits

    return digits.main(argv)
