"""`label`: a judge's concept probabilities for every (input, explanation), through the cache.

Examples
--------
>>> from neuroneval.label import explanations_table
>>> explanations_table(["dogs", "sports news"])["concept"].to_list()
['dogs', 'sports news']
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from neuroneval.errors import EmptyInputError, ParameterError, ShapeError, SourceError
from neuroneval.options import Option, Options
from neuroneval.progress import Progress

from .cache import LabelCache
from .judge import Judge, checked_explanation
from .llm import LLM_OPTIONS

__all__ = ["LABEL_OPTIONS", "LabelStats", "Labels", "explanations_table", "label", "read_explanations", "read_inputs"]

#: How inputs are read (`read_inputs`), handed to a judge (`label`) and kept (`Labels.table`).
LABEL_OPTIONS = Options(
    Option("column", "text", "text", "the inputs table's text column"),
    Option(
        "batch_size",
        "integer",
        32,
        "inputs handed to the judge at once, each batch stored in the cache as soon as it is judged; the LLM "
        f"judges run their own fixed batches of {LLM_OPTIONS['batch_size'].default}, so their results do not "
        "depend on it",
        low=1,
        metavar="N",
    ),
    Option(
        "min_probability",
        "real",
        0.0,
        "the least probability a row of the long table keeps (rows under it read as 0)",
        low=0,
        high=1,
    ),
)


@dataclass
class LabelStats:
    """What a `label` run cost: judgements made (model calls), cache hits, tokens read, and the
    estimated cost in the endpoint's currency (0 for local judges)."""

    pairs: int = 0
    calls: int = 0
    hits: int = 0
    tokens: int = 0
    cost: float = 0.0

    def summary(self) -> str:
        text = f"{self.pairs:,} judgements: {self.calls:,} model calls, {self.hits:,} from the cache"
        if self.tokens:
            text += f", {self.tokens:,} tokens"
        if self.cost:
            text += f", estimated cost {self.cost:.4f}"
        return text


@dataclass
class Labels:
    """A judge's labels of N inputs under T explanations.

    Attributes
    ----------
    scores : numpy.ndarray of float64, shape (N, T)
        The raw scores (cosine similarities, log-odds).
    probabilities : numpy.ndarray of float64, shape (N, T)
        The calibrated probabilities c(x) in [0, 1].
    concepts : list of str
        The T concept names (the explanation table's `concept` column).
    explanations : list of str
        The T explanation texts.
    stats : LabelStats
    """

    scores: npt.NDArray[np.float64]
    probabilities: npt.NDArray[np.float64]
    concepts: list[str]
    explanations: list[str]
    stats: LabelStats = field(default_factory=LabelStats)

    def table(self, *, min_probability: float | None = None) -> pl.DataFrame:
        """The long (input, concept, probability) table that `neuroneval.score` and the CLI read;
        rows under `min_probability` (`LABEL_OPTIONS`) are left out (they read as 0)."""
        least = LABEL_OPTIONS.only("min_probability").resolve(min_probability=min_probability)["min_probability"]
        keep = self.probabilities >= least
        rows, cols = np.nonzero(keep)
        return pl.DataFrame(
            {
                "input": rows.astype(np.int64),
                "concept": pl.Series([self.concepts[c] for c in cols], dtype=pl.String),
                "probability": self.probabilities[rows, cols],
                "score": self.scores[rows, cols],
            }
        )


def explanations_table(explanations: Any) -> pl.DataFrame:
    """Explanations as a (concept, explanation) table.

    A sequence of texts names each concept by its text; a table (polars or anything polars reads
    as one) needs an `explanation` column and takes `concept` (else `unit`, else the text) as
    the name. Names must be distinct.
    """
    if isinstance(explanations, str):
        raise ParameterError("explanations must be a sequence of texts or a table, not one string")
    if isinstance(explanations, pl.DataFrame):
        frame = explanations
    elif isinstance(explanations, dict):
        frame = pl.DataFrame(explanations)
    else:
        texts = list(explanations)
        for i, text in enumerate(texts):
            checked_explanation(text, f"explanation {i}")
        frame = pl.DataFrame({"concept": pl.Series(texts, dtype=pl.String), "explanation": texts})
    if "explanation" not in frame.columns:
        raise SourceError(f"the explanation table needs an 'explanation' column; it has {frame.columns}")
    name = "concept" if "concept" in frame.columns else "unit" if "unit" in frame.columns else "explanation"
    frame = frame.select(pl.col(name).cast(pl.String).alias("concept"), pl.col("explanation"))
    if frame.height == 0:
        raise EmptyInputError("no explanations were given")
    for i, (concept, text) in enumerate(frame.iter_rows()):
        if concept is None:
            raise SourceError(f"explanation row {i} has no concept name")
        checked_explanation(text, f"explanation row {i} ({concept!r})")
    duplicated = frame.filter(pl.col("concept").is_duplicated())["concept"].unique(maintain_order=True).to_list()
    if duplicated:
        raise SourceError(f"the explanation table names a concept more than once: {duplicated[:5]}")
    return frame


_TABLE_READERS = {
    ".parquet": pl.read_parquet,
    ".csv": lambda p: pl.read_csv(p, infer_schema=False),
    ".jsonl": pl.read_ndjson,
    ".ndjson": pl.read_ndjson,
}


def _text_lines(p: Path) -> list[str]:
    """A text file's lines, trailing blank lines (a final newline) dropped; a blank line before
    them is a `SourceError` naming the file and the line (a judge cannot judge an empty text)."""
    lines = p.read_text(encoding="utf-8").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    blank = next((i for i, line in enumerate(lines) if not line.strip()), None)
    if blank is not None:
        raise SourceError(f"{p} has a blank line (line {blank + 1}); give one non-empty text per line")
    return lines


def read_explanations(path: str | os.PathLike[str]) -> pl.DataFrame:
    """An explanation table from `.csv`, `.parquet`, `.jsonl` (columns `explanation` and
    `concept` or `unit`), or `.txt` (one explanation per line, named by its text)."""
    p = Path(path)
    if not p.is_file():
        raise SourceError(f"no explanation file at {p}")
    if p.suffix != ".txt" and p.suffix not in _TABLE_READERS:
        raise SourceError(f"explanations must be a .csv, .parquet, .jsonl or .txt file; got {p}")
    try:
        frame: Any = _text_lines(p) if p.suffix == ".txt" else _TABLE_READERS[p.suffix](p)
    except Exception as e:  # polars raises many kinds; all mean the file is unreadable
        raise SourceError(f"cannot read the explanation table {p}: {e}") from e
    return explanations_table(frame)


def read_inputs(path: str | os.PathLike[str], *, column: str | None = None) -> list[Any]:
    """Inputs from a file: `.txt` (one text per line), `.csv`/`.parquet`/`.jsonl` (the `column`
    column, `LABEL_OPTIONS`), or `.npy` (images, shape (N, H, W, 3))."""
    column = LABEL_OPTIONS.only("column").resolve(column=column)["column"]
    p = Path(path)
    if not p.is_file():
        raise SourceError(f"no inputs file at {p}")
    try:
        if p.suffix == ".txt":
            values: list[Any] = _text_lines(p)
        elif p.suffix == ".npy":
            array = np.load(p, mmap_mode="r", allow_pickle=False)
            if array.ndim != 4:
                raise SourceError(f"images in {p} must have shape (N, H, W, 3); got {array.shape}")
            values = list(array)
        else:
            if p.suffix not in _TABLE_READERS:
                raise SourceError(f"inputs must be a .txt, .csv, .parquet, .jsonl or .npy file; got {p}")
            frame = _TABLE_READERS[p.suffix](p)
            if column not in frame.columns:
                raise SourceError(f"the inputs table {p} has no '{column}' column; it has {frame.columns}")
            values = frame[column].to_list()
            missing = [i for i, v in enumerate(values) if v is None or (isinstance(v, str) and not v.strip())]
            if missing:
                raise SourceError(f"the inputs table {p} has an empty '{column}' at row {missing[0]}")
    except SourceError:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise SourceError(f"cannot read the inputs {p}: {e}") from e
    except Exception as e:  # polars
        raise SourceError(f"cannot read the inputs {p}: {e}") from e
    if not values:
        raise EmptyInputError(f"the inputs file {p} holds no inputs")
    return values


def label(
    judge: Judge,
    inputs: Sequence[Any],
    explanations: Any,
    *,
    cache: LabelCache | str | os.PathLike[str] | None = None,
    batch_size: int | None = None,
    progress: bool = False,
) -> Labels:
    """Every (input, explanation) judged once: cached judgements are read, the others made.

    The cache is read first: the judge loads its model (or reaches its endpoint) only when a
    judgement is missing, and a cache file is created only once the judge is ready, so a judge
    that cannot start leaves no file behind.

    Parameters
    ----------
    judge : Judge
        `minilm()`, `e5()`, `smollm2()`, `EndpointJudge(...)`, `ClipJudge(...)`.
    inputs : sequence
        The N inputs, of the judge's kind (texts, or (H, W, 3) images).
    explanations : sequence of str or table
        The T explanations (`explanations_table`).
    cache : LabelCache or path, optional
        Where judgements are stored and looked up; None labels without a cache (every
        judgement is made).
    batch_size : int, optional
        Inputs handed to the judge at once (default: see `LABEL_OPTIONS`); each batch is stored as soon as it is judged. A
        judge whose scores depend on their batch (`Judge.fixed_batch`: the LLM judges) is handed
        its own fixed batches instead, so its results do not depend on this.
    progress : bool
        A bar on stderr while judging.

    Returns
    -------
    Labels

    Examples
    --------
    >>> import tempfile, os
    >>> from neuroneval.label import minilm
    >>> cache = os.path.join(tempfile.mkdtemp(), "cache.sqlite")
    >>> texts = ["The striker scored twice in the final.", "Shares fell on Wall Street."]
    >>> first = label(minilm(), texts, ["sports"], cache=cache)  # doctest: +SKIP
    >>> again = label(minilm(), texts, ["sports"], cache=cache)  # doctest: +SKIP
    >>> first.stats.calls, again.stats.calls, bool(first.probabilities[0, 0] > first.probabilities[1, 0])  # doctest: +SKIP
    (2, 0, True)
    """
    if not isinstance(judge, Judge):
        raise ParameterError(f"judge must be a neuroneval.label judge; got {type(judge).__name__}")
    batch_size = LABEL_OPTIONS.only("batch_size").resolve(batch_size=batch_size)["batch_size"]
    values = judge.check_inputs(inputs)
    table = explanations_table(explanations)
    work = _Labelling(judge, values, table["explanation"].to_list())
    path = None if cache is None or isinstance(cache, LabelCache) else Path(cache)
    store = cache if isinstance(cache, LabelCache) else None
    try:
        if path is not None and path.exists():
            store = LabelCache(path)
        work.look_up(store, connected=False)
        if work.left():
            judge.prepare()  # load the model, reach the endpoint: only for judgements to make
            if path is not None and store is None:
                store = LabelCache(path)
            work.look_up(store, connected=True)
            work.make(store, batch_size, Progress(progress))
    finally:
        judge.close()
        if store is not None and store is not cache:
            store.close()
    return work.labels(table["concept"].to_list())


class _Labelling:
    """One `label` run: the keys, the scores found and made, and what it cost."""

    def __init__(self, judge: Judge, values: list[Any], texts: list[str]) -> None:
        self.judge, self.values, self.texts = judge, values, texts
        self.digests = [judge.input_digest(v) for v in values]
        # Distinct inputs are judged once: a repeated input shares its first occurrence's judgement.
        self.first: dict[str, int] = {}
        for i, d in enumerate(self.digests):
            self.first.setdefault(d, i)
        self.distinct = sorted(self.first.values())
        self.scores = np.full((len(values), len(texts)), np.nan)
        self.stats = LabelStats(pairs=len(values) * len(texts))
        self.keys: list[list[str]] = []
        self.identity = ""

    def look_up(self, store: LabelCache | None, *, connected: bool) -> None:
        """The cached scores, under the judge's keys (an endpoint's: under the fingerprint last
        recorded in the cache until it is reached, then the one it reported, which is recorded)."""
        judge = self.judge
        if store is not None and judge.learns_fingerprint:
            if connected:
                store.remember_fingerprint(judge.base_identity, judge.model_fingerprint)
            elif (seen := store.fingerprint(judge.base_identity)) is not None:
                judge.assume_fingerprint(seen)
        if judge.identity != self.identity:
            self.identity = judge.identity
            self.keys = [[judge.key(text, d) for d in self.digests] for text in self.texts]
        self.scores[:] = np.nan
        for c in range(len(self.texts)):
            found = store.get(self.keys[c]) if store is not None else {}
            for i, k in enumerate(self.keys[c]):
                if k in found:
                    self.scores[i, c] = found[k]
        self.stats.hits = int(np.sum(~np.isnan(self.scores)))

    def left(self) -> bool:
        return bool(np.isnan(self.scores).any())

    def make(self, store: LabelCache | None, batch_size: int, report: Progress) -> None:
        """Judge what the cache does not hold, storing each batch as it is judged."""
        judge = self.judge
        with report.bar(f"judging ({judge.name})", total=self.scores.size, initial=self.stats.hits, unit="pair") as bar:
            for c in range(len(self.texts)):
                rows = np.flatnonzero(np.isnan(self.scores[:, c]))
                for batch, keep in self._batches(rows, batch_size):
                    self._judge(c, batch, keep, store, bar)
                for i in rows:  # the repeats
                    self.scores[i, c] = self.scores[self.first[self.digests[i]], c]
                bar.update(int(rows.size - len({self.digests[i] for i in rows})))
        self.stats.cost = judge_cost(judge, self.stats.tokens)

    def _batches(self, rows: np.ndarray, batch_size: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """(inputs to judge, which of them to store) per batch: the distinct missing inputs in
        batches of `batch_size`, or, for a judge with a `fixed_batch`, every fixed batch of the
        distinct inputs that holds a missing one (its cached inputs are judged again and dropped,
        so that each score comes from the batch an uninterrupted run gives it)."""
        need = sorted({self.first[self.digests[i]] for i in rows})
        size = self.judge.fixed_batch
        if size is None:
            spans = [np.array(need[s : s + batch_size], dtype=np.int64) for s in range(0, len(need), batch_size)]
            return [(span, np.ones(span.size, dtype=bool)) for span in spans]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ParameterError(f"the {self.judge.name} judge's fixed batch must be a positive integer; got {size!r}")
        wanted = set(need)
        groups = [self.distinct[s : s + size] for s in range(0, len(self.distinct), size)]
        return [
            (np.array(g, dtype=np.int64), np.array([i in wanted for i in g], dtype=bool))
            for g in groups
            if wanted.intersection(g)
        ]

    def _judge(self, c: int, batch: np.ndarray, keep: np.ndarray, store: LabelCache | None, bar: Any) -> None:
        judge = self.judge
        for done in judge.judge(self.texts[c], [self.values[i] for i in batch]):
            got = np.asarray(done.scores, dtype=np.float64)
            if not np.all(np.isfinite(got)):
                raise SourceError(f"the {judge.name} judge returned a non-finite score")
            kept = keep[done.positions]
            where = batch[done.positions][kept]
            tokens = np.asarray(done.tokens, dtype=np.int64)[kept]
            self.scores[where, c] = got[kept]
            if store is not None and where.size:
                store.put([self.keys[c][i] for i in where], got[kept], tokens, judge=judge.name)
            self.stats.calls += int(where.size)
            self.stats.tokens += int(np.sum(tokens))
            bar.update(int(where.size))

    def labels(self, concepts: list[str]) -> Labels:
        if np.isnan(self.scores).any():
            raise ShapeError(f"the {self.judge.name} judge left some judgements unmade")
        return Labels(
            scores=self.scores,
            probabilities=self.judge.probability_map.probability(self.scores),
            concepts=concepts,
            explanations=self.texts,
            stats=self.stats,
        )


def judge_cost(judge: Judge, tokens: int) -> float:
    """Estimated cost of `tokens` under the judge's price per million tokens (0 when it has none)."""
    price = getattr(judge, "price_per_million_tokens", 0.0) or 0.0
    return float(price) * tokens / 1e6
