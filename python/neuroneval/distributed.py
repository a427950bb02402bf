"""`neuroneval.distributed.evaluate`: `neuroneval.evaluate` run as Ray tasks, on one machine
or a cluster. Needs the `ray` extra (`pip install neuroneval[ray]`); `import neuroneval`
never imports ray.

The units are split into contiguous blocks, one Ray task each. A task opens the activation
source itself from its path (a `.npy` file or a dense shard directory on a filesystem every
worker sees; data in memory, sparse matrices included, are put in Ray's object store once),
reads its units' columns for all N inputs, scores them with the same code as `evaluate`
(`_evaluate.score_block`) and writes its table as a parquet part into `<out>.partial/`,
written aside and renamed into place. The concepts (and the run's arguments) go into the
object store once; each worker process prepares them once per run.

The parts, `run.json` and the final merge are `evaluate`'s own: a restarted driver submits
only the blocks without a part (and says so), different arguments or data raise
`ResumeError` (`restart=True` discards them), and the final file appears only when complete.
A task whose worker dies is retried (`max_retries`); a part is whole or absent, and a retry
writes the same content, so nothing is lost or duplicated. Bad input is rejected by
`evaluate`'s own checks before Ray is started or any task is submitted.
"""

from __future__ import annotations

import math
import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from . import _core, _evaluate
from ._evaluate import partial_dir
from .errors import ParameterError, SourceError
from .files import output_lock
from .options import Option, Options
from .params import ScoreParams
from .progress import Progress
from .sources import Source, open_activations

__all__ = ["evaluate", "DEFAULT_TASKS", "RAY_OPTIONS"]

#: By default the units are split into at least this many tasks (fewer when K is smaller),
#: each also bounded like `evaluate`'s blocks (256 MiB of activations).
DEFAULT_TASKS = 16
#: The options of a Ray run, beside `evaluate`'s.
RAY_OPTIONS = Options(
    Option("cpus_per_task", "integer", 1, "CPUs each task asks Ray for, and the core's threads in it", low=1),
    Option("max_retries", "integer", 3, "retries of a task whose worker process died (or whose node was lost)", low=0),
    Option(
        "num_cpus",
        "integer",
        None,
        "CPUs of a local Ray started for the run (none: the machine's)",
        low=1,
        optional=True,
    ),
)


@dataclass(frozen=True)
class _Shared:
    """What every task of one run needs, put in the object store once."""

    names: list[str]
    params: ScoreParams
    top: int | None
    conc: Source  # its core in memory
    bounds: list[tuple[int, int]]
    acts: Source | None  # data in memory, or None: opened by each task from `path`
    path: str | None
    unit_names: list[str] | None
    shape: tuple[int, int]
    dtype: str
    work: str
    run: str  # identifies the run in each worker process's cache


def evaluate(
    activations: Any,
    concepts: Any,
    metrics: str | Sequence[str] | None = None,
    *,
    out: str | os.PathLike[str],
    address: str | None = None,
    units_per_task: int | None = None,
    num_cpus: int | None = None,
    cpus_per_task: int | None = None,
    max_retries: int | None = None,
    alpha: float | None = None,
    lam: float | None = None,
    k: int | None = None,
    top_alpha: float | None = None,
    seed: int | None = None,
    keep: Literal["all"] | int | None = None,
    unit_names: Any = None,
    concept_names: Any = None,
    restart: bool = False,
    progress: bool = True,
) -> Path:
    """`neuroneval.evaluate(..., out=out)` as Ray tasks: the same arguments, the same file.

    Parameters
    ----------
    activations, concepts, metrics, alpha, lam, k, top_alpha, seed, keep, unit_names, concept_names, restart, progress
        As in `neuroneval.evaluate`. File sources must be on a path every worker sees.
    out : path
        The parquet file to write, on a filesystem every worker sees (tasks write their
        parts into `<out>.partial/`).
    address : str, optional
        A Ray cluster to connect to (`ray.init(address=...)`, e.g. "10.0.0.1:6379" or
        "auto"), or None: a local Ray started for this call (with `num_cpus` CPUs, default
        the machine's) and stopped after it. Either way, when this process already runs a
        Ray runtime (`ray.init` was called), that one is used.
    units_per_task : int, optional
        Units per task (the blocks of `run.json`). Default: K / 16 rounded up, and at most
        as many as `evaluate`'s default block holds.
    num_cpus, cpus_per_task, max_retries : int, optional
        `RAY_OPTIONS` (their defaults and domains are declared there).

    Returns
    -------
    pathlib.Path
        `out`, once written.
    """
    ray_options = RAY_OPTIONS.resolve(cpus_per_task=cpus_per_task, max_retries=max_retries, num_cpus=num_cpus)
    cpus_per_task, max_retries, num_cpus = (ray_options[n] for n in ("cpus_per_task", "max_retries", "num_cpus"))
    if address is not None and not isinstance(address, str):
        raise ParameterError(f"address must be a string such as 'ray://host:10001'; got {address!r}")
    # evaluate's own checks, in evaluate's order: every input error is raised here.
    params = ScoreParams(alpha=alpha, lam=lam, k=k, top_alpha=top_alpha, seed=seed)
    plan = _evaluate.plan_run(activations, concepts, metrics, params, keep, units_per_task, unit_names, concept_names)
    if units_per_task is None:
        plan.bounds = _evaluate.unit_blocks(
            plan.acts, plan.conc.n_columns, _default_units(plan.acts, plan.conc.n_columns)
        )
    out = _evaluate.check_out(out, plan.inputs(unit_names, concept_names)).resolve()
    report = Progress(progress)
    with output_lock(out) as lock:
        _evaluate.note_takeover(lock, report)
        plan.prepare()
        plan.prepared = None  # the driver only validated the concepts; each worker prepares its own
        ray = _import_ray()
        work = partial_dir(out)
        done = _evaluate.open_state(work, plan.state(), restart, report)
        shared = _Shared(
            names=plan.names,
            params=plan.params,
            top=plan.top,
            conc=plan.conc.in_memory(),
            bounds=plan.bounds,
            acts=None if _path_of(plan.acts) else plan.acts.in_memory(),
            path=_path_of(plan.acts),
            unit_names=plan.acts.names,
            shape=plan.acts.shape,
            dtype=str(plan.acts.dtype),
            work=str(work),
            run=uuid.uuid4().hex,
        )
        todo = [i for i in range(len(plan.bounds)) if i not in done]
        with _evaluate.record_failure(work):
            if todo:
                _run_tasks(ray, shared, todo, len(plan.bounds), address, num_cpus, cpus_per_task, max_retries, report)
        _evaluate.merge_parts(work, len(plan.bounds), out)
        shutil.rmtree(work, ignore_errors=True)
    return out


def _run_tasks(
    ray: Any,
    shared: _Shared,
    todo: list[int],
    n_blocks: int,
    address: str | None,
    num_cpus: int | None,
    cpus_per_task: int,
    max_retries: int,
    report: Progress,
) -> None:
    """Submits one task per block in `todo` and waits for all of them: on the Ray runtime
    this process already runs, else on one started here (and stopped after)."""
    started = False
    if not ray.is_initialized():
        if address is None:
            ray.init(num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
        started = True
    try:
        task = ray.remote(_score_part).options(num_cpus=cpus_per_task, max_retries=max_retries, retry_exceptions=False)
        ref = ray.put(shared)
        pending = [_submit(task, ref, i, cpus_per_task) for i in todo]
        with report.bar("scoring", total=n_blocks, initial=n_blocks - len(todo), unit="block") as bar:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                ray.get(ready)  # raises a task's error (after its retries)
                bar.update(len(ready))
    finally:
        if started:
            ray.shutdown()


def _submit(task: Any, shared: Any, block: int, threads: int) -> Any:
    """One task submitted (its object reference); one place to count submissions."""
    return task.remote(shared, block, threads)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ImportError("neuroneval.distributed needs Ray: pip install 'neuroneval[ray]'") from e
    return ray


def _default_units(acts: Source, n_concepts: int) -> int:
    start, stop = _evaluate.unit_blocks(acts, n_concepts, None)[0]  # evaluate's default block
    return max(1, min(stop - start, math.ceil(acts.n_columns / DEFAULT_TASKS)))


def _path_of(acts: Source) -> str | None:
    """The path a task opens the activations from: dense `.npy` files and shard
    directories; everything else travels through the object store."""
    if acts.kind == "npy":
        return str(acts.files[0].resolve())
    if acts.kind == "shards":
        return str(Path(acts.origin).resolve())
    return None


# ---------------------------------------------------------------------------- in a worker

#: Per worker process, the current run's prepared concepts and activation source, by run id.
_CACHE: dict[str, tuple[_core.PreparedConcepts, Source]] = {}


def _score_part(shared: _Shared, block: int, threads: int) -> tuple[int, int]:
    """A Ray task: scores block `block` and writes its part. Returns (block, pid).

    `shared` is the run's object (Ray hands it over from the object store, arrays without a
    copy); the concepts are prepared once per worker process and run."""
    os.environ["NEURONEVAL_NUM_THREADS"] = str(threads)
    prepared, acts = _worker_state(shared)
    start, stop = shared.bounds[block]
    data = _evaluate.read_columns(acts, start, stop)
    frame = _evaluate.score_block(
        data, prepared, shared.names, shared.params, start, stop, acts, shared.conc, shared.top
    )
    del data
    _evaluate.write_part(Path(shared.work), block, frame)
    return block, os.getpid()


def _worker_state(shared: _Shared) -> tuple[_core.PreparedConcepts, Source]:
    key = shared.run
    if key not in _CACHE:
        prepared = _core.prepare_concepts(shared.conc.core, shared.names)
        if shared.acts is not None:
            acts = shared.acts
        else:
            assert shared.path is not None
            acts = open_activations(shared.path, unit_names=shared.unit_names)
            if acts.shape != shared.shape or str(acts.dtype) != shared.dtype:
                raise SourceError(
                    f"this worker reads {shared.path} as {acts.shape} {acts.dtype}; "
                    f"the driver read {shared.shape} {shared.dtype} (is the path shared?)"
                )
        _CACHE.clear()  # one run at a time per worker process
        _CACHE[key] = (prepared, acts)
    return _CACHE[key]
