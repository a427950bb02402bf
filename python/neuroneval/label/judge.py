"""What every judge shares: its identity, its raw score, and the calibrated sigmoid that maps
that score to a probability.

A judge scores (input, explanation) pairs with a raw real number: a cosine similarity for the
embedding judges, the log-odds of "Yes" against "No" for the LLM judges. Its probability is
``sigmoid(a * (score - b))`` with the judge's `Calibration`; `calibrate` fits a and b on
labelled data. The cache (`neuroneval.label.cache`) stores raw scores, so a new calibration
costs no model call.

Examples
--------
>>> import numpy as np
>>> c = Calibration(a=2.0, b=0.5)
>>> c.probability(np.array([0.5, 1.5])).round(3).tolist()
[0.5, 0.881]
>>> fit = fit_calibration(np.array([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0]), np.array([0, 0, 1, 0, 1, 1]))
>>> round(fit.b, 2)
0.5
"""

from __future__ import annotations

import abc
import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from neuroneval.errors import EmptyInputError, LabelError, ParameterError, ShapeError
from neuroneval.options import Option, Options

__all__ = [
    "CALIBRATION_OPTIONS",
    "LOCAL_JUDGE_OPTIONS",
    "Calibration",
    "Judge",
    "Judgement",
    "expected_calibration_error",
    "fit_calibration",
]

Array = npt.NDArray[np.float64]

#: What the judges run in this process (embedding, LLM, CLIP) share: where their model runs.
LOCAL_JUDGE_OPTIONS = Options(Option("device", "text", "cpu", "where local models run"))
#: The options of fitting (`fit_calibration`) and measuring (`expected_calibration_error`) a calibration.
CALIBRATION_OPTIONS = Options(
    Option("iterations", "integer", 100, "the most steps of the fit by Newton's method", low=1),
    Option("bins", "integer", 10, "equal-width bins of the predicted probability", low=1),
)


@dataclass(frozen=True)
class Calibration:
    """The sigmoid ``p = 1 / (1 + exp(-a (score - b)))`` from a judge's raw score to a probability.

    a > 0 keeps the order of the scores (a higher score is never a lower probability); b is the
    score that maps to 0.5.
    """

    a: float = 1.0
    b: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.a) and self.a > 0):
            raise ParameterError(f"calibration slope a must be positive and finite; got {self.a!r}")
        if not math.isfinite(self.b):
            raise ParameterError(f"calibration offset b must be finite; got {self.b!r}")

    def probability(self, score: npt.ArrayLike) -> Array:
        """The probabilities of raw scores (any shape)."""
        s = np.asarray(score, dtype=np.float64)
        z = self.a * (s - self.b)
        # exp of a negative number only: no overflow for scores far from b.
        e = np.exp(-np.abs(z))
        return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))

    def to_dict(self) -> dict[str, float]:
        return {"a": float(self.a), "b": float(self.b)}

    @classmethod
    def from_dict(cls, value: Any) -> Calibration:
        if not isinstance(value, dict) or set(value) - {"a", "b"} or not {"a", "b"} <= set(value):
            raise ParameterError(f"a calibration is an object with the numbers a and b; got {value!r}")
        try:
            a, b = float(value["a"]), float(value["b"])
        except (TypeError, ValueError) as e:
            raise ParameterError(f"a calibration's a and b must be numbers; got {value!r}") from e
        return cls(a=a, b=b)


@dataclass(frozen=True)
class Judgement:
    """Raw scores of some inputs under one explanation, as a judge returns them.

    `positions` index the inputs the judge was given; `tokens` are the tokens each judgement
    read (prompt and answer; 0 where a judge does not count them).
    """

    positions: npt.NDArray[np.int64]
    scores: Array
    tokens: npt.NDArray[np.int64]


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


class Judge(abc.ABC):
    """A judge of whether an explanation applies to an input.

    Subclasses set the class attributes `name`, `version` (bumped whenever their raw scores
    change for the same model) and `input_kind`, and implement `template` and `judge`.
    Everything else (the cache, calibration, the long table) is `neuroneval.label.label`'s.

    Attributes
    ----------
    calibration : Calibration or None
        The fitted sigmoid (`calibrate`); None is the judge's `default_calibration`.
    """

    name: str = ""
    version: str = "1"
    #: The kind of input it reads: "text" (a str per input) or "image" (an (H, W, 3) array).
    input_kind: str = "text"
    #: Whether the judge learns its model's fingerprint only when it connects (an endpoint):
    #: `label` then keys the cache on the fingerprint last recorded there (`assume_fingerprint`),
    #: so that a run whose judgements are all cached needs no connection.
    learns_fingerprint: bool = False

    def __init__(self, *, calibration: Calibration | None = None) -> None:
        if calibration is not None and not isinstance(calibration, Calibration):
            raise ParameterError(f"calibration must be a Calibration; got {type(calibration).__name__}")
        self.calibration = calibration

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} calibration={self.probability_map}>"

    @property
    @abc.abstractmethod
    def template(self) -> str:
        """How an explanation is shown to the model (part of the judge's identity)."""

    @property
    def default_calibration(self) -> Calibration:
        return Calibration()

    @property
    def model_fingerprint(self) -> str:
        """What identifies the weights (a file's name and size, a checkpoint's digest)."""
        return ""

    @property
    def identity(self) -> str:
        """The judge's identity in the cache: what must match for a stored score to be reused."""
        return json.dumps(
            {"judge": self.name, "version": self.version, "model": self.model_fingerprint, "template": self.template},
            sort_keys=True,
        )

    @property
    def base_identity(self) -> str:
        """The identity without the model's fingerprint: what an endpoint's fingerprint is recorded under."""
        return json.dumps({"judge": self.name, "version": self.version, "template": self.template}, sort_keys=True)

    def assume_fingerprint(self, fingerprint: str) -> None:
        """Take `fingerprint` as the model's until the judge connects (judges that learn theirs only)."""
        return None

    @property
    def fixed_batch(self) -> int | None:
        """How many inputs the judge's model runs at once when its scores depend on the batch (an LLM
        in float32: padding and batch shapes change the sums), else None. `label` then hands it the
        same batches, in input order, whatever its batch size or the cache holds, so that a resumed
        run equals an uninterrupted one bit for bit."""
        return None

    @property
    def probability_map(self) -> Calibration:
        return self.calibration if self.calibration is not None else self.default_calibration

    def key(self, explanation: str, input_digest: str) -> str:
        """The cache key of one judgement."""
        return _digest(self.identity, explanation, input_digest)

    def input_digest(self, value: Any) -> str:
        """What identifies an input's content (its text; a digest of an image's pixels)."""
        if self.input_kind == "text":
            return _digest("text", value)
        array = np.ascontiguousarray(value)
        return _digest("array", str(array.dtype), str(array.shape), hashlib.sha256(array.tobytes()).hexdigest())

    def check_inputs(self, inputs: Sequence[Any]) -> list[Any]:
        """The inputs as a list, or a `ParameterError` naming the first of the wrong kind."""
        if isinstance(inputs, str):
            raise ParameterError(f"inputs must be a sequence of texts for the {self.name} judge, not one string")
        values = list(inputs)
        if not values:
            raise EmptyInputError("no inputs were given")
        if self.input_kind == "text":
            for i, v in enumerate(values):
                if not isinstance(v, str):
                    raise ParameterError(
                        f"input {i} is {type(v).__name__}, but the {self.name} judge reads texts (str)"
                    )
        else:
            for i, v in enumerate(values):
                a = np.asarray(v) if not isinstance(v, str) else None
                if a is None or a.ndim != 3 or a.shape[-1] != 3 or a.dtype.kind not in "uif":
                    what = type(v).__name__ if a is None else f"an array of shape {a.shape} and dtype {a.dtype}"
                    raise ParameterError(
                        f"input {i} is {what}, but the {self.name} judge reads RGB images of shape (H, W, 3)"
                    )
        return values

    @abc.abstractmethod
    def judge(self, explanation: str, inputs: Sequence[Any]) -> Iterator[Judgement]:
        """Raw scores of `inputs` under `explanation`, yielded as they are done (each yield is
        stored at once, so a killed run loses at most the judgements in flight)."""

    def prepare(self) -> None:
        """Fail early: load the model, reach the endpoint (`label` calls it before opening the cache)."""
        return None

    def close(self) -> None:
        """Release what the judge holds between calls (memoised embeddings, connections)."""
        return None

    def with_calibration(self, calibration: Calibration | None) -> Judge:
        """The same judge with another calibration (the model is shared, not reloaded)."""
        import copy

        if calibration is not None and not isinstance(calibration, Calibration):
            raise ParameterError(f"calibration must be a Calibration; got {type(calibration).__name__}")
        clone = copy.copy(self)
        clone.calibration = calibration
        return clone


def fit_calibration(scores: npt.ArrayLike, labels: npt.ArrayLike, *, iterations: int | None = None) -> Calibration:
    """The maximum-likelihood sigmoid of binary `labels` on raw `scores` (logistic regression on one
    feature, by Newton's method with a tiny ridge so that separable data still gives a finite fit;
    at most `iterations` steps, `CALIBRATION_OPTIONS`).

    Raises
    ------
    ShapeError, EmptyInputError, LabelError
        Scores and labels of different lengths, none, or labels that are not all 0/1 or all one class.
    """
    steps = CALIBRATION_OPTIONS.only("iterations").resolve(iterations=iterations)["iterations"]
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    if s.shape != y.shape:
        raise ShapeError(f"scores and labels differ in length: {s.size} and {y.size}")
    if s.size == 0:
        raise EmptyInputError("no labelled judgements to calibrate on")
    if not np.all(np.isfinite(s)):
        raise ParameterError("scores to calibrate on must be finite")
    if not np.all((y == 0) | (y == 1)):
        raise LabelError("calibration labels must be 0 or 1")
    if y.min() == y.max():
        raise LabelError("calibration labels are all one class: a sigmoid cannot be fitted")
    if s.min() == s.max():
        raise LabelError("the judge gave every labelled pair the same score: a sigmoid cannot be fitted")
    mean, scale = float(s.mean()), float(s.std()) or 1.0
    x = (s - mean) / scale
    w = np.zeros(2)  # slope and intercept on the standardised score
    ridge = 1e-6 * s.size
    for _ in range(steps):
        z = w[0] * x + w[1]
        p = Calibration().probability(z)
        g = np.array([np.dot(p - y, x) + ridge * w[0], np.sum(p - y)])
        v = p * (1 - p)
        h = np.array([[np.dot(v, x * x) + ridge, np.dot(v, x)], [np.dot(v, x), np.sum(v) + 1e-12]])
        step = np.linalg.solve(h, g)
        w = w - step
        if np.max(np.abs(step)) < 1e-10:
            break
    if not w[0] > 0:
        raise LabelError(
            "the labels fall as the judge's score rises: the judge ranks them backwards, and no increasing "
            "calibration fits"
        )
    a = w[0] / scale
    b = mean - w[1] * scale / w[0]
    return Calibration(a=float(a), b=float(b))


def expected_calibration_error(
    probabilities: npt.ArrayLike, labels: npt.ArrayLike, *, bins: int | None = None
) -> float:
    """The expected calibration error: over `bins` (`CALIBRATION_OPTIONS`) equal-width bins of the
    predicted probability, the mean |observed frequency - mean prediction|, weighted by the share
    of predictions in the bin.

    Examples
    --------
    >>> expected_calibration_error([0.9, 0.9, 0.1, 0.1], [1, 1, 0, 0])
    0.1
    """
    bins = CALIBRATION_OPTIONS.only("bins").resolve(bins=bins)["bins"]
    p = np.asarray(probabilities, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    if p.shape != y.shape:
        raise ShapeError(f"probabilities and labels differ in length: {p.size} and {y.size}")
    if p.size == 0:
        raise EmptyInputError("no predictions")
    if not np.all((p >= 0) & (p <= 1)):
        raise ParameterError("probabilities must lie in [0, 1]")
    if not np.all((y == 0) | (y == 1)):
        raise LabelError("calibration labels must be 0 or 1")
    which = np.minimum((p * bins).astype(np.int64), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            total += inside.sum() * abs(float(y[inside].mean()) - float(p[inside].mean()))
    return round(float(total) / p.size, 12)


def checked_explanation(explanation: Any, where: str) -> str:
    """An explanation's text, or a `ParameterError` for one that is not text or is empty."""
    if not isinstance(explanation, str):
        raise ParameterError(f"{where} is {type(explanation).__name__}, not a text")
    if not explanation.strip():
        raise ParameterError(f"{where} is empty: a judge cannot tell whether an empty explanation applies")
    return explanation
