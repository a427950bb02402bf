"""The `neuroneval` command line: `main` and the top-level parser; one module per command
(`score`, `sanity`, `meta`, `crowd`, `label`, `compare`, `circuits`, `causal`, `report`, `demo`)
declares its
options and runs it, and `common` holds what they share.

Usage
-----
Score every (unit, concept) pair under some metrics and write a parquet table::

    neuroneval score acts.npy concepts.npy --metrics correlation,auprc --out scores.parquet

Keep each unit's five best concepts under the first metric, with names from text files
(one name per line), on eight threads::

    neuroneval score acts/ concepts.csv --metrics auprc,f1 --alpha 0.01 --top 5 \\
        --unit-names units.txt --concept-names concepts.txt --threads 8 --out best.parquet

Score only some (unit, concept) index pairs (a CSV with columns `unit,concept`, or an
`(M, 2)` integer `.npy` file), in their order::

    neuroneval score acts.npy concepts.npz --pairs pairs.csv --out pairs.parquet

Run the sanity checks of SPEC section 4 on real units (the experimental test, with each
unit's correct concept from a file) and the theoretical test, print the paper's Table 3 and
write it with its records and a bar chart into a directory::

    neuroneval sanity acts.npy concepts.npy --truth truth.txt --theoretical --out sanity/

Only the theoretical test (no data needed), smaller than the paper's::

    neuroneval sanity --theoretical --n 100000 --seeds 200

Meta-evaluation 2 (SPEC section 5): each metric's meta-AUPRC on test units with known
concepts, alpha and lambda tuned on validation units, as a table::

    neuroneval meta acts.npy concepts.csv --truth truth.npy --out meta.csv

Crowdsourced evaluation (SPEC section 6): the correlation of each (unit, explanation) pair
from a few noisy human ratings. Draw the inputs raters see (MG-IS with a cheap concept model)
and write the plan and a task table for a crowdsourcing platform; turn the returned votes
(a table of pair, input, rater, vote) into soft labels; estimate each pair's correlation with a
bootstrap interval::

    neuroneval crowd plan acts.npy model.npy --pairs pairs.csv --budget 540 \
        --unit-names units.txt --explanations texts.txt --out plan.parquet --tasks tasks.csv
    neuroneval crowd aggregate ratings.csv --plan plan.parquet --eta estimate --out labels.csv
    neuroneval crowd estimate --plan plan.parquet --labels labels.csv --out rho.csv

Choose a budget first with simulated raters on units with known labels: the relative
correlation error of each configuration (uniform or MG-IS sampling, majority vote or BRAgg)
per budget, and the budget each needs to reach a target::

    neuroneval crowd simulate acts.npy labels.npy model.npy --pairs pairs.csv \
        --budgets 60,120,240,480,960 --target 0.275 --out simulation/

Compare explainers (SPEC's trustworthy metrics by default): an explanations table of (unit,
explainer, explanation) rows and one concept column per row; print each explainer's mean over
units with a bootstrap interval, against a random and a shuffled baseline, and the paired
differences between explainers; write the tables and a SAEBench eval output into a directory
(or label the explanations with a judge instead of giving --concepts)::

    neuroneval compare acts.npy explanations.csv --concepts concepts.npy --n-boot 2000 --out compare/
    neuroneval compare acts.npy explanations.csv --judge minilm --inputs texts.txt --out compare/

MIB's circuit track (SPEC section 7): score every edge of a model's graph with attribution
methods, evaluate the circuits they pick (faithfulness at ten sizes, CPR, CMD) and write the run;
then print MIB's CPR/CMD table of runs (text, CSV or JSON)::

    neuroneval circuits run --model smollm2 --task ioi --method all --out runs/smollm2-ioi
    neuroneval circuits table runs/smollm2-ioi runs/smollm2-arithmetic --format csv

MIB's causal-variable track: IIA of featurizers (full vector, neurons, PCA, SAE, DAS, DBM) on a
task's variables at each layer and token position, then the table of runs::

    neuroneval causal run --model planted --out runs/planted
    neuroneval causal table runs/planted runs/smollm2-ioi --format csv

One self-contained HTML page of a results directory (what `neuroneval demo --out DIR`
writes, or any directory holding a scores.parquet; `neuroneval.report` says what it reads)::

    neuroneval report demo-out -o report.html

The same commands run as `python -m neuroneval score ...` (or `sanity`, `meta`, `crowd`, `compare`, `circuits`, `causal`, `report`).

Inputs
    ACTIVATIONS is a `.npy` file, a shard directory (`neuroneval.sources.write_shards`), a
    `.npz` file holding a `scipy.sparse` matrix (`scipy.sparse.save_npz`) or a delphi latent
    cache's hookpoint directory (`neuroneval.interop.read_delphi_cache`). CONCEPTS takes the
    same forms, plus a `.parquet`/`.csv` table of `(input, concept, probability)` rows.
    `score` reads them in place; `sanity` and `meta` read them into memory (`meta` only the
    activations) and refuse, with one line, matrices that would not fit.

    `crowd plan` and `crowd simulate` take ACTIVATIONS and their CONCEPT_MODEL (a cheap model's
    probabilities) and LABELS (true labels) in the same forms, and read into memory only the
    columns their pairs use. RATINGS and LABELS of `crowd aggregate` and `crowd estimate` are
    `.csv` or `.parquet` tables.

    TRUTH (`sanity`, `meta`) gives each unit's correct concept: a `.npy` file of K integer
    concept indices, or a text file with one line per unit holding a concept name (of
    CONCEPTS' table, shard manifest or `--concept-names`) or else a concept index.

Output
    Without `--pairs`, `neuroneval.evaluate` writes the table block by block; an interrupted
    run resumes when the same command is run again (`--restart` discards an unfinished run
    made with other arguments). With `--ray [ADDRESS]`, `neuroneval.distributed.evaluate` writes
    the same table as Ray tasks, on the cluster at ADDRESS or on a local Ray. With `--pairs`, `neuroneval.score` computes the table, which
    is written aside and renamed into place. On a terminal a progress bar shows on stderr;
    after success a short summary (each unit's best concept under the first metric) goes to
    stdout. `--quiet` turns both off.

    `sanity` prints Table 3 as markdown and a one-line verdict; with `--out DIR` it writes
    table.csv, table.md, records.csv and chart.png there (each complete or absent). `meta`
    prints its table best first and writes it, with `--out`, to a `.csv` or `.parquet` file
    (written aside and renamed into place).

    `crowd plan` writes the plan (parquet) and the task table (`.csv` or `.parquet`; default
    `<plan stem>-tasks.csv` beside the plan); `crowd aggregate` the labels and, with `--eta
    estimate --rater-rates`, each rater's fitted error rate; `crowd estimate` its table with
    `--out`; each command's files are written aside and renamed into place, all or none.
    `crowd simulate --out DIR` writes rce.csv, needed.csv and rce.png there (all or none).

    `compare --out DIR` prints the ranking of each metric and the differences under the first,
    and writes pairs.parquet, summary.csv, differences.csv, comparison.json and
    saebench_eval.json (RELEASE_ID_eval_results.json with --sae-release and --sae-id) there (all or none); `neuroneval report DIR` shows them.

    `circuits run --out DIR` writes scores/<method>.json (MIB's circuit JSON), curves.csv and
    circuit_run.json there (circuit_run.json last: a directory holding it is whole) and prints
    each method's CPR, CMD, mean faithfulness, AUROC and seconds; `neuroneval report DIR` shows
    the runs' curves.

    `causal run --out DIR` writes causal_run.json and hits.npz there (all or none), and the SAEs
    it trained as saes/layer_<l>/ (SAELens's layout), and prints IIA per featurizer and
    variable; `neuroneval report DIR` shows IIA per layer.

    `report` writes its page (default RESULTS_DIR/report.html) aside and renames it into
    place, then prints its path and size.

Exit codes
    0 on success; 2 for bad input or arguments (one line on stderr says what is wrong); 1 for
    an I/O failure: an output that cannot be written (a read-only file system, a permission
    denied: found before any work), a full disk; 130 when interrupted, at any instant once the
    command's code runs (Python's own start, a few tens of milliseconds, answers with Python's
    traceback). Ctrl-C while torch is being imported takes effect once that import returns
    (about a second): torch's C++ initialisers cannot unwind an interrupt and would abort.

Paths in files
    A path that a file names (a shard manifest's shard, a results folder's inputs, an
    extraction's layer folder) must stay inside that file's folder once resolved: `..`, an
    absolute path or a link that leads out is refused (exit 2), and nothing outside is read.
"""

from __future__ import annotations

import _thread
import importlib.machinery
import sys

# Not typing's (see neuroneval/__init__.py): this module is imported before the handler is in place.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Runs the command line on `argv` (default `sys.argv[1:]`) and returns the exit code.

    The commands and the libraries they use are imported here, inside the interrupt handler, so
    that Ctrl-C at any instant is one line and exit 130, never a traceback.

    Examples
    --------
    >>> main(["--version"])  # doctest: +ELLIPSIS
    neuroneval ...
    0
    """
    interrupted, restore = _watch_interrupts()
    try:
        from .app import main as run

        return run(argv)
    except KeyboardInterrupt:
        return _interrupted()
    except Exception:
        # Ctrl-C can reach us as another exception made of it: the ImportError of a C
        # extension's import (numpy's, torch's), the RuntimeError of a class statement whose
        # __set_name__ it interrupted (a dataclass field's, Python 3.11)
        if interrupted():
            return _interrupted()
        raise
    finally:
        restore()


def _interrupted() -> int:
    print("neuroneval: interrupted", file=sys.stderr, flush=True)
    return 130


def _watch_interrupts() -> tuple[Callable[[], bool], Callable[[], None]]:
    """Records Ctrl-C (SIGINT) until the returned restore is called, still raising
    KeyboardInterrupt as Python's own handler does; returns (whether one came, restore).

    A KeyboardInterrupt raised where Python cannot raise it (a weakref callback, such as an
    import's module lock runs) would be printed as "Exception ignored" and lost, the command
    running on: it is not printed, and a second thread interrupts the main thread again once
    the hook has returned (an interrupt raised inside the hook would be ignored in turn).

    While the main thread imports a module of `_UNINTERRUPTIBLE_PACKAGES`, Ctrl-C is held and
    raised once the outermost such import has returned."""
    import signal

    seen: list[bool] = []
    hold = _InterruptHold(main_thread=_thread.get_ident())  # if not the main thread, unused
    finder = _HoldingFinder(hold)
    previous = signal.getsignal(signal.SIGINT)
    previous_hook = sys.unraisablehook

    def reraise(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _thread.start_new_thread(_thread.interrupt_main, ())
        else:
            previous_hook(unraisable)

    def record(signum: int, frame: Any) -> None:
        seen.append(True)
        if hold.depth:
            hold.held = True
        elif callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    def restore() -> None:
        if signal.getsignal(signal.SIGINT) is record:
            signal.signal(signal.SIGINT, previous)
        if sys.unraisablehook is reraise:
            sys.unraisablehook = previous_hook
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)

    try:
        signal.signal(signal.SIGINT, record)
    except ValueError:  # not the main thread: signals are not ours to watch
        return (lambda: False), (lambda: None)
    sys.unraisablehook = reraise
    sys.meta_path.insert(0, finder)
    return (lambda: bool(seen)), restore


# Packages whose C++ module initialisers run Python code (imports) and cannot unwind an
# exception from it: a KeyboardInterrupt inside torch.distributed's or torch.autograd's
# initialiser aborts the process ("terminate called after throwing ...") or crashes it.
_UNINTERRUPTIBLE_PACKAGES = frozenset({"torch"})
_FILE_LOADERS = (
    importlib.machinery.SourceFileLoader,
    importlib.machinery.SourcelessFileLoader,
    importlib.machinery.ExtensionFileLoader,
)


class _InterruptHold:
    """The main thread's uninterruptible imports in progress (`depth`) and whether Ctrl-C came
    meanwhile (`held`); entered around each such import, it raises the held KeyboardInterrupt
    when the outermost one returns."""

    def __init__(self, main_thread: int) -> None:
        self.main_thread = main_thread
        self.depth = 0
        self.held = False

    def __enter__(self) -> None:
        if _thread.get_ident() == self.main_thread:
            self.depth += 1

    def __exit__(self, *exc: object) -> None:
        if _thread.get_ident() != self.main_thread:
            return
        self.depth -= 1
        if self.depth == 0 and self.held:
            self.held = False
            raise KeyboardInterrupt


class _HoldingFinder:
    """Finds the modules of `_UNINTERRUPTIBLE_PACKAGES` as the finders after it would, with
    file loaders that create and execute them under `hold`."""

    def __init__(self, hold: _InterruptHold) -> None:
        self.hold = hold

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.partition(".")[0] not in _UNINTERRUPTIBLE_PACKAGES or self not in sys.meta_path:
            return None
        for finder in sys.meta_path[sys.meta_path.index(self) + 1 :]:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                if isinstance(spec.loader, _FILE_LOADERS):
                    spec.loader = _held_loader(spec.loader, self.hold)
                return spec
        return None


def _held_loader(loader: Any, hold: _InterruptHold) -> Any:
    """A copy of `loader` (same class, to every isinstance test) whose module creation and
    execution run under `hold`."""
    held: Any = object.__new__(_held_loader_class(type(loader)))
    held.__dict__.update(loader.__dict__)
    held._neuroneval_hold = hold
    return held


def _held_loader_class(cls: type) -> type:
    if cls in _HELD_LOADER_CLASSES:
        return _HELD_LOADER_CLASSES[cls]

    class Held(cls):  # type: ignore[misc]
        def create_module(self, spec: Any) -> Any:
            with self._neuroneval_hold:
                return super().create_module(spec)

        def exec_module(self, module: Any) -> None:
            with self._neuroneval_hold:
                super().exec_module(module)

    Held.__name__ = Held.__qualname__ = cls.__name__
    _HELD_LOADER_CLASSES[cls] = Held
    return Held


_HELD_LOADER_CLASSES: dict[type, type] = {}
