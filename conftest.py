"""Test collection: the doctests of modules that import torch at their top need torch, an
optional extra; without it they are not collected (found by reading each module, not listed).

Row-major files of several blocks take the scratch copy in every test (the path of a file
too large for memory), unless a test asks for the in-memory read (`whole_file_reads`); and
every `.npy` file is read past the page cache, as large files are.

SmolLM2 is read from its GGUF file once per run: the model cache (`neuroneval.label.gguf`) is a
folder of this run, shared by every worker and the CLI's subprocesses, and removed at the end.

The test files run longest first, by the seconds tests/file_seconds.json records for each
(`--record-file-seconds` writes that table: `make test-times`)."""

import ast
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
PACKAGE = Path(__file__).parent / "python" / "neuroneval"


def _imports_torch_at_top(path: Path) -> bool:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch" and not node.level:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Without torch: the package's modules that import it at their top (their doctests)."""
    if HAS_TORCH or collection_path.suffix != ".py" or PACKAGE not in collection_path.parents:
        return None
    return True if _imports_torch_at_top(collection_path) else None


_MODEL_CACHE = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller's environment is already its own
    cache = Path(tempfile.mkdtemp(prefix="neuroneval-model-cache-"))
    os.environ["NEURONEVAL_MODEL_CACHE"] = str(cache)
    config.stash[_MODEL_CACHE] = cache
    if config.getoption("--record-file-seconds"):
        config.pluginmanager.register(_FileSeconds(FILE_SECONDS), "file-seconds")


def pytest_unconfigure(config: pytest.Config) -> None:
    cache = config.stash.get(_MODEL_CACHE, None)
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(autouse=True)
def _scratch_for_small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    from neuroneval import _direct, _evaluate

    monkeypatch.setattr(_evaluate, "WHOLE_FILE_BYTES", 0)
    monkeypatch.setattr(_direct, "DIRECT_READ_BYTES", 0)


@pytest.fixture
def whole_file_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row-major files of up to 1 GiB are read whole into memory, as by default."""
    from neuroneval import _evaluate

    monkeypatch.setattr(_evaluate, "WHOLE_FILE_BYTES", 1 << 30)


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Torch on one thread for a module's tests (`pytestmark = pytest.mark.usefixtures("one_thread")`): on this 2-CPU
    machine two spinning OpenMP threads make each forward pass several times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def judge_servers() -> Iterator[Any]:
    """`judge_servers(judge, **options)` starts a `JudgeServer` of `judge` on a free port; every server
    started is stopped after the test."""
    servers: list[Any] = []

    def start(judge: Any, **options: Any) -> Any:
        from neuroneval import label as lb

        server = lb.JudgeServer(judge, port=0, **options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


FILE_SECONDS = Path(__file__).parent / "tests" / "file_seconds.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-file-seconds",
        action="store_true",
        help="record each test file's seconds (setup, call and teardown of its tests) in "
        f"{FILE_SECONDS.relative_to(FILE_SECONDS.parents[1])}, the table that orders the files of later runs "
        "(`make test-times`)",
    )


def _recorded_seconds(path: Path) -> dict[str, float]:
    """The table of seconds per test file at `path`; empty when it is missing or unreadable."""
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(table, dict):
        return {}
    return {str(k): float(v) for k, v in table.items() if isinstance(v, (int, float))}


def _file_of(nodeid: str) -> str:
    """A test's file as its node id names it (relative to the root): the table's key."""
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest test files first, by the seconds each took in a recorded run
    (tests/file_seconds.json; each file keeps its tests' order). On several CPUs, one file per
    worker at a time (`make test`, with xdist's own reordering by test count turned off), the
    long files start early and the short ones fill the end, instead of a long file running alone
    at the end. A file the table does not know goes first if it holds a slow test, else last."""
    seconds = _recorded_seconds(FILE_SECONDS)
    longest = max(seconds.values(), default=0.0)
    slow_files = {_file_of(item.nodeid) for item in items if item.get_closest_marker("slow") is not None}

    def expected(item: pytest.Item) -> float:
        name = _file_of(item.nodeid)
        if name in seconds:
            return seconds[name]
        return longest + 1.0 if name in slow_files else 0.0

    items.sort(key=lambda item: -expected(item))


class _FileSeconds:
    """Sums each file's test durations as the reports arrive (from every xdist worker, on the
    controller), and writes them when every test has run, into the table of the files it did not
    run (atomically: a temporary file renamed)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = _file_of(report.nodeid)
        self.seconds[name] = self.seconds.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) or not self.seconds:
            return  # interrupted, or no test ran (--collect-only): the table keeps the last whole run's seconds
        # the files this run did not reach keep their recorded seconds
        merged = {**_recorded_seconds(self.out), **{name: round(s, 1) for name, s in self.seconds.items()}}
        table = dict(sorted(merged.items(), key=lambda kv: (-kv[1], kv[0])))
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.out)
