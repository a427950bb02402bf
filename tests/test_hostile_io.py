"""Nothing lost, nothing silently wrong: outputs, concurrent runs, kills, full disks, bad files.

Every case is what a hostile (or unlucky) user does: two runs on one output, an output path
that names an input, a kill during the merge, a disk that fills up, a NaN deep in a file, a
manifest or shard of the wrong type, a path that is a directory or a symbolic link loop.
Each must end in one clear library error (an `InvalidInputError` for bad input, an
`OutputWriteError` for a failed write), or in a correct output: never a corrupt file, a
destroyed input or a silently truncated value. The races and kills are real processes; the
full disk is a real tmpfs where the machine lets a test mount one, else a write that fails
with ENOSPC at the write call.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import neuroneval
import numpy as np
import polars as pl
import pytest
from cli_helpers import assert_one_line_error, run
from fs_helpers import tmpfs
from neuroneval import errors
from neuroneval._evaluate import _BlockReader, partial_dir
from neuroneval.files import output_lock
from neuroneval.indices import read_pairs
from neuroneval.progress import Progress
from neuroneval.sources import Source, open_activations, write_shards, write_triplet_shards
from polars.testing import assert_frame_equal

METRICS = ["auprc", "correlation", "inverse_auc"]


def check(call: Callable[[], Any], cls: type[Exception], *fragments: str) -> str:
    """`call` raises `cls`, a library error, whose message holds every fragment (case-insensitive)."""
    with pytest.raises(cls) as info:
        call()
    err = info.value
    assert isinstance(err, errors.NeuronEvalError), type(err)
    if cls is not errors.OutputWriteError:
        assert isinstance(err, ValueError), type(err)
    message = str(err)
    for fragment in fragments:
        assert fragment.lower() in message.lower(), (fragment, message)
    return message


def data(n: int = 400, k: int = 12, t: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = np.round(rng.normal(size=(n, k)) * 4) / 4
    c = (rng.random((n, t)) < 0.2).astype(np.float64)
    return a, c


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    a, c = data()
    np.save(tmp_path / "acts.npy", a.astype(np.float32))
    np.save(tmp_path / "concepts.npy", c)
    (tmp_path / "units.txt").write_text("".join(f"u{i}\n" for i in range(a.shape[1])))
    pl.DataFrame({"unit": [0, 1], "concept": [1, 2]}).write_csv(tmp_path / "pairs.csv")
    return {
        "acts": tmp_path / "acts.npy",
        "concepts": tmp_path / "concepts.npy",
        "units": tmp_path / "units.txt",
        "pairs": tmp_path / "pairs.csv",
    }


def reference(acts: Any, conc: Any, **kw: Any) -> pl.DataFrame:
    return neuroneval.evaluate(acts, conc, METRICS, progress=False, **kw)  # type: ignore[return-value]


# ------------------------------------------------------------------------ one writer per output

# A child that runs evaluate on `out` once the go-file appears (so that two children start
# together), each block slowed down (the numbers are untouched) so that the winner holds the
# lock while the loser tries; it prints what happened as one JSON line.
RACER = """
import json, os, sys, time
import neuroneval, neuroneval._core as core
from neuroneval import errors
real = core.score_matrix
scored = []
def slow(*args, **kwargs):
    scored.append(1)
    time.sleep(0.05)
    return real(*args, **kwargs)
core.score_matrix = slow
acts, conc, out, go = sys.argv[1:5]
open(f"{{go}}.ready-{{os.getpid()}}", "w").close()
while not os.path.exists(go):
    time.sleep(0.001)
start = time.monotonic()
try:
    neuroneval.evaluate(acts, conc, {metrics!r}, block_units=2, out=out, progress=False)
    print(json.dumps({{"result": "ok"}}))
except errors.OutputLockedError as e:
    print(json.dumps({{"result": "locked", "seconds": time.monotonic() - start, "message": str(e),
                      "blocks_scored": len(scored)}}))
"""


@pytest.mark.slow
def test_two_runs_on_one_output(tmp_path: Path, files: dict[str, Path]) -> None:
    """20 races of two processes on one output: never a corrupt or wrong file; the loser fails
    at once (while the winner still runs), naming the winner's process."""
    expected = reference(files["acts"], files["concepts"], block_units=2)
    script = RACER.format(metrics=METRICS)
    conflicts, waits = 0, []
    for trial in range(20):
        out = tmp_path / f"race-{trial}.parquet"
        go = tmp_path / f"go-{trial}"
        args = [sys.executable, "-c", script, files["acts"], files["concepts"], out, go]
        children = [subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, text=True) for _ in range(2)]
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob(f"{go.name}.ready-*"))) < 2:  # both imported, both waiting
            assert time.monotonic() < deadline and all(c.poll() is None for c in children)
            time.sleep(0.005)
        go.touch()
        outcomes = []
        for child in children:
            stdout, _ = child.communicate(timeout=120)
            assert child.returncode == 0, stdout
            outcomes.append(json.loads(stdout.strip().splitlines()[-1]))
        results = sorted(o["result"] for o in outcomes)
        assert results in (["locked", "ok"], ["ok", "ok"]), outcomes
        assert_frame_equal(pl.read_parquet(out), expected)
        assert not partial_dir(out).exists() and not out.with_name(out.name + ".lock").exists()
        for o in outcomes:
            if o["result"] == "locked":
                conflicts += 1
                waits.append(o["seconds"])
                # It failed at once, before any work, naming the winner (which held the lock).
                assert o["blocks_scored"] == 0, o
                assert any(f"process {c.pid} " in o["message"] for c in children), o
    assert conflicts >= 10, f"only {conflicts} of 20 trials raced"  # the go-file makes them start together
    print(f"the losing run failed after {max(waits):.3f} s at most ({conflicts} races)")


def test_lock_in_process_names_holder(tmp_path: Path) -> None:
    out = tmp_path / "scores.parquet"
    a, c = data()
    with output_lock(out):
        msg = check(lambda: neuroneval.evaluate(a, c, METRICS, out=out, progress=False), errors.OutputLockedError)
        assert f"process {os.getpid()}" in msg and "host" in msg
    assert not out.exists()
    neuroneval.evaluate(a, c, METRICS, out=out, progress=False)  # released: the next run goes ahead
    assert not out.with_name(out.name + ".lock").exists()


def evaluate_in_child(files: dict[str, Path], out: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`evaluate` of the fixture's files in a fresh process, its notices on stderr."""
    extra = "".join(f", {key}={value!r}" for key, value in kw.items())
    script = (
        f"import neuroneval; neuroneval.evaluate({str(files['acts'])!r}, {str(files['concepts'])!r}, "
        f"{METRICS!r}, out={str(out)!r}, progress=True{extra})"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_stale_lock_of_a_killed_run_is_taken_over(tmp_path: Path, files: dict[str, Path]) -> None:
    out = tmp_path / "scores.parquet"
    script = (
        "import sys, time, neuroneval.files as f\n"
        f"lock = f.acquire_output_lock({str(out)!r})\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        check(
            lambda: neuroneval.evaluate(files["acts"], files["concepts"], METRICS, out=out, progress=False),
            errors.OutputLockedError,
            f"process {child.pid}",
        )
        child.kill()
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    lock = out.with_name(out.name + ".lock")
    assert lock.is_file() and json.loads(lock.read_text())["pid"] == child.pid  # left behind by the kill
    done = evaluate_in_child(files, out)
    assert done.returncode == 0, done.stderr
    assert f"taking over {lock}" in done.stderr and f"process {child.pid}" in done.stderr
    assert_frame_equal(pl.read_parquet(out), reference(files["acts"], files["concepts"]))
    assert not lock.exists()


# A child killed with SIGKILL in the middle of the merge: the final file's temporary copy
# is half written when the process dies.
KILLED_IN_MERGE = """
import os, signal, sys
import polars as pl
import neuroneval
acts, conc, out = sys.argv[1:4]
real = pl.LazyFrame.sink_parquet
def dying(self, path, *args, **kwargs):
    real(self, path, *args, **kwargs)
    if os.path.basename(str(path)).startswith("." + os.path.basename(out)):  # the merge, not a part
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        os.kill(os.getpid(), signal.SIGKILL)
pl.LazyFrame.sink_parquet = dying
neuroneval.evaluate(acts, conc, {metrics!r}, block_units=3, out=out, progress=False)
"""


def test_kill_during_the_merge(tmp_path: Path, files: dict[str, Path]) -> None:
    out = tmp_path / "scores.parquet"
    script = KILLED_IN_MERGE.format(metrics=METRICS)
    child = subprocess.run(
        [sys.executable, "-c", script, str(files["acts"]), str(files["concepts"]), str(out)], timeout=120
    )
    assert child.returncode == -signal.SIGKILL
    assert not out.exists()  # the half-written copy never took the final name
    leftovers = list(tmp_path.glob(f".{out.name}.*.tmp"))
    assert len(leftovers) == 1
    assert len(list(partial_dir(out).glob("part-*.parquet"))) == 4  # every block survived
    done = evaluate_in_child(files, out, block_units=3)
    assert done.returncode == 0, done.stderr
    assert "4 of 4 blocks already finished" in done.stderr
    assert "removed 1 unfinished temporary files" in done.stderr
    assert_frame_equal(pl.read_parquet(out), reference(files["acts"], files["concepts"], block_units=3))
    assert not list(tmp_path.glob(f".{out.name}.*.tmp")) and not partial_dir(out).exists()


# ------------------------------------------------------------------------ outputs and inputs


@pytest.mark.parametrize("target", ["acts", "concepts", "units"])
def test_output_naming_an_input_is_refused(tmp_path: Path, files: dict[str, Path], target: str) -> None:
    before = {name: p.read_bytes() for name, p in files.items()}
    out = files[target]
    check(
        lambda: neuroneval.evaluate(
            files["acts"], files["concepts"], METRICS, out=out, unit_names=files["units"], progress=False
        ),
        errors.OutputError,
        "is also an input",
    )
    assert {name: p.read_bytes() for name, p in files.items()} == before


@pytest.mark.parametrize("target", ["acts", "concepts", "units", "pairs"])
@pytest.mark.parametrize("with_pairs", [False, True])
def test_cli_out_naming_an_input(
    files: dict[str, Path], capfd: pytest.CaptureFixture[str], target: str, with_pairs: bool
) -> None:
    before = {name: p.read_bytes() for name, p in files.items()}
    argv: list[Any] = ["score", files["acts"], files["concepts"], "--out", files[target]]
    argv += ["--unit-names", files["units"]]
    if with_pairs or target == "pairs":
        argv += ["--pairs", files["pairs"]]
    code, out, err = run(argv, capfd)
    assert out == ""
    assert_one_line_error(code, err, 2, str(files[target]), "is also an input")
    assert {name: p.read_bytes() for name, p in files.items()} == before


def test_output_inside_a_shard_directory_companion(tmp_path: Path) -> None:
    """`<out>.partial` would be deleted by a restart: an input inside it is refused too."""
    a, c = data()
    out = tmp_path / "scores.parquet"
    shards = write_shards(partial_dir(out) / "acts", [a[:200], a[200:]])
    check(lambda: neuroneval.evaluate(shards, c, METRICS, out=out, progress=False), errors.OutputError, ".partial")
    assert (shards / "manifest.json").is_file()


def test_output_that_is_a_directory_fails_before_scoring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, c = data()
    out = tmp_path / "existing_dir"
    out.mkdir()

    def never(*_: Any, **__: Any) -> None:  # pragma: no cover - reached only on a bug
        raise AssertionError("a block was scored")

    monkeypatch.setattr(neuroneval._core, "score_matrix", never)
    for _ in range(2):  # the same clear error every time, nothing left behind
        check(lambda: neuroneval.evaluate(a, c, METRICS, out=out, progress=False), errors.OutputError, "directory")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["existing_dir"]


def test_output_directory_missing_or_read_only(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    a, c = data()
    check(
        lambda: neuroneval.evaluate(a, c, METRICS, out=tmp_path / "nope" / "x.parquet", progress=False),
        errors.OutputError,
        "does not exist",
    )
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("root ignores directory permissions here")
        check(
            lambda: neuroneval.evaluate(a, c, METRICS, out=ro / "x.parquet", progress=False),
            errors.OutputWriteError,
            "not writable",
        )
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("out", [None, 3, b"x.parquet"])
def test_output_of_the_wrong_type(out: Any) -> None:
    a, c = data()
    if out is None:
        assert isinstance(neuroneval.evaluate(a, c, METRICS, progress=False), pl.DataFrame)
    else:
        check(lambda: neuroneval.evaluate(a, c, METRICS, out=out, progress=False), errors.ParameterError, "out")


# ------------------------------------------------------------------------ full disks and I/O errors


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (the machine must let the test mount one: root, and not forbidden)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    with tmpfs(mount, "size=2m"):
        yield mount


def _fill(disk: Path, leave: int) -> Path:
    """A file that leaves about `leave` bytes free on `disk`."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


def _big_data() -> tuple[np.ndarray, np.ndarray]:
    return data(n=300, k=160, t=40, seed=3)  # 160 x 40 rows of 5 columns: ~ 0.5 MB of parquet


@pytest.mark.parametrize("room", [0.3, 1.4])
def test_disk_full_while_writing_parts_or_merging(small_disk: Path, tmp_path: Path, room: float) -> None:
    """Little room: a part (room for 0.3 of the output) or the merge (room for the parts, 1.0,
    but not the merged copy beside them) cannot be written. One `OutputWriteError` names the
    path and the step; the parts written stay, and the same call resumes once there is room."""
    a, c = _big_data()
    size = neuroneval.evaluate(a, c, METRICS, out=tmp_path / "size.parquet", block_units=20, progress=False)
    out = small_disk / "scores.parquet"
    filler = _fill(small_disk, int(room * Path(size).stat().st_size))
    msg = check(
        lambda: neuroneval.evaluate(a, c, METRICS, out=out, block_units=20, progress=False),
        errors.OutputWriteError,
        "no space left on device",
    )
    assert str(small_disk) in msg and ("part of block" if room < 1 else "merging the parts") in msg
    assert not out.exists() and not list(small_disk.glob(".scores.parquet.*.tmp"))
    parts = sorted(partial_dir(out).glob("part-*.parquet"))
    for p in parts:  # whole, readable parts
        pl.read_parquet(p)
    filler.unlink()
    got = neuroneval.evaluate(a, c, METRICS, out=out, block_units=20, progress=False)
    assert got == out
    assert_frame_equal(pl.read_parquet(out), reference(a, c, block_units=20))


def test_disk_full_in_the_cli(small_disk: Path, capfd: pytest.CaptureFixture[str]) -> None:
    a, c = _big_data()
    np.save(small_disk / "acts.npy", a.astype(np.float32))
    np.save(small_disk / "concepts.npy", c)
    out = small_disk / "scores.parquet"
    filler = _fill(small_disk, 60_000)
    argv = ["score", small_disk / "acts.npy", small_disk / "concepts.npy", "--out", out, "--metrics", "auprc"]
    code, _, err = run([*argv, "--block-units", "20", "--quiet"], capfd)
    assert_one_line_error(code, err, 1, "cannot write", "no space left on device")
    assert not out.exists()
    filler.unlink()
    code, _, err = run([*argv, "--block-units", "20"], capfd)  # the same command resumes
    assert code == 0, err
    assert "resuming" in err
    assert_frame_equal(pl.read_parquet(out), neuroneval.evaluate(a, c, ["auprc"], progress=False))


def test_disk_full_writing_the_pairs_table(small_disk: Path, capfd: pytest.CaptureFixture[str]) -> None:
    a, c = _big_data()
    np.save(small_disk / "acts.npy", a.astype(np.float32))
    np.save(small_disk / "concepts.npy", c)
    pairs = small_disk / "pairs.npy"
    np.save(pairs, np.array([(u, t) for u in range(160) for t in range(40)], dtype=np.int64))
    out = small_disk / "scores.parquet"
    filler = _fill(small_disk, 20_000)
    code, _, err = run(
        ["score", small_disk / "acts.npy", small_disk / "concepts.npy", "--out", out, "--pairs", pairs, "--quiet"],
        capfd,
    )
    assert_one_line_error(code, err, 1, str(out), "writing the scores", "no space left on device")
    assert not out.exists() and not list(small_disk.glob(".scores.parquet.*.tmp"))
    filler.unlink()


@pytest.mark.parametrize("step", ["part", "merge", "state"])
def test_write_failure_at_the_write_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """The same guarantees where no tmpfs can be mounted: the write call itself fails with ENOSPC."""
    a, c = data(k=12)
    out = tmp_path / "scores.parquet"
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if step == "part":
        real_write = pl.DataFrame.write_parquet
        calls = [0]

        def failing(self: pl.DataFrame, path: Any, *args: Any, **kw: Any) -> Any:
            calls[0] += 1
            if calls[0] == 3:
                raise full
            return real_write(self, path, *args, **kw)

        monkeypatch.setattr(pl.DataFrame, "write_parquet", failing)
    elif step == "merge":
        real_sink = pl.LazyFrame.sink_parquet

        def failing_sink(self: pl.LazyFrame, path: Any, *args: Any, **kw: Any) -> Any:
            if Path(path).name.startswith(f".{out.name}."):  # the merge (parts are written this way too)
                raise pl.exceptions.ComputeError("parquet: underlying IO error: No space left on device (os error 28)")
            return real_sink(self, path, *args, **kw)

        monkeypatch.setattr(pl.LazyFrame, "sink_parquet", failing_sink)
    else:
        real_bytes = Path.write_bytes

        def failing_bytes(self: Path, data: Any) -> Any:
            if "run.json" in self.name:
                raise full
            return real_bytes(self, data)

        monkeypatch.setattr(Path, "write_bytes", failing_bytes)
    fragment = {"part": "part of block 2", "merge": "merging the parts", "state": "run.json"}[step]
    check(
        lambda: neuroneval.evaluate(a, c, METRICS, out=out, block_units=3, progress=False),
        errors.OutputWriteError,
        fragment,
        "no space left on device",
    )
    assert not out.exists() and not list(tmp_path.glob(".*.tmp")) and not list(partial_dir(out).glob(".*.tmp"))
    monkeypatch.undo()
    neuroneval.evaluate(a, c, METRICS, out=out, block_units=3, progress=False)
    assert_frame_equal(pl.read_parquet(out), reference(a, c, block_units=3))


# ------------------------------------------------------------------------ failing early, and late


def _never_scored(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = neuroneval._core.score_matrix

    def counting(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(neuroneval._core, "score_matrix", counting)
    return calls


@pytest.mark.parametrize("kind", ["array", "sparse", "sparse file", "row-major file", "shards"])
def test_nan_in_a_late_block_fails_before_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    import scipy.sparse as sp

    a, c = data(k=12)
    a[350, 11] = np.nan
    source: Any = {
        "array": lambda: a,
        "sparse": lambda: sp.csr_matrix(np.nan_to_num(a, nan=0.0) * (np.abs(a) > 1) + np.where(np.isnan(a), np.nan, 0)),
        "sparse file": lambda: (sp.save_npz(tmp_path / "a.npz", sp.csr_matrix(a)), tmp_path / "a.npz")[1],
        "row-major file": lambda: (np.save(tmp_path / "a.npy", a), tmp_path / "a.npy")[1],
        "shards": lambda: write_shards(tmp_path / "shards", [a[:200], a[200:]]),
    }[kind]()
    calls = _never_scored(monkeypatch)
    out = tmp_path / "scores.parquet"
    check(
        lambda: neuroneval.evaluate(source, c, METRICS, out=out, block_units=3, progress=False),
        errors.NonFiniteError,
        "row 350, column 11",
    )
    assert calls == [] and not out.exists()
    assert not list(partial_dir(out).glob("part-*"))


def test_a_run_that_failed_on_bad_data_restarts_once_the_data_are_fixed(tmp_path: Path) -> None:
    """A column-major file is read block by block: its NaN is found late. The rerun with
    the corrected file starts over by itself (no ResumeError, no restart=True)."""
    a, c = data(k=12)
    bad = a.copy()
    bad[10, 10] = np.inf
    acts = tmp_path / "acts.npy"
    np.save(acts, np.asfortranarray(bad))
    out = tmp_path / "scores.parquet"
    check(
        lambda: neuroneval.evaluate(acts, c, METRICS, out=out, block_units=3, progress=False),
        errors.NonFiniteError,
        "row 10, column 10",
    )
    assert len(list(partial_dir(out).glob("part-*.parquet"))) == 3  # the blocks before it
    record = json.loads((partial_dir(out) / "failed.json").read_text())
    assert "row 10, column 10" in record["error"]
    # The same bad data again: the same error (it resumes, and meets the NaN again).
    check(lambda: neuroneval.evaluate(acts, c, METRICS, out=out, block_units=3, progress=False), errors.NonFiniteError)
    time.sleep(0.01)  # a new modification time for the fixed file
    np.save(acts, np.asfortranarray(a))
    report = _capture_notices()
    neuroneval.evaluate(acts, c, METRICS, out=out, block_units=3, progress=True)
    assert "starting" in report() and "stopped on bad input" in report()
    assert_frame_equal(pl.read_parquet(out), reference(a, c, block_units=3))
    assert not partial_dir(out).exists()


def _capture_notices() -> Callable[[], str]:
    """What `Progress.say` prints from now on (the tests run without a terminal)."""
    said: list[str] = []
    real = Progress.say

    def say(self: Progress, message: str) -> None:
        said.append(message)
        real(self, message)

    Progress.say = say  # type: ignore[method-assign]
    _restore.append(lambda: setattr(Progress, "say", real))
    return lambda: "\n".join(said)


_restore: list[Callable[[], None]] = []


@pytest.fixture(autouse=True)
def _restore_progress() -> Iterator[None]:
    yield
    while _restore:
        _restore.pop()()


def test_a_changed_run_without_a_failure_still_needs_restart(tmp_path: Path) -> None:
    a, c = data(k=12)
    out = tmp_path / "scores.parquet"
    with pytest.raises(KeyboardInterrupt):
        real = neuroneval._core.score_matrix
        calls = [0]

        def interrupted(*args: Any, **kw: Any) -> Any:
            calls[0] += 1
            if calls[0] == 2:
                raise KeyboardInterrupt
            return real(*args, **kw)

        neuroneval._core.score_matrix = interrupted
        try:
            neuroneval.evaluate(a, c, METRICS, out=out, block_units=3, progress=False)
        finally:
            neuroneval._core.score_matrix = real
    check(
        lambda: neuroneval.evaluate(a, c, ["auprc"], out=out, block_units=3, progress=False),
        errors.ResumeError,
        "restart=True",
    )


def test_scratch_copy_is_reused_on_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, _ = data(k=12)
    np.save(tmp_path / "a.npy", a)
    acts = open_activations(tmp_path / "a.npy")
    bounds = [(0, 4), (4, 8), (8, 12)]
    scratch = tmp_path / "scratch"
    _BlockReader(acts, bounds, scratch, Progress(False))
    stamps = {p.name: p.stat().st_mtime_ns for p in scratch.iterdir()}

    def no_second_read(*_: Any, **__: Any) -> Any:  # pragma: no cover - reached only on a bug
        raise AssertionError("the file was read again")

    monkeypatch.setattr(Source, "row_chunks", no_second_read)
    reader = _BlockReader(acts, bounds, scratch, Progress(False))
    assert {p.name: p.stat().st_mtime_ns for p in scratch.iterdir()} == stamps
    np.testing.assert_array_equal(reader.read(1), a[:, 4:8])


# ------------------------------------------------------------------------ bad files, clear messages


def _manifest(d: Path, **fields: Any) -> Path:
    a, _ = data(n=40, k=3)
    write_shards(d, [a[:20], a[20:]])
    m = json.loads((d / "manifest.json").read_text())
    for key, value in fields.items():
        if value is _DELETE:
            m.pop(key)
        else:
            m[key] = value
    (d / "manifest.json").write_text(json.dumps(m))
    return d


_DELETE = object()
SHARDS = [{"file": "shard-00000.npy", "rows": 20}, {"file": "shard-00001.npy", "rows": 20}]


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"n_rows": 40.5}, "'n_rows' must be a non-negative integer"),
        ({"n_rows": "40"}, "'n_rows'"),
        ({"n_rows": None}, "'n_rows'"),
        ({"n_rows": True}, "'n_rows'"),
        ({"n_rows": -1}, "'n_rows'"),
        ({"n_columns": 3.0}, "'n_columns'"),
        ({"n_columns": [3]}, "'n_columns'"),
        ({"names": "abc"}, "'names' must be null or a list of strings"),
        ({"names": [1, 2, 3]}, "'names'"),
        ({"names": {"a": 1}}, "'names'"),
        ({"shards": None}, "'shards'"),
        ({"shards": "shard-00000.npy"}, "'shards'"),
        ({"shards": [None]}, "shard 0 must be an object"),
        ({"shards": [{"rows": 20}]}, "shard 0 needs a 'file' field"),
        ({"shards": [{"file": None}]}, "shard 0 needs a 'file' field"),
        ({"shards": [{"file": 3}]}, "shard 0 needs a 'file' field"),
        ({"shards": [SHARDS[0], {"file": "shard-00001.npy", "rows": 2.5}]}, "shard 1's 'rows'"),
        ({"layout": "sparse"}, "'layout'"),
        ({"layout": None}, "'layout'"),
        ({"n_rows": _DELETE}, "lacks the field 'n_rows'"),
        ({"shards": _DELETE}, "lacks the field 'shards'"),
        ({"format": "other"}, "is not a neuroneval-shards manifest"),
    ],
)
def test_manifest_fields_by_type(tmp_path: Path, fields: dict[str, Any], fragment: str) -> None:
    d = _manifest(tmp_path / "s", **fields)
    check(lambda: open_activations(d), errors.SourceError, fragment)
    check(lambda: neuroneval.compute(d, np.ones((40, 1)), ["auprc"]), errors.SourceError, fragment)


def test_manifest_in_the_cli(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    d = _manifest(tmp_path / "s", names="abc")
    np.save(tmp_path / "c.npy", np.ones((40, 1)))
    code, _, err = run(["score", d, tmp_path / "c.npy", "--out", tmp_path / "o.parquet"], capfd)
    assert_one_line_error(code, err, 2, "'names'")


def _triplets(d: Path, row: Any, unit: Any, value: Any, shape: tuple[int, int] = (6, 2)) -> Path:
    write_triplet_shards(d, [([0], [0], [1.0])], shape=shape)
    np.savez(d / "shard-00000.npz", row=row, unit=unit, value=value)
    return d


@pytest.mark.parametrize(
    "row, unit, value, cls, fragment",
    [
        (np.array([0.5, 2.5]), np.array([0, 1]), np.array([1.0, 2.0]), errors.DTypeError, "integer indices; found 0.5"),
        (np.array([0, 2]), np.array([0.0, 1.5]), np.array([1.0, 2.0]), errors.DTypeError, "found 1.5"),
        (np.array([0, 2]), np.array([0, 1]), np.array([1 + 1j, 2.0]), errors.DTypeError, "complex"),
        (np.array([0, 2]), np.array([0, 1]), np.array(["a", "b"]), errors.DTypeError, "values"),
        (np.array([0, 2]), np.array([0, 1]), np.ones((2, 2)), errors.ShapeError, "'value' must be a 1-D array"),
        (np.ones((2, 1), np.int64), np.array([0, 1]), np.array([1.0, 2.0]), errors.ShapeError, "'row'"),
        (np.array([True, False]), np.array([0, 1]), np.array([1.0, 2.0]), errors.DTypeError, "bool"),
        (np.array([0, 9]), np.array([0, 1]), np.array([1.0, 2.0]), errors.ShapeError, "row index 9"),
        (np.array([2**64 - 1], np.uint64), np.array([0]), np.array([1.0]), errors.ShapeError, "18446744073709551615"),
    ],
)
def test_triplet_shards_by_type(
    tmp_path: Path, row: Any, unit: Any, value: Any, cls: type[Exception], fragment: str
) -> None:
    d = _triplets(tmp_path / "t", row, unit, value)
    check(lambda: open_activations(d), cls, fragment)


def test_corrupt_triplet_npz(tmp_path: Path) -> None:
    d = _triplets(tmp_path / "t", np.array([0]), np.array([0]), np.array([1.0]))
    (d / "shard-00000.npz").write_bytes(b"PK\x03\x04 not really a zip file" * 10)
    check(lambda: open_activations(d), errors.SourceError, "shard-00000.npz", "is not an .npz")


def test_triplet_values_as_pickled_objects_are_refused(tmp_path: Path) -> None:
    d = _triplets(tmp_path / "t", np.array([0]), np.array([0]), np.array([{"x": 1}], dtype=object))
    check(lambda: open_activations(d), errors.SourceError, "shard-00000.npz")


def test_paths_that_are_not_files(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    a, c = data(n=40, k=3)
    np.save(tmp_path / "c.npy", c)
    loop = tmp_path / "loop.npy"
    os.symlink(loop, loop)
    dangling = tmp_path / "dangling.npy"
    os.symlink(tmp_path / "gone.npy", dangling)
    as_dir = tmp_path / "table.csv"
    as_dir.mkdir()
    shards = write_shards(tmp_path / "s", [a[:20], a[20:]])
    (shards / "shard-00001.npy").unlink()
    (shards / "shard-00001.npy").mkdir()
    names_dir = tmp_path / "names"
    names_dir.mkdir()
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: neuroneval.compute(loop, c), "is a symbolic link that loops"),
        (lambda: neuroneval.compute(dangling, c), "gone.npy, which does not exist"),
        (lambda: neuroneval.compute(a, as_dir), "is a directory"),
        (lambda: open_activations(shards), "shard-00001.npy listed in"),
        (lambda: open_activations(shards), "is a directory"),
        (lambda: open_activations(a, unit_names=names_dir), "is a directory"),
        (lambda: read_pairs(as_dir), "is a directory"),
        (lambda: read_pairs(loop), "loops"),
    ]
    for call, fragment in cases:
        check(call, errors.SourceError, fragment)
    out = tmp_path / "o.parquet"
    for argv, fragment in [
        (["score", loop, tmp_path / "c.npy", "--out", out], "loops"),
        (["score", shards, tmp_path / "c.npy", "--out", out], "is a directory"),
        (["score", tmp_path / "c.npy", as_dir, "--out", out], "is a directory"),
        (["score", tmp_path / "c.npy", tmp_path / "c.npy", "--out", out, "--unit-names", names_dir], "is a directory"),
    ]:
        code, _, err = run(argv, capfd)
        assert_one_line_error(code, err, 2, fragment)


# ------------------------------------------------------------------------ loose types


@pytest.mark.parametrize(
    "rows, fragment",
    [
        ("2.9,0", "found 2.9"),
        ("0,1.5", "found 1.5"),
        ("true,0", "integer indices"),
        ("a,0", "integer indices"),
        ("1e30,0", "1000000000000000019884624838656, beyond any matrix"),
    ],
)
def test_pairs_csv_is_not_truncated(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], rows: str, fragment: str
) -> None:
    a, c = data(n=40, k=3)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "c.npy", c)
    p = tmp_path / "pairs.csv"
    p.write_text(f"unit,concept\n{rows}\n")
    cls = {"integer indices": errors.SourceError, "found": errors.DTypeError, "1000": errors.PairIndexError}
    check(lambda: read_pairs(p), next(v for k, v in cls.items() if fragment.startswith(k)), fragment)
    code, _, err = run(["score", tmp_path / "a.npy", tmp_path / "c.npy", "--out", tmp_path / "o.parquet",
                        "--pairs", p], capfd)  # fmt: skip
    assert_one_line_error(code, err, 2, fragment)
    assert not (tmp_path / "o.parquet").exists()


def test_whole_float_pairs_are_the_same_pairs(tmp_path: Path) -> None:
    a, c = data(n=40, k=3)
    p = tmp_path / "pairs.csv"
    p.write_text("unit,concept\n2.0,1\n0,4.0\n")
    assert read_pairs(p).tolist() == [[2, 1], [0, 4]]
    got = neuroneval.compute(a, c, ["auprc"], pairs=read_pairs(p))["auprc"]
    full = neuroneval.compute(a, c, ["auprc"])["auprc"]
    assert got.tolist() == [full[2, 1], full[0, 4]]


@pytest.mark.parametrize(
    "pairs, cls, fragment",
    [
        (np.array([[2**64 - 1, 0]], dtype=np.uint64), errors.PairIndexError, "18446744073709551615"),
        (np.array([[0.5, 0]]), errors.DTypeError, "found 0.5"),
        (np.array([[True, False]]), errors.DTypeError, "bool"),
        (np.array([[1 + 0j, 0]]), errors.DTypeError, "complex"),
        (np.array([["0", "0"]]), errors.DTypeError, "<U1"),
        ([[0, 1], [2]], errors.ShapeError, "rectangular"),
        (np.array([[np.nan, 0]]), errors.DTypeError, "nan"),
    ],
)
def test_pair_arrays_by_type(tmp_path: Path, pairs: Any, cls: type[Exception], fragment: str) -> None:
    a, c = data(n=40, k=3)
    check(lambda: neuroneval.compute(a, c, ["auprc"], pairs=pairs), cls, fragment)
    if isinstance(pairs, np.ndarray) and pairs.dtype.kind in "uifb":
        np.save(tmp_path / "pairs.npy", pairs)
        with pytest.raises(errors.InvalidInputError):
            read_pairs(tmp_path / "pairs.npy", n_units=3, n_concepts=5)


def test_huge_concept_table_index_is_reported_as_written(tmp_path: Path) -> None:
    p = tmp_path / "c.csv"
    pl.DataFrame({"input": [0.0, 1e30], "concept": ["a", "b"], "probability": [1.0, 1.0]}).write_csv(p)
    msg = check(lambda: neuroneval.compute(np.ones((4, 1)), p), errors.ShapeError, "1000000000000000019884624838656")
    assert "-9223372036854775808" not in msg


@pytest.mark.parametrize(
    "x, cls, fragment",
    [
        (np.ones((4, 2), np.complex128), errors.DTypeError, "complex"),
        (np.array([["a", "b"]] * 4), errors.DTypeError, "<U1"),
        (np.array([[None, 1.0]] * 4, dtype=object), errors.DTypeError, "object"),
        ([[1.0, 2.0], [3.0]], errors.ShapeError, "rectangular"),
        (np.ones((4, 2), "datetime64[s]"), errors.DTypeError, "datetime64"),
    ],
)
def test_activations_by_type(x: Any, cls: type[Exception], fragment: str) -> None:
    c = np.ones((4, 1))
    check(lambda: neuroneval.compute(x, c, ["auprc"]), cls, fragment)
    check(lambda: neuroneval.compute(np.ones((4, 2)), x, ["auprc"]), cls, fragment)


def test_complex_sparse_values_are_refused() -> None:
    import scipy.sparse as sp

    m = sp.csr_matrix(np.array([[1 + 2j, 0], [0, 1]]))
    check(lambda: neuroneval.compute(m, np.ones((2, 1)), ["auprc"]), errors.DTypeError, "complex")


torch = pytest.importorskip("torch") if os.environ.get("NEURONEVAL_NO_TORCH") is None else None


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_tensors_are_refused(dtype: str) -> None:
    assert torch is not None
    t = torch.ones((4, 2), dtype=getattr(torch, dtype))
    check(lambda: neuroneval.compute(t, np.ones((4, 1)), ["auprc"]), errors.DTypeError, "complex")


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "bfloat16", "float16"])
def test_narrow_float_tensors_widen_exactly(dtype: str) -> None:
    assert torch is not None
    if not hasattr(torch, dtype):
        pytest.skip(f"this torch has no {dtype}")
    rng = np.random.default_rng(1)
    t = torch.tensor(rng.normal(size=(50, 3)), dtype=torch.float32).to(getattr(torch, dtype))
    c = (rng.random((50, 2)) < 0.3).astype(np.float64)
    widened = t.to(torch.float64).numpy()
    got = neuroneval.compute(t, c, ["auprc", "correlation"])
    want = neuroneval.compute(widened, c, ["auprc", "correlation"])
    for name in got:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6)


@pytest.mark.parametrize("names, fragment", [([1.5, 2.0, 3.0], "entry 0 is 1.5"), ([None, "b", "c"], "entry 0"),
                                            (b"abc", "sequence"), ([True, "b", "c"], "entry 0")])  # fmt: skip
def test_unit_names_by_type(names: Any, fragment: str) -> None:
    check(lambda: open_activations(np.ones((4, 3)), unit_names=names), errors.ParameterError, fragment)


def test_keep_and_block_units_by_type() -> None:
    a, c = data(n=40, k=3)
    for kw, fragment in [
        ({"keep": True}, "keep"),
        ({"keep": 1.0}, "keep"),
        ({"keep": "best"}, "keep"),
        ({"keep": 0}, "keep"),
        ({"block_units": 2.0}, "block_units"),
        ({"block_units": True}, "block_units"),
        ({"block_units": "2"}, "block_units"),
    ]:
        check(lambda kw=kw: neuroneval.evaluate(a, c, METRICS, progress=False, **kw), errors.ParameterError, fragment)


def test_scratch_that_is_not_a_directory(tmp_path: Path) -> None:
    a, c = data(n=40, k=3)
    check(
        lambda: neuroneval.evaluate(a, c, METRICS, scratch=tmp_path / "nope", progress=False),
        errors.ParameterError,
        "scratch",
    )


def test_unknown_command_is_one_line(capfd: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["nosuch"], capfd)
    assert_one_line_error(code, err, 2, "invalid choice: 'nosuch'")
    code, _, err = run(["score"], capfd)
    assert_one_line_error(code, err, 2, "required", "neuroneval score --help")


@pytest.mark.parametrize(
    "argv, target",
    [
        (["meta", "acts.npy", "concepts.csv", "--truth", "truth.npy", "--out", "concepts.csv"], "concepts.csv"),
        (["meta", "acts.npy", "concepts.csv", "--truth", "truth.npy", "--out", "./x/../concepts.csv"], "concepts.csv"),
        (["crowd", "aggregate", "ratings.csv", "--plan", "plan.parquet", "--out", "ratings.csv"], "ratings.csv"),
        (["crowd", "aggregate", "ratings.csv", "--plan", "plan.parquet", "--out", "plan.parquet"], "plan.parquet"),
        (["crowd", "estimate", "--plan", "plan.parquet", "--labels", "ratings.csv", "--out", "plan.parquet"],
         "plan.parquet"),
        (["score", "acts.npy", "concepts.csv", "--out", "link.npy"], "acts.npy"),
    ],
)  # fmt: skip
def test_every_command_refuses_an_output_that_is_an_input(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], target: str
) -> None:
    """The command line checks every output against every existing path among its arguments
    before it reads anything (a symbolic link to an input is that input)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    for name in ("acts.npy", "concepts.csv", "truth.npy", "ratings.csv", "plan.parquet"):
        (tmp_path / name).write_text(f"the input {name}")
    os.symlink(tmp_path / "acts.npy", tmp_path / "link.npy")
    code, out, err = run(argv, capfd)
    assert out == ""
    assert_one_line_error(code, err, 2, "is also an input")
    assert (tmp_path / target).read_text() == f"the input {target}"


@pytest.mark.parametrize(
    "kw, cls, fragment",
    [
        ({"unit_names": np.array("u")}, errors.ParameterError, "unit_names must be a sequence"),
        ({"concept_names": np.array(3)}, errors.ParameterError, "concept_names must be a sequence"),
        ({"metrics": np.array("auprc")}, errors.UnknownMetricError, "metrics must be"),
        ({"metrics": 5}, errors.UnknownMetricError, "metrics must be"),
        ({"metrics": [["auprc"]]}, errors.UnknownMetricError, "unknown metric"),
        ({"scratch": True}, errors.ParameterError, "scratch"),
        ({"scratch": b"/tmp"}, errors.ParameterError, "scratch"),
    ],
)
def test_evaluate_arguments_by_type(kw: dict[str, Any], cls: type[Exception], fragment: str) -> None:
    a, c = data(n=40, k=3, t=2)
    check(lambda: neuroneval.evaluate(a, c, **{"metrics": METRICS, **kw}, progress=False), cls, fragment)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "int32", "uint8"])
def test_pair_tensors(dtype: str) -> None:
    """Pairs as tensors of any real dtype: whole values are the same pairs, never truncated."""
    assert torch is not None
    a, c = data(n=40, k=3, t=2)
    pairs = torch.tensor([[2, 1], [0, 0]]).to(getattr(torch, dtype))
    got = neuroneval.compute(a, c, ["auprc"], pairs=pairs)["auprc"]
    full = neuroneval.compute(a, c, ["auprc"])["auprc"]
    assert got.tolist() == [full[2, 1], full[0, 0]]
    if pairs.is_floating_point():
        check(lambda: neuroneval.compute(a, c, ["auprc"], pairs=pairs + 0.5), errors.DTypeError, "found 2.5")


def test_too_many_threads_in_the_cli(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """More threads than CPUs: capped, said in one line, and the scores are the same."""
    out = tmp_path / "o.parquet"
    argv = ["score", files["acts"], files["concepts"], "--out", out, "--metrics", "auprc", "--quiet"]
    # A value no other test of this process asks for: the core warns once per value.
    code, _, err = run([*argv, "--threads", 123_457], capfd)
    assert code == 0
    assert err.splitlines() == [
        f"neuroneval: warning: NEURONEVAL_NUM_THREADS=123457 exceeds the {neuroneval.num_threads()} CPUs "
        f"of this machine; using {neuroneval.num_threads()}"
    ]
    assert_frame_equal(
        pl.read_parquet(out), neuroneval.evaluate(files["acts"], files["concepts"], ["auprc"], progress=False)
    )


def test_metric_functions_refuse_ragged_vectors() -> None:
    from neuroneval import metrics as nm

    check(lambda: nm.recall([1.0, [2.0]], [1.0, 0.0]), errors.ShapeError, "rectangular")
