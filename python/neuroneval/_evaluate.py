"""`evaluate`: every metric for every (unit, concept) pair at any scale, block by block.

The units are processed in blocks. For each block the core computes every requested metric
in one pass over that block's data, against concepts that were validated and transformed
once for the whole run. Results stream to a parquet file block by block, so memory is
bounded by the block size (or by a row-major file of at most `WHOLE_FILE_BYTES`, read
whole), not by K or by the number of pairs.

How a source is read
    Data in memory (arrays, tensors, sparse matrices) are read in place: a block is a view.
    Row-major files (`.npy`, dense shard directories) are read **once**, in row chunks, and
    each chunk's columns are appended to one scratch file per block of units (unit-major
    blocks, in the source dtype). Each block's scratch file is then read once and deleted.
    So a row-major file costs one read of the file, one write and one read of a scratch copy
    of the same size, never one read per block. The scratch copy, and a file of at least
    256 MiB, go past the page cache (`O_DIRECT`, see `_direct`): read or written once, they
    would only cost the kernel's copies. A run with a single block, or a file of at
    most `WHOLE_FILE_BYTES` (1 GiB), reads the file once into memory and needs no scratch.
    Column-major `.npy` files are read block by block directly. Every buffer (row chunks, a
    chunk's columns per block, the blocks read back) is reused, not allocated per read.

Interrupted runs
    Finished blocks are kept in `<out>.partial/` as parquet parts, each written atomically.
    Run `evaluate` again with the same arguments and it resumes after the last finished
    block (and says so); the final file is identical to an uninterrupted run's. Different
    arguments or data against the same output raise `ResumeError` unless `restart=True`,
    except after a run that stopped on bad input (a NaN deep in a file that is read only
    once): it records the error in `<out>.partial/failed.json`, and a rerun whose inputs have
    changed since (the file was fixed) starts over by itself. The final file appears under
    its name only when complete (written aside, then renamed).

One writer per output
    Every argument and the output path are checked before anything is computed (the output
    must not be a directory, nor one of the inputs). A run then holds an exclusive lock on
    `<out>.lock` (`neuroneval.files.output_lock`) until it is done: a second run on the same
    output fails at once with `OutputLockedError`, naming the process that holds it. A
    full disk or another I/O error raises `OutputWriteError` naming the path and the step,
    and leaves the finished parts in place: the same call resumes once there is room.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

from . import _core, _direct
from ._coerce import check_integer
from .errors import InvalidInputError, ParameterError, ResumeError, ShapeError, SourceError
from .files import check_output, output_lock, read_json, remove_stale_temporaries, write_atomic, writing
from .params import ScoreParams, metric_list
from .progress import Progress
from .sources import Source, input_paths, open_activations, open_concepts

__all__ = ["evaluate", "partial_dir", "DEFAULT_BLOCK_BYTES"]

# `neuroneval.distributed` runs the same plan as Ray tasks; it shares, besides `partial_dir`:
# `plan_run` and `Plan` (the checked arguments), `unit_blocks`, `check_out`, `open_state`
# (run.json, the resume rule), `record_failure`, `read_columns`, `score_block`, `write_part`
# and `merge_parts`.

#: Default size of one block's activations in their own dtype (the scratch read per block).
DEFAULT_BLOCK_BYTES = 256 << 20
#: At most this many result rows per block, so one block's table stays small.
_MAX_BLOCK_ROWS = 2_000_000
#: Bytes of rows read from a row-major file at a time during the transposition.
_CHUNK_BYTES = 64 << 20
#: A row-major file with several blocks is read whole into memory, not through a scratch
#: copy, when it is at most this large (or one block is).
WHOLE_FILE_BYTES = 1 << 30
_STATE = "run.json"
#: Written into `<out>.partial/` when a block fails on bad input (see `record_failure`).
_FAILED = "failed.json"


def partial_dir(out: str | os.PathLike[str]) -> Path:
    """Where an unfinished run on `out` keeps its finished blocks and scratch files."""
    out = Path(out)
    return out.with_name(out.name + ".partial")


def evaluate(
    activations: Any,
    concepts: Any,
    metrics: str | Sequence[str] | None = None,
    *,
    alpha: float | None = None,
    lam: float | None = None,
    k: int | None = None,
    top_alpha: float | None = None,
    seed: int | None = None,
    out: str | os.PathLike[str] | None = None,
    keep: Literal["all"] | int | None = None,
    block_units: int | None = None,
    unit_names: Any = None,
    concept_names: Any = None,
    scratch: str | os.PathLike[str] | None = None,
    restart: bool = False,
    progress: bool = True,
) -> pl.DataFrame | Path:
    """Every metric for every (unit, concept) pair, block by block, to a parquet file or a table.

    Parameters
    ----------
    activations, concepts
        Anything `neuroneval.sources` opens: arrays, tensors, `.npy` files, shard
        directories, `scipy.sparse` matrices; concepts also a `.parquet`/`.csv` table.
    metrics, alpha, lam, k, top_alpha, seed
        As in `neuroneval.compute`.
    out : path, optional
        The parquet file to write. Without it the table is returned in memory.
    keep : "all" or int, optional
        All pairs (None or "all"), or each unit's `keep` best concepts under the first
        metric (NaN last, ties by concept order), with a `rank` column (1 = best).
    block_units : int, optional
        Units per block; by default as many as fit in 256 MiB of activations.
    unit_names, concept_names
        Sequences or text files (one name per line); default the names the sources carry,
        else integer indices.
    scratch : path, optional
        A directory in which to put (in a subdirectory of its own, deleted when done) the
        unit-major scratch copy of a row-major file; by default `<out>.partial/scratch`,
        or a temporary directory when `out` is None.
    restart : bool
        Discard an unfinished run on `out` that was started with different arguments.
    progress : bool
        A progress bar on a terminal, and a notice on stderr when a run resumes.

    Returns
    -------
    polars.DataFrame or pathlib.Path
        The table (unit, concept, [rank,] one column per metric), or `out` once written.

    Examples
    --------
    >>> import numpy as np, neuroneval
    >>> rng = np.random.default_rng(0)
    >>> a = rng.normal(size=(200, 5))
    >>> c = (a[:, :2] > 1).astype(np.float64)
    >>> t = neuroneval.evaluate(a, c, ["auprc", "correlation"], keep=1, block_units=2, progress=False)
    >>> t.select("unit", "concept", "rank").head(2).rows()
    [(0, 0, 1), (1, 1, 1)]
    """
    params = ScoreParams(alpha=alpha, lam=lam, k=k, top_alpha=top_alpha, seed=seed)
    plan = plan_run(activations, concepts, metrics, params, keep, block_units, unit_names, concept_names)
    report = Progress(progress)
    if scratch is not None and not isinstance(scratch, (str, os.PathLike)):
        raise ParameterError(f"scratch must be a directory's path; got {scratch!r}")
    if scratch is not None and not Path(scratch).is_dir():
        raise ParameterError(f"the scratch directory {scratch} does not exist (or is not a directory)")

    if out is None:
        plan.prepare()
        with tempfile.TemporaryDirectory(prefix="neuroneval-", dir=scratch) as tmp:
            parts = _Job(plan, Path(tmp), report).run(Path(tmp) / "scratch")
            return pl.concat(parts) if parts else _empty_table(plan.names, plan.top, plan.acts, plan.conc)

    out = check_out(out, plan.inputs(unit_names, concept_names))
    with output_lock(out) as lock:
        note_takeover(lock, report)
        plan.prepare()
        work = partial_dir(out)
        done = open_state(work, plan.state(), restart, report)
        # Our own subdirectory of a user's scratch directory: only it is ever deleted.
        scratch_dir = work / "scratch" if scratch is None else Path(scratch) / f"{work.name}-scratch"
        with record_failure(work):
            _Job(plan, work, report).run(scratch_dir, done)
        merge_parts(work, len(plan.bounds), out)
        shutil.rmtree(work, ignore_errors=True)
    return out


def note_takeover(lock: Any, report: Progress) -> None:
    """Says so when the run took over the lock of a run that was killed, and removes the
    temporary files that run's writes left beside the output."""
    removed = remove_stale_temporaries(lock.out)
    if lock.took_over:
        holder = lock.took_over
        report.say(
            f"taking over {lock.path} from process {holder.get('pid')} on host {holder.get('host')}, "
            f"which stopped without releasing it"
            + (f"; removed {removed} unfinished temporary files" if removed else "")
        )


@dataclass
class Plan:
    """A validated run: its arguments, opened sources, blocks and prepared concepts."""

    names: list[str]
    params: ScoreParams
    keep: Literal["all"] | int
    top: int | None
    acts: Source
    conc: Source
    bounds: list[tuple[int, int]]
    prepared: _core.PreparedConcepts | None = None

    def prepare(self) -> None:
        """Validates (and transforms) the concepts, and checks that the activations hold
        only finite values where that costs no more than one pass over data in memory:
        every input error the data can cause is raised here, before a block is scored
        (a row-major file is checked as it is read once, still before any block)."""
        self.prepared = _core.prepare_concepts(self.conc.core, self.names)
        if len(self.bounds) > 1 and self.acts.kind in ("array", "sparse"):  # in memory
            check_finite(self.acts)

    def inputs(self, *names: Any) -> list[Path]:
        """Every file and directory this run reads (the sources, and names given as files)."""
        return input_paths(self.acts, self.conc, *names)

    def state(self) -> dict[str, Any]:
        """The run's fingerprint, kept as `run.json` in `<out>.partial/` (the resume rule)."""
        return {
            "version": 1,
            "arguments": {
                "metrics": self.names,
                **self.params.to_dict(),
                "keep": self.keep,
                "blocks": self.bounds,
            },
            "activations": self.acts.fingerprint(),
            "concepts": self.conc.fingerprint(),
            "unit_names": self.acts.names,
            "concept_names": self.conc.names,
        }


def plan_run(
    activations: Any,
    concepts: Any,
    metrics: str | Sequence[str] | None,
    params: ScoreParams,
    keep: Literal["all"] | int | None,
    block_units: int | None,
    unit_names: Any,
    concept_names: Any,
) -> Plan:
    """Checks every argument, opens both sources and validates (prepares) the concepts:
    every input error is raised here, before anything is written or submitted."""
    names = metric_list(metrics)
    _core.check_arguments(names, params)
    keep = "all" if keep is None else keep
    top = _check_keep(keep)
    acts = open_activations(activations, unit_names=unit_names)
    conc = open_concepts(concepts, n_inputs=acts.n_rows, concept_names=concept_names)
    if acts.n_rows != conc.n_rows:
        raise ShapeError(f"activations have {acts.n_rows} inputs (rows) but concepts have {conc.n_rows}")
    bounds = unit_blocks(acts, conc.n_columns, block_units)
    return Plan(names, params, keep, top, acts, conc, bounds)


def check_out(out: Any, inputs: Sequence[Path] = ()) -> Path:
    """The output path, checked (`neuroneval.files.check_output`): its directory exists and
    is writable, it is not a directory, and neither it nor `<out>.partial` is an input."""
    if not isinstance(out, (str, os.PathLike)):
        raise ParameterError(f"out must be a path; got {out!r}")
    return check_output(out, inputs)


def check_finite(acts: Source) -> None:
    """A `NonFiniteError` naming the first (row, column) of a NaN or infinity in `acts`,
    data in memory (an array or a sparse matrix's values), by row chunks."""
    if isinstance(acts.core, tuple):  # CSC: (rows, indptr, indices, values)
        _, indptr, indices, values = acts.core
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            cols = np.searchsorted(indptr, bad, side="right") - 1
            # the first in row-major order, like the core's own scan
            first = int(np.lexsort((cols, indices[bad]))[0])
            _raise_non_finite(int(indices[bad[first]]), int(cols[first]), float(values[bad[first]]))
        return
    row = 0
    for chunk in acts.row_chunks(_chunk_rows(acts)):
        check_finite_rows(chunk, row)
        row += chunk.shape[0]


def check_finite_rows(chunk: np.ndarray, first_row: int) -> None:
    """A `NonFiniteError` for the first NaN or infinity of a row chunk that starts at row
    `first_row` of the activations."""
    if chunk.dtype == np.float16 and chunk.flags.c_contiguous:
        # NaN and infinity are the float16 patterns with every exponent bit set: an integer
        # test, many times faster than numpy's float16 isfinite, in slices whose temporaries
        # stay small (no fresh pages per chunk)
        bits = chunk.reshape(-1).view(np.uint16)
        step = 1 << 20
        masked, hit = np.empty(min(step, bits.size), np.uint16), np.empty(min(step, bits.size), bool)
        for s in range(0, bits.size, step):
            part = bits[s : s + step]
            np.bitwise_and(part, 0x7C00, out=masked[: part.size])
            np.equal(masked[: part.size], 0x7C00, out=hit[: part.size])
            if hit[: part.size].any():
                break
        else:
            return
    finite = np.isfinite(chunk)
    if not finite.all():
        i, j = np.argwhere(~finite)[0]
        _raise_non_finite(first_row + int(i), int(j), float(chunk[i, j]))


def _raise_non_finite(row: int, column: int, value: float) -> None:
    # The core words the error (CoreError::NonFinite), for the value at its place in the whole matrix.
    _core.check_finite(np.array([[value]]), row, column)
    raise AssertionError(f"the core took {value} at ({row}, {column}) for a finite value")


def score_block(
    data: Any,
    prepared: _core.PreparedConcepts,
    names: list[str],
    params: ScoreParams,
    start: int,
    stop: int,
    acts: Source,
    conc: Source,
    top: int | None,
) -> pl.DataFrame:
    """Units [start, stop) scored into their table: `data` is their (N, stop - start)
    activations as the core reads them. The one home of the scoring, for `evaluate`'s
    blocks and `neuroneval.distributed`'s tasks alike."""
    values = _core.score_matrix(data, prepared, names, params, first_unit=start)
    return _table(values, names, start, stop, acts, conc, top)


def read_columns(acts: Source, start: int, stop: int) -> Any:
    """Units [start, stop) of `acts` read on their own, as the core reads them: a column
    range of a column-major `.npy` by one plain read; of a row-major file by one pass of
    plain row-chunk reads keeping only these columns; of data in memory, a view."""
    if acts.kind == "npy" and not acts.row_major_files:
        return _read_columns(acts, start, stop)
    if acts.row_major_files:
        data = np.empty((acts.n_rows, stop - start), dtype=acts.dtype)
        row = 0
        for chunk in acts.row_chunks(_chunk_rows(acts)):
            data[row : row + chunk.shape[0]] = chunk[:, start:stop]
            row += chunk.shape[0]
        return data
    return acts.columns(start, stop).core


def write_part(work: Path, block: int, frame: pl.DataFrame) -> None:
    """The block's part file, written aside (a name of this process's own), synced, then
    renamed into place: a part is whole or absent, and rewriting it is harmless."""
    write_atomic(_part(work, block), frame.write_parquet, step=f"writing the part of block {block}")


def _check_keep(keep: Any) -> int | None:
    if isinstance(keep, str) and keep == "all":
        return None
    if isinstance(keep, str):
        raise ParameterError(f"keep must be 'all' or a positive integer; got {keep!r}")
    return check_integer(keep, "keep", minimum=1)


def unit_blocks(acts: Source, n_concepts: int, block_units: int | None) -> list[tuple[int, int]]:
    n, k = acts.shape
    if block_units is None:
        # A block's activations: N values per unit, or a sparse unit's entries (12 bytes each)
        per_unit = n * acts.dtype.itemsize
        if isinstance(acts.core, tuple):
            per_unit = max(1, 12 * len(acts.core[2]) // max(1, k))
        by_bytes = DEFAULT_BLOCK_BYTES // max(1, per_unit)
        block_units = max(1, min(k, by_bytes, _MAX_BLOCK_ROWS // max(1, n_concepts)))
    b = check_integer(block_units, "block_units", minimum=1)
    return [(s, min(s + b, k)) for s in range(0, k, b)]


def open_state(work: Path, state: dict[str, Any], restart: bool, report: Progress) -> set[int]:
    """The blocks already finished in `work`, after checking that they belong to this run."""
    path = work / _STATE
    if work.exists() and not work.is_dir():
        raise ResumeError(f"{work} is a file, not a neuroneval run; remove it")
    if path.is_file():
        try:
            previous = read_json(path)
        except SourceError:  # an unreadable state: not this run's
            previous = None
        failed = _failure(work)
        if previous != json.loads(json.dumps(state)):
            if failed is not None and not restart:
                report.say(
                    f"starting {work} over: its run stopped on bad input ({failed}), and the arguments "
                    "or data have changed since"
                )
                restart = True
            if not restart:
                raise ResumeError(
                    f"{work} holds an unfinished run with different arguments or data; "
                    "run with the same ones to resume, or pass restart=True (--restart) to discard it"
                )
            shutil.rmtree(work)
        else:
            done = {i for i in range(len(state["arguments"]["blocks"])) if _part(work, i).is_file()}
            total = len(state["arguments"]["blocks"])
            report.say(f"resuming {work}: {len(done)} of {total} blocks already finished")
            return done
    elif work.exists():
        if not restart and any(work.iterdir()):
            raise ResumeError(f"{work} exists but is not a neuroneval run; remove it or pass restart=True")
        shutil.rmtree(work)
    with writing(work, "creating the unfinished run's directory"):
        work.mkdir(parents=True)
    _write_atomic(path, json.dumps(state, indent=1).encode())
    return set()


@contextmanager
def record_failure(work: Path) -> Iterator[None]:
    """Runs the block; when it fails on bad input (a NaN the core met in a block of a file
    read block by block), records the error in `work` first, so that a rerun with corrected
    data starts over by itself (`open_state`) instead of refusing the changed fingerprint."""
    try:
        yield
    except InvalidInputError as e:
        if work.is_dir():
            _write_atomic(work / _FAILED, json.dumps({"error": str(e), "type": type(e).__name__}).encode())
        raise
    (work / _FAILED).unlink(missing_ok=True)


def _failure(work: Path) -> str | None:
    """The error an unfinished run in `work` stopped on, if it stopped on bad input."""
    try:
        record = read_json(work / _FAILED)
    except SourceError:
        return None
    return str(record.get("error", "unknown")) if isinstance(record, dict) else None


def _part(work: Path, block: int) -> Path:
    return work / f"part-{block:06d}.parquet"


def _write_atomic(path: Path, data: bytes) -> None:
    write_atomic(path, lambda p: p.write_bytes(data), step=f"writing {path.name}")


@dataclass
class _Job:
    """One evaluate run: its plan (what every block is scored with), where its parts go."""

    plan: Plan
    work: Path
    report: Progress

    def run(self, scratch: Path, done: set[int] | None = None) -> list[pl.DataFrame]:
        """Scores the blocks not in `done`: into part files when `done` is given (a run
        with an output file), else into the returned tables."""
        keep_parts = done is not None
        done = done or set()
        plan = self.plan
        todo = [i for i in range(len(plan.bounds)) if i not in done]
        if not todo:
            return []
        assert plan.prepared is not None
        blocks = _BlockReader(plan.acts, plan.bounds, scratch, self.report)
        frames: list[pl.DataFrame] = []
        # The next block is read on a second thread while the core (which releases the
        # GIL) scores this one.
        with (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="neuroneval-read") as reader,
            self.report.bar("scoring", total=len(plan.bounds), initial=len(done), unit="block") as bar,
        ):
            pending = reader.submit(blocks.read, todo[0])
            for count, i in enumerate(todo, start=1):
                data = pending.result()
                if count < len(todo):
                    pending = reader.submit(blocks.read, todo[count])
                start, stop = plan.bounds[i]
                frame = score_block(
                    data, plan.prepared, plan.names, plan.params, start, stop, plan.acts, plan.conc, plan.top
                )
                del data
                if keep_parts:
                    write_part(self.work, i, frame)
                else:
                    frames.append(frame)
                blocks.finished(i)
                bar.update(1)
        blocks.close()
        return frames


class _BlockReader:
    """Each block's activations as the core reads them: a view of data in memory, or the
    block's scratch copy of a row-major file (made by one pass over the file)."""

    def __init__(
        self,
        acts: Source,
        bounds: list[tuple[int, int]],
        scratch: Path,
        report: Progress,
    ) -> None:
        self.acts, self.bounds, self.scratch = acts, bounds, scratch
        self.whole: np.ndarray | None = None
        # Buffers reused from block to block (two: the next block is read while one is
        # scored), so that no block costs fresh pages.
        self._buffers: list[np.ndarray | None] = [None, None]
        file_bytes = acts.n_rows * acts.n_columns * acts.dtype.itemsize
        fits = len(bounds) == 1 or file_bytes <= WHOLE_FILE_BYTES  # read at call time: tests lower it
        self.transposed = acts.row_major_files and not fits
        if acts.row_major_files and fits:
            # Read the file once into memory, chunk by chunk into one array (not a list of
            # chunks joined at the end, which would hold it twice); no scratch copy.
            self.whole = np.empty(acts.shape, dtype=acts.dtype)
            row = 0
            for chunk in acts.row_chunks(_chunk_rows(acts), reuse=True):
                if len(bounds) > 1:  # so that a NaN fails the run before any block is scored
                    check_finite_rows(chunk, row)
                self.whole[row : row + chunk.shape[0]] = chunk
                row += chunk.shape[0]
        elif self.transposed:
            self._transpose(report)

    def _file(self, block: int) -> Path:
        return self.scratch / f"block-{block:06d}.bin"

    def _transpose(self, report: Progress) -> None:
        marker = self.scratch / "complete.json"
        # Compared as JSON reads it back (tuples become lists), so a resume reuses the copy.
        expected = json.loads(
            json.dumps({"shape": list(self.acts.shape), "dtype": str(self.acts.dtype), "blocks": self.bounds})
        )
        try:
            if marker.is_file() and read_json(marker) == expected:
                return
        except SourceError:
            pass  # an unreadable marker: make the copy again
        shutil.rmtree(self.scratch, ignore_errors=True)
        with writing(self.scratch, "writing the scratch copy"):
            self.scratch.mkdir(parents=True)
            rows = _chunk_rows(self.acts)
            item = self.acts.dtype.itemsize
            # one writer per block, each buffering two chunks' worth of its columns; each
            # writes its tail and closes on success, closes without it on an error
            with ExitStack() as stack, report.bar("reading", total=self.acts.n_rows, unit="row") as bar:
                files = [
                    stack.enter_context(
                        _direct.AppendWriter(self._file(i), buffer_bytes=max(4 << 20, 2 * rows * (e - s) * item))
                    )
                    for i, (s, e) in enumerate(self.bounds)
                ]
                row = 0
                for chunk in self.acts.row_chunks(rows, reuse=True):
                    # Checked as it is read, so a NaN fails the run before any block is scored.
                    check_finite_rows(chunk, row)
                    m = chunk.shape[0]
                    for f, (s, e) in zip(files, self.bounds, strict=True):
                        part = f.reserve(m * (e - s) * item).view(self.acts.dtype).reshape(m, e - s)
                        np.copyto(part, chunk[:, s:e])
                    row += m
                    bar.update(m)
        _write_atomic(marker, json.dumps(expected).encode())

    def read(self, block: int) -> Any:
        start, stop = self.bounds[block]
        if self.whole is not None:
            return self.whole[:, start:stop]
        if self.transposed:
            shape = (self.acts.n_rows, stop - start)
            nbytes = shape[0] * shape[1] * self.acts.dtype.itemsize
            slot = block % 2
            buffer = self._buffers[slot]
            if buffer is None or len(buffer) < nbytes:
                width = max(e - s for s, e in self.bounds)
                buffer = self._buffers[slot] = _direct.aligned_bytes(shape[0] * width * self.acts.dtype.itemsize)
            got = _direct.read_file_into(self._file(block), buffer)
            if got != nbytes:
                raise SourceError(f"the scratch file {self._file(block)} holds {got} bytes, not {nbytes}")
            return buffer[:nbytes].view(self.acts.dtype).reshape(shape)
        if self.acts.kind == "npy":  # column-major: the block is one contiguous range
            return _read_columns(self.acts, start, stop)
        return self.acts.columns(start, stop).core

    def finished(self, block: int) -> None:
        if self.transposed:
            self._file(block).unlink(missing_ok=True)

    def close(self) -> None:
        if self.transposed:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _chunk_rows(acts: Source) -> int:
    return max(1, _CHUNK_BYTES // max(1, acts.n_columns * acts.dtype.itemsize))


def _read_columns(acts: Source, start: int, stop: int) -> np.ndarray:
    """Columns [start, stop) of a column-major `.npy` file, by one plain read."""
    arr = acts.core  # the memory map: its offset locates the data
    n, item = acts.n_rows, acts.dtype.itemsize
    offset = int(arr.offset) + start * n * item
    data = np.fromfile(acts.files[0], dtype=acts.dtype, count=(stop - start) * n, offset=offset)
    return data.reshape(stop - start, n).T


def _table(
    values: list[np.ndarray],
    names: list[str],
    start: int,
    stop: int,
    acts: Source,
    conc: Source,
    top: int | None,
) -> pl.DataFrame:
    b, t = stop - start, conc.n_columns
    units = np.repeat(np.arange(start, stop), t)
    concepts = np.tile(np.arange(t), b)
    rows: np.ndarray | None = None
    if top is not None:
        first = values[0]
        # Descending by the first metric, NaN last, ties by concept index (lexsort is stable).
        order = np.lexsort((np.where(np.isnan(first), 0.0, -first), np.isnan(first)), axis=-1)
        rows = (np.arange(b)[:, None] * t + order[:, : min(top, t)]).reshape(-1)
        units, concepts = units[rows], concepts[rows]
    columns: dict[str, Any] = {"unit": _labels(units, acts.names), "concept": _labels(concepts, conc.names)}
    if top is not None:
        columns["rank"] = np.tile(np.arange(1, min(top, t) + 1, dtype=np.int64), b)
    for name, v in zip(names, values, strict=True):
        flat = v.reshape(-1)
        columns[name] = flat if rows is None else flat[rows]
    return pl.DataFrame(columns)


def _labels(index: np.ndarray, names: list[str] | None) -> Any:
    if names is None:
        return index.astype(np.int64)
    return pl.Series(names, dtype=pl.String).gather(index.astype(np.int64))


def _empty_table(names: list[str], top: int | None, acts: Source, conc: Source) -> pl.DataFrame:
    unit_type = pl.String if acts.names is not None else pl.Int64
    concept_type = pl.String if conc.names is not None else pl.Int64
    schema: dict[str, Any] = {"unit": unit_type, "concept": concept_type}
    if top is not None:
        schema["rank"] = pl.Int64
    schema.update({n: pl.Float64 for n in names})
    return pl.DataFrame(schema=schema)


def merge_parts(work: Path, n_blocks: int, out: Path) -> None:
    """All parts, in block order, into `out`: written aside, then renamed into place."""
    parts = [_part(work, i) for i in range(n_blocks)]
    missing = [p for p in parts if not p.is_file()]
    if missing:  # pragma: no cover - _run writes every part before returning
        raise ResumeError(f"{len(missing)} blocks of {work} are missing")
    merged = pl.concat([pl.scan_parquet(p) for p in parts])
    write_atomic(out, lambda tmp: merged.sink_parquet(tmp), step="merging the parts")
