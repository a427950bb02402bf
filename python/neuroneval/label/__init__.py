"""From explanation texts to concept labels: judges that say how likely an explanation applies to
each input, cached so that every judgement is paid for once.

Every metric takes a concept vector c(x) = P(explanation applies to input x). A *judge* makes it
from the explanation's text:

- embedding judges (`minilm`, `e5`): the cosine similarity of the input and "This text is about
  {explanation}." through a calibrated sigmoid;
- LLM judges: the probability of "Yes" against "No" as the next token after a prompt showing
  the explanation and the input, from a model run in this process (`smollm2`,
  `LocalLLMJudge`) or from any OpenAI-compatible endpoint (`EndpointJudge`); `JudgeServer`
  serves a local judge model as such an endpoint;
- an image judge (`ClipJudge`): a CLIP checkpoint's image-text similarity.

`label` judges every (input, explanation) through a `LabelCache` (SQLite): a rerun makes no model
call and an interrupted run resumes. `calibrate` fits the sigmoid on labelled data; `Labels.table`
is the long (input, concept, probability) table `neuroneval.score` reads.

Examples
--------
>>> from neuroneval import label
>>> judge = label.minilm()  # doctest: +SKIP
>>> texts = ["The striker scored twice in the final.", "Shares fell on Wall Street."]
>>> labels = label.label(judge, texts, ["sports"])  # doctest: +SKIP
>>> bool(labels.probabilities[0, 0] > labels.probabilities[1, 0])  # doctest: +SKIP
True
"""

from __future__ import annotations

from .cache import LabelCache, default_cache_path
from .calibration import calibrate
from .clip import ClipJudge
from .embedding import E5Judge, EmbeddingJudge, MiniLMJudge, e5, minilm
from .endpoint import ENDPOINT_OPTIONS, EndpointJudge
from .judge import (
    CALIBRATION_OPTIONS,
    LOCAL_JUDGE_OPTIONS,
    Calibration,
    Judge,
    Judgement,
    expected_calibration_error,
    fit_calibration,
)
from .llm import LLM_OPTIONS, LocalLLMJudge, messages, smollm2, smollm2_path, yes_no_score
from .names import JUDGE_OPTIONS, judge_names, make_judge
from .run import LABEL_OPTIONS, Labels, LabelStats, explanations_table, label, read_explanations, read_inputs
from .server import SERVER_OPTIONS, JudgeServer
from .study import STUDY_OPTIONS, JudgedStudy, judged_correlations

__all__ = [
    "CALIBRATION_OPTIONS",
    "ENDPOINT_OPTIONS",
    "JUDGE_OPTIONS",
    "LABEL_OPTIONS",
    "LLM_OPTIONS",
    "LOCAL_JUDGE_OPTIONS",
    "SERVER_OPTIONS",
    "STUDY_OPTIONS",
    "Calibration",
    "ClipJudge",
    "E5Judge",
    "EmbeddingJudge",
    "EndpointJudge",
    "Judge",
    "JudgeServer",
    "JudgedStudy",
    "Judgement",
    "LabelCache",
    "LabelStats",
    "Labels",
    "LocalLLMJudge",
    "MiniLMJudge",
    "calibrate",
    "default_cache_path",
    "e5",
    "expected_calibration_error",
    "explanations_table",
    "fit_calibration",
    "judge_names",
    "judged_correlations",
    "label",
    "make_judge",
    "messages",
    "minilm",
    "read_explanations",
    "read_inputs",
    "smollm2",
    "smollm2_path",
    "yes_no_score",
]
