"""The judgement cache: every (judge, template, explanation, input) is paid for once.

One SQLite file (WAL journal) holds the raw score and token count of every judgement, keyed by
a SHA-256 digest of the judge's identity (`Judge.identity`: name, version, model fingerprint,
template; never an endpoint's address), the explanation and the input's content. Each batch of
judgements is stored in one transaction as soon as the judge returns it, so a killed run loses
at most the batch in flight and a rerun resumes where it stopped; several processes may label
into the same cache at once (SQLite serialises their writes; a judgement two of them made is
stored once).

Each stored batch also appends one row per judgement to the `calls` log, which is how a test
(or an auditor) checks that no judgement was ever paid for twice. The `fingerprints` table
records the model fingerprint each endpoint judge last reported, so that a run whose judgements
are all cached can find them without asking the endpoint. A stored score that is not a finite
number (a file written by something else) is a `SourceError` naming the file and the row.

Examples
--------
>>> import tempfile, os, numpy as np
>>> cache = LabelCache(os.path.join(tempfile.mkdtemp(), "judgements.sqlite"))
>>> cache.put(["k1", "k2"], np.array([0.5, -1.0]), np.array([10, 12]), judge="demo")
>>> cache.get(["k2", "k3"])
{'k2': -1.0}
>>> cache.calls()
2
>>> cache.close()
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from neuroneval.errors import OutputError, OutputWriteError, ParameterError, SourceError
from neuroneval.files import check_writable

__all__ = ["LabelCache", "default_cache_path"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS judgements (
    key TEXT PRIMARY KEY,
    judge TEXT NOT NULL,
    score REAL NOT NULL,
    tokens INTEGER NOT NULL,
    made REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS calls (
    key TEXT NOT NULL,
    judge TEXT NOT NULL,
    made REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS fingerprints (
    judge TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    seen REAL NOT NULL
) WITHOUT ROWID;
"""
# SQLite caps the number of bound parameters of one statement.
_CHUNK = 900


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/neuroneval`` (``~/.cache`` by default): the home of the judgement cache
    and of the model cache (`neuroneval.label.gguf`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "neuroneval"


def default_cache_path() -> Path:
    """`NEURONEVAL_CACHE`, else ``$XDG_CACHE_HOME/neuroneval/judgements.sqlite`` (``~/.cache`` by default)."""
    explicit = os.environ.get("NEURONEVAL_CACHE")
    if explicit:
        return Path(explicit)
    return user_cache_dir() / "judgements.sqlite"


#: How long a connection waits for another process's lock on the cache.
_BUSY_SECONDS = 120.0


def _use_wal(db: sqlite3.Connection) -> None:
    """Switches the cache to write-ahead logging. The switch takes a lock that SQLite does not
    wait for (its busy timeout does not apply), so processes opening the file at the same
    moment can be refused with "database is locked": retried, with growing pauses, for as long
    as the busy timeout."""
    deadline = time.monotonic() + _BUSY_SECONDS
    pause = 0.005
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(2 * pause, 0.25)


class LabelCache:
    """A persistent store of raw judgements (see the module's docstring).

    Parameters
    ----------
    path : str or os.PathLike, optional
        The SQLite file; created with its directory when missing (`default_cache_path` when
        not given).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        if self.path.is_dir():
            raise OutputError(f"the judgement cache {self.path} is a directory; give a file path")
        # SQLite writes the file and its -wal and -shm companions beside it: a folder or file it
        # cannot write is an I/O failure (exit 1), not a damaged cache.
        check_writable(self.path)
        if self.path.exists() and not os.access(self.path, os.W_OK):
            raise OutputWriteError(f"cannot write the judgement cache {self.path}: permission denied")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are ours (BEGIN IMMEDIATE ... COMMIT).
            self._db = sqlite3.connect(self.path, timeout=_BUSY_SECONDS, isolation_level=None, check_same_thread=False)
            _use_wal(self._db)
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as e:
            raise SourceError(f"cannot open the judgement cache {self.path}: {e}") from e
        except OSError as e:
            raise OutputWriteError(f"cannot create the judgement cache {self.path}: {e}") from e

    def get(self, keys: Sequence[str]) -> dict[str, float]:
        """The stored raw score of each of `keys` that is in the cache.

        Raises
        ------
        SourceError
            A stored score is not a finite number (text, NULL, a blob, an infinity: a cache
            written by something else), named with the cache file and the row.
        """
        found: dict[str, float] = {}
        for start in range(0, len(keys), _CHUNK):
            chunk = list(keys[start : start + _CHUNK])
            marks = ",".join("?" * len(chunk))
            try:
                rows = self._db.execute(f"SELECT key, judge, score FROM judgements WHERE key IN ({marks})", chunk)
                found.update((key, self._score(key, judge, score)) for key, judge, score in rows)
            except sqlite3.DatabaseError as e:
                raise SourceError(f"cannot read the judgement cache {self.path}: {e}") from e
        return found

    def _score(self, key: str, judge: object, score: object) -> float:
        """A stored score, or a `SourceError` naming the file and the row when it is not a finite number."""
        if isinstance(score, int | float) and not isinstance(score, bool) and math.isfinite(score):
            return float(score)
        raise SourceError(
            f"the judgement cache {self.path} is damaged: the row with key {key} (judge {judge!r}) holds the score "
            f"{score!r}, not a finite number; delete that row (or the file) and judge again"
        )

    def fingerprint(self, judge: str) -> str | None:
        """The model fingerprint last recorded for `judge` (a judge's identity without its model),
        or None (`remember_fingerprint`)."""
        try:
            row = self._db.execute("SELECT fingerprint FROM fingerprints WHERE judge = ?", (judge,)).fetchone()
        except sqlite3.DatabaseError as e:
            raise SourceError(f"cannot read the judgement cache {self.path}: {e}") from e
        return None if row is None else str(row[0])

    def remember_fingerprint(self, judge: str, fingerprint: str) -> None:
        """Record the model fingerprint an endpoint reported for `judge`, so that a later run whose
        judgements are all cached finds them without asking the endpoint."""
        try:
            self._db.execute("INSERT OR REPLACE INTO fingerprints VALUES (?, ?, ?)", (judge, fingerprint, time.time()))
        except sqlite3.DatabaseError as e:
            raise OutputWriteError(f"cannot write the judgement cache {self.path}: {e}") from e

    def put(
        self,
        keys: Sequence[str],
        scores: npt.ArrayLike,
        tokens: npt.ArrayLike,
        *,
        judge: str,
    ) -> None:
        """Store judgements (and log them as calls) in one transaction; non-finite scores are refused
        (`ParameterError`)."""
        s = np.asarray(scores, dtype=np.float64)
        t = np.asarray(tokens, dtype=np.int64)
        if not np.all(np.isfinite(s)):
            raise ParameterError(f"judgements to store must have finite scores; got {s[~np.isfinite(s)][0]!r}")
        now = time.time()
        rows = [(k, judge, float(v), int(n), now) for k, v, n in zip(keys, s, t, strict=True)]
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR IGNORE INTO judgements VALUES (?, ?, ?, ?, ?)", rows)
                self._db.executemany("INSERT INTO calls VALUES (?, ?, ?)", [(k, judge, now) for k in keys])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as e:
            raise OutputWriteError(f"cannot write the judgement cache {self.path}: {e}") from e

    def calls(self, keys: Iterable[str] | None = None) -> int:
        """Judgements ever made into this cache (of `keys` only, when given)."""
        if keys is None:
            return int(self._db.execute("SELECT count(*) FROM calls").fetchone()[0])
        wanted = list(keys)
        total = 0
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            total += int(self._db.execute(f"SELECT count(*) FROM calls WHERE key IN ({marks})", chunk).fetchone()[0])
        return total

    def repeated_calls(self) -> int:
        """Judgements made more than once (0 unless two processes raced on the same pair)."""
        row = self._db.execute("SELECT count(*) - count(DISTINCT key) FROM calls").fetchone()
        return int(row[0])

    def __len__(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM judgements").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> LabelCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
