"""`neuroneval.distributed.evaluate`: `neuroneval.evaluate` as Ray tasks, the same file.

The reference is `neuroneval.evaluate`'s file on the same data (all metrics). A local Ray
with 2 CPUs is shared by most tests; the worker-kill test runs a real two-node cluster
(`ray start --head` and `ray start --address`, one CPU each, as subprocesses) and kills the
worker process of a running task with SIGKILL: Ray retries the task and the file is still
exactly the single-process one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import neuroneval
import numpy as np
import polars as pl
import pytest
from neuroneval import distributed, errors
from neuroneval._evaluate import partial_dir
from neuroneval.sources import write_shards
from polars.testing import assert_frame_equal

pytestmark = pytest.mark.slow  # Ray clusters started

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

METRICS = list(neuroneval.METRICS)
N, K, T = 2000, 10, 6
RAY_BIN = Path(sys.executable).with_name("ray")


def make_data(n: int = N, k: int = K, t: int = T, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = (np.round(rng.normal(size=(n, k)) * 8) / 8).astype(np.float32)
    a[:, 1] = 0.5  # constant unit
    c = (rng.random((n, t)) < 0.2).astype(np.float64)
    c[:, 1] = np.round(rng.random(n) * 4) / 4
    c[:, 2] = (a[:, 0] > 1).astype(np.float64)
    return a, c


def reference(tmp_path: Path, acts: Any, concepts: Any, **kw: Any) -> pl.DataFrame:
    out = neuroneval.evaluate(acts, concepts, METRICS, out=tmp_path / "reference.parquet", progress=False, **kw)
    return pl.read_parquet(out)


@pytest.fixture(scope="class")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.mark.usefixtures("local_ray")
class TestLocal:
    @pytest.mark.parametrize("source", ["npy", "fortran-npy", "shards"])
    @pytest.mark.parametrize("keep", ["all", 3])
    def test_equals_evaluate(self, tmp_path: Path, source: str, keep: Any) -> None:
        a, c = make_data()
        if source.endswith("npy"):  # a column-major file: each task reads one contiguous range
            acts: Path = tmp_path / "acts.npy"
            np.save(acts, np.asfortranarray(a) if source == "fortran-npy" else a)
        else:
            acts = write_shards(tmp_path / "acts", [a[:700], a[700:1500], a[1500:]])
        expected = reference(tmp_path, acts, c, keep=keep)
        out = distributed.evaluate(
            acts, c, METRICS, out=tmp_path / "d.parquet", keep=keep, units_per_task=3, progress=False
        )
        assert out == (tmp_path / "d.parquet").resolve()
        assert_frame_equal(pl.read_parquet(out), expected)
        assert not partial_dir(out).exists()

    def test_in_memory_and_names(self, tmp_path: Path) -> None:
        a, c = make_data()
        names = {"unit_names": [f"u{i}" for i in range(K)], "concept_names": [f"c{j}" for j in range(T)]}
        expected = reference(tmp_path, a, c, keep=2, **names)
        out = distributed.evaluate(a, c, METRICS, out=tmp_path / "d.parquet", keep=2, progress=False, **names)
        assert_frame_equal(pl.read_parquet(out), expected)

    def test_cli(self, tmp_path: Path) -> None:
        from neuroneval.cli import main

        a, c = make_data()
        np.save(tmp_path / "acts.npy", a)
        np.save(tmp_path / "concepts.npy", c)
        files = [str(tmp_path / "acts.npy"), str(tmp_path / "concepts.npy")]
        out = tmp_path / "d.parquet"
        assert main(["score", *files, "--out", str(out), "--top", "2", "--block-units", "4", "--ray", "--quiet"]) == 0
        assert_frame_equal(pl.read_parquet(out), reference(tmp_path, tmp_path / "acts.npy", c, keep=2))
        assert main(["score", *files, "--out", str(out), "--pairs", "p.csv", "--ray", "--quiet"]) == 2

    def test_restarted_driver_skips_finished_parts(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        a, c = make_data()
        acts = tmp_path / "acts.npy"
        np.save(acts, a)
        out = tmp_path / "d.parquet"
        submitted: list[int] = []
        submit = distributed._submit

        def counting(task: Any, shared: Any, block: int, threads: int) -> Any:
            submitted.append(block)
            return submit(task, shared, block, threads)

        def die(*_: Any) -> None:
            raise KeyboardInterrupt  # the driver is stopped after every task has finished

        monkeypatch.setattr(distributed, "_submit", counting)
        monkeypatch.setattr("neuroneval._evaluate.merge_parts", die)  # distributed merges with it
        with pytest.raises(KeyboardInterrupt):
            distributed.evaluate(acts, c, METRICS, out=out, units_per_task=2, progress=False)
        assert sorted(submitted) == [0, 1, 2, 3, 4]
        parts = sorted(partial_dir(out).glob("part-*.parquet"))
        assert len(parts) == 5
        for p in parts[1::2]:  # blocks 1 and 3 are lost
            p.unlink()
        monkeypatch.undo()
        monkeypatch.setattr(distributed, "_submit", counting)
        submitted.clear()
        with pytest.raises(errors.ResumeError):  # other arguments against the unfinished run
            distributed.evaluate(acts, c, METRICS, out=out, units_per_task=2, alpha=0.01, progress=False)
        assert submitted == []
        distributed.evaluate(acts, c, METRICS, out=out, units_per_task=2, progress=False)
        assert sorted(submitted) == [1, 3]
        assert_frame_equal(pl.read_parquet(out), reference(tmp_path, acts, c, block_units=2))

    def test_finishes_a_run_begun_by_evaluate(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from neuroneval import _evaluate

        a, c = make_data()
        acts = tmp_path / "acts.npy"
        np.save(acts, a)
        out = tmp_path / "d.parquet"

        def die(*_: Any) -> None:
            raise KeyboardInterrupt

        with monkeypatch.context() as m:
            m.setattr(_evaluate, "merge_parts", die)
            with pytest.raises(KeyboardInterrupt):
                neuroneval.evaluate(acts, c, METRICS, out=out, block_units=3, progress=False)
        (partial_dir(out) / "part-000002.parquet").unlink()
        submitted: list[int] = []
        submit = distributed._submit
        monkeypatch.setattr(distributed, "_submit", lambda *x: submitted.append(x[2]) or submit(*x))
        distributed.evaluate(acts, c, METRICS, out=out, units_per_task=3, progress=False)
        assert submitted == [2]  # the same run.json: evaluate's parts are reused
        assert_frame_equal(pl.read_parquet(out), reference(tmp_path, acts, c))


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"metrics": ["nope"]}, errors.NeuronEvalError),
        ({"alpha": 2.0}, errors.NeuronEvalError),
        ({"keep": 0}, errors.NeuronEvalError),
        ({"units_per_task": 0}, errors.NeuronEvalError),
        ({"concepts": "bad-concepts"}, errors.NeuronEvalError),
        ({"concepts": "short"}, errors.ShapeError),
        ({"out": "missing-dir/x.parquet"}, errors.OutputError),
        ({"activations": "missing.npy"}, errors.SourceError),
    ],
)
def test_bad_input_raises_before_submission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], error: type[Exception]
) -> None:
    a, c = make_data(n=50)
    bad_c = c.copy()
    bad_c[3, 0] = 1.5
    kw: dict[str, Any] = {"activations": a, "concepts": c, "metrics": METRICS, "out": tmp_path / "x.parquet"}
    kw.update(change)
    if isinstance(kw["concepts"], str):
        kw["concepts"] = {"bad-concepts": bad_c, "short": c[:40]}[kw["concepts"]]
    if isinstance(kw["out"], str):
        kw["out"] = tmp_path / kw["out"]
    if isinstance(kw["activations"], str):
        kw["activations"] = tmp_path / kw["activations"]

    def fail(*_: Any) -> None:  # pragma: no cover - reached only on a bug
        raise AssertionError("a task was submitted")

    monkeypatch.setattr(distributed, "_submit", fail)
    monkeypatch.setattr(distributed, "_import_ray", fail)  # not even Ray is started
    single = {key: v for key, v in kw.items() if key != "units_per_task"}
    if "units_per_task" in kw:
        single["block_units"] = kw["units_per_task"]
    with pytest.raises(error) as expected:
        neuroneval.evaluate(progress=False, **single)
    with pytest.raises(error) as got:
        distributed.evaluate(progress=False, **kw)
    assert type(got.value) is type(expected.value)
    assert str(got.value) == str(expected.value)
    assert not partial_dir(kw["out"]).exists()


def test_import_does_not_import_ray() -> None:
    code = "import sys, neuroneval, neuroneval.distributed; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray(*args: str, env: dict[str, str]) -> None:
    subprocess.run([str(RAY_BIN), *args], check=True, env=env, capture_output=True, timeout=120)


def _running_task_pids() -> list[int]:
    """Ray worker processes running a scoring task now (Ray titles them `ray::<task>`)."""
    pids = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if cmd.startswith("ray::_score_part"):
            pids.append(int(p.info["pid"]))
    return pids


def test_two_node_cluster_survives_a_killed_worker(tmp_path: Path) -> None:
    if not RAY_BIN.is_file():
        pytest.skip("the ray command is not installed next to this Python")
    a, c = make_data(n=300_000, k=8, t=10, seed=1)
    acts = tmp_path / "acts.npy"
    np.save(acts, a)
    expected = reference(tmp_path, acts, c)
    port = _free_port()
    env = dict(os.environ)
    address = f"127.0.0.1:{port}"
    killed: list[int] = []
    try:
        _ray("start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=1",
             "--include-dashboard=false", "--disable-usage-stats", env=env)  # fmt: skip
        _ray("start", f"--address={address}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
             "--disable-usage-stats", env=env)  # fmt: skip

        def kill_one() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not killed:
                pids = _running_task_pids()
                if pids:
                    time.sleep(0.2)  # in the middle of the task
                    if pids[0] in _running_task_pids():  # still running it
                        os.kill(pids[0], signal.SIGKILL)
                        killed.append(pids[0])
                time.sleep(0.02)

        killer = threading.Thread(target=kill_one, daemon=True)
        killer.start()
        out = distributed.evaluate(
            acts, c, METRICS, out=tmp_path / "d.parquet", address=address, units_per_task=2, progress=False
        )
        killer.join()
        assert killed, "no running task was found to kill"
        assert not psutil.pid_exists(killed[0]) or psutil.Process(killed[0]).status() == psutil.STATUS_ZOMBIE
        assert_frame_equal(pl.read_parquet(out), expected)
    finally:
        subprocess.run([str(RAY_BIN), "stop", "--force"], env=env, capture_output=True, timeout=120)
