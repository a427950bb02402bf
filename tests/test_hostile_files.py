"""What a file names, and what a command may write: paths that leave their folder, JSON that nests
deeper than the parser goes, outputs on a read-only file system, Ctrl-C in a command's first instant.

- A path read from a file (a shard manifest's `file`, a results folder's `inputs/meta.json`, an
  extraction's layer `directory`) stays inside its folder: `..`, an absolute path or a link that
  leads out is a `SourceError` naming the file, and the outside file's content appears nowhere.
- Every JSON reader outside `interop` (the interop readers have their own tests) turns a
  100,000-deep document into one `SourceError` naming the file; the CLI prints one line, exit 2.
- An output that cannot be written is an I/O failure: exit 1 for every command with an output,
  found before any work (the list of commands is read from the parser, so a new output option
  without a case here fails the test).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import neuroneval
import numpy as np
import polars as pl
import pytest
from cli_helpers import assert_one_line_error, run
from fs_helpers import tmpfs
from neuroneval import errors
from neuroneval.cli.app import parser
from neuroneval.cli.common import OutputPath
from neuroneval.files import inside, parse_json, read_json
from neuroneval.sources import open_activations, write_shards

SECRET = "TOP-SECRET-0xC0FFEE"
DEEP = "[" * 100_000


def assert_secret_absent(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the one under test, holding files a hostile manifest may point at."""
    d = tmp_path / "outside"
    d.mkdir()
    np.save(d / "outside.npy", np.full((6, 2), 7.0))
    (d / "secret.json").write_text(json.dumps([SECRET, SECRET]))
    return d


# --------------------------------------------------------------------------- the rule itself


@pytest.mark.parametrize("name", ["../x.npy", "a/../../x.npy", "/etc/passwd", "", "a\0b", 3, None])
def test_inside_refuses_names_that_leave_or_are_not_names(tmp_path: Path, name: Any) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(errors.SourceError, match="manifest.json"):
        inside(tmp_path / "a", name, named_in=tmp_path / "a" / "manifest.json")


def test_inside_keeps_names_inside_and_refuses_a_link_out(tmp_path: Path, outside: Path) -> None:
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    assert inside(d, "sub/../x.npy", named_in=d / "m.json") == d / "sub/../x.npy"
    assert inside(d, "sub/y.npy", named_in=d / "m.json") == d / "sub" / "y.npy"
    (d / "link.npy").symlink_to(outside / "outside.npy")
    with pytest.raises(errors.SourceError, match="outside"):
        inside(d, "link.npy", named_in=d / "m.json")
    (d / "out").symlink_to(outside)  # a linked folder that leads out
    with pytest.raises(errors.SourceError, match="must stay inside its folder"):
        inside(d, "out/outside.npy", named_in=d / "m.json")


# --------------------------------------------------------------------------- shard manifests


def _shards_naming(tmp_path: Path, file: str) -> Path:
    a = np.arange(12.0).reshape(6, 2)
    d = write_shards(tmp_path / "shards", [a[:3], a[3:]])
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["shards"][1]["file"] = file
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


@pytest.mark.parametrize("kind", ["relative", "absolute", "link"])
def test_a_shard_manifest_cannot_read_a_file_outside_its_folder(
    tmp_path: Path, outside: Path, kind: str, capfd: pytest.CaptureFixture[str]
) -> None:
    target = outside / "outside.npy"
    name = {"relative": "../outside/outside.npy", "absolute": str(target), "link": "linked.npy"}[kind]
    d = _shards_naming(tmp_path, name)
    if kind == "link":
        (d / "linked.npy").symlink_to(target)
    with pytest.raises(errors.SourceError, match="must stay inside its folder") as info:
        open_activations(d)
    assert "manifest.json" in str(info.value)
    np.save(tmp_path / "concepts.npy", np.zeros((6, 1)))
    code, out, err = run(["score", d, tmp_path / "concepts.npy", "--out", tmp_path / "s.parquet"], capfd)
    assert_one_line_error(code, err, 2, "must stay inside its folder")
    assert not (tmp_path / "s.parquet").exists()


# --------------------------------------------------------------------------- the report's inputs


def _results(tmp_path: Path, meta: dict[str, Any]) -> Path:
    d = tmp_path / "results"
    (d / "inputs").mkdir(parents=True)
    pl.DataFrame({"unit": ["u0", "u1"], "concept": ["c0", "c0"], "correlation": [0.5, -0.2]}).write_parquet(
        d / "scores.parquet"
    )
    (d / "inputs" / "meta.json").write_text(json.dumps(meta))
    return d


@pytest.mark.parametrize("kind", ["relative", "absolute", "link"])
def test_a_results_folder_cannot_show_a_file_outside_it(
    tmp_path: Path, outside: Path, kind: str, capfd: pytest.CaptureFixture[str]
) -> None:
    from neuroneval.report.read import read_results

    secret = outside / "secret.json"
    name = {"relative": "../../outside/secret.json", "absolute": str(secret), "link": "texts.json"}[kind]
    d = _results(tmp_path, {"kind": "text", "file": name})
    if kind == "link":
        (d / "inputs" / "texts.json").symlink_to(secret)
    with pytest.raises(errors.SourceError, match="must stay inside its folder") as info:
        read_results(d)
    assert "meta.json" in str(info.value)
    assert_secret_absent(str(info.value))
    page = tmp_path / "page.html"
    code, out, err = run(["report", d, "-o", page], capfd)
    assert_one_line_error(code, err, 2, "must stay inside its folder")
    assert_secret_absent(out, err)
    assert not page.exists()
    # The same folder with its texts inside is read, and shows them: the refusal is of the path alone.
    shutil.copy(secret, d / "inputs" / "inside.json")
    (d / "inputs" / "meta.json").write_text(json.dumps({"kind": "text", "file": "inside.json"}))
    assert read_results(d).inputs.texts == [SECRET, SECRET]  # type: ignore[union-attr]


# --------------------------------------------------------------------------- extractions (torch)


@pytest.fixture(scope="module")
def extraction(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    from neuroneval.torch import extract

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    out = tmp_path_factory.mktemp("extraction") / "store"
    extract(model, [torch.randn(5, 4) for _ in range(2)], ["0"], out=out, progress=False, device="cpu")
    return out


@pytest.mark.parametrize("where", ["layer", "shard"])
def test_an_extraction_cannot_list_a_folder_or_shard_outside_it(
    tmp_path: Path, extraction: Path, outside: Path, where: str
) -> None:
    from neuroneval.torch import ActivationStore

    store = tmp_path / "store"
    shutil.copytree(extraction, store)
    info = json.loads((store / "extract.json").read_text())
    if where == "layer":
        shutil.copytree(store / info["layers"][0]["directory"], outside / "layer")
        info["layers"][0]["directory"] = "../outside/layer"
        (store / "extract.json").write_text(json.dumps(info))
        named_in = "extract.json"
    else:
        layer = store / info["layers"][0]["directory"]
        manifest = json.loads((layer / "manifest.json").read_text())
        manifest["shards"][0]["file"] = "../../outside/outside.npy"
        (layer / "manifest.json").write_text(json.dumps(manifest))
        named_in = "manifest.json"
    assert len(ActivationStore.open(extraction).layers) == 1  # the untouched copy opens
    with pytest.raises(errors.SourceError, match="must stay inside its folder") as info_:
        ActivationStore.open(store)
    assert named_in in str(info_.value)


def test_an_extraction_whose_layers_are_not_a_list_of_objects(tmp_path: Path, extraction: Path) -> None:
    from neuroneval.torch import ActivationStore

    store = tmp_path / "store"
    shutil.copytree(extraction, store)
    info = json.loads((store / "extract.json").read_text())
    for layers in ([{"name": "0", "directory": 3}], "0", [None]):
        info["layers"] = layers
        (store / "extract.json").write_text(json.dumps(info))
        with pytest.raises(errors.SourceError, match="'layers' must be a list"):
            ActivationStore.open(store)


# --------------------------------------------------------------------------- deep JSON


def test_read_json_names_the_file_for_each_failure(tmp_path: Path) -> None:
    cases = {
        "deep.json": (DEEP.encode(), "nests deeper than"),
        "bad.json": (b"{", "is not valid JSON"),
        "latin.json": (b'"\xff"', "is not UTF-8"),
        "digits.json": (b"1" * 5000, "is not valid JSON"),
    }
    for name, (content, fragment) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(errors.SourceError, match=fragment) as info:
            read_json(tmp_path / name)
        assert name in str(info.value)
    (tmp_path / "big.json").write_text("[1, 2, 3]")
    with pytest.raises(errors.SourceError, match="holds 9 bytes; a JSON file may hold at most 4"):
        read_json(tmp_path / "big.json", max_bytes=4)
    with pytest.raises(errors.SourceError, match="cannot read .*missing.json"):
        read_json(tmp_path / "missing.json")
    with pytest.raises(errors.SourceError, match="cannot read"):
        read_json(tmp_path)  # a directory
    assert parse_json(b'{"a": [1]}', "x") == {"a": [1]}


def _deep_manifest(tmp_path: Path) -> Path:
    d = write_shards(tmp_path / "shards", [np.ones((2, 2)), np.ones((2, 2))])
    (d / "manifest.json").write_text(DEEP)
    return d / "manifest.json"


def _deep_report_info(tmp_path: Path) -> Path:
    d = _results(tmp_path, {"kind": "text", "file": "texts.json"})
    (d / "inputs" / "texts.json").write_text('["a", "b"]')
    (d / "report.json").write_text(DEEP)
    return d / "report.json"


def _deep_inputs_meta(tmp_path: Path) -> Path:
    d = _results(tmp_path, {})
    (d / "inputs" / "meta.json").write_text(DEEP)
    return d / "inputs" / "meta.json"


def _deep_inputs_texts(tmp_path: Path) -> Path:
    d = _results(tmp_path, {"kind": "text", "file": "texts.json"})
    (d / "inputs" / "texts.json").write_text(DEEP)
    return d / "inputs" / "texts.json"


def _deep_comparison(tmp_path: Path) -> Path:
    d = _results(tmp_path, {"kind": "text", "file": "texts.json"})
    (d / "inputs").rename(tmp_path / "unused")
    (d / "comparison.json").write_text(DEEP)
    return d / "comparison.json"


def _circuit_run(tmp_path: Path) -> Path:
    from neuroneval.circuits import FRACTIONS, CircuitRun, MethodCurve, transformer_graph

    edges = transformer_graph(1, 1).n_edges
    sizes = np.minimum(np.arange(len(FRACTIONS)), edges)
    method = MethodCurve(
        "eap", np.linspace(-1.0, 1.0, edges), 1.0,
        signed_edges=sizes, signed_metric=np.linspace(0, 2, len(FRACTIONS)),
        absolute_edges=sizes, absolute_metric=np.linspace(0, 2, len(FRACTIONS)),
    )  # fmt: skip
    run_ = CircuitRun("m", "t", "patching", 1, 1, 2, 2, 1, 0, FRACTIONS, 3.0, 1.0, (method,))
    d = tmp_path / "run"
    run_.write(d)
    return d


def _deep_circuit_run(tmp_path: Path) -> Path:
    d = _circuit_run(tmp_path)
    (d / "circuit_run.json").write_text(DEEP)
    return d / "circuit_run.json"


def _deep_edge_scores(tmp_path: Path) -> Path:
    d = _circuit_run(tmp_path)
    (d / "scores" / "eap.json").write_text(DEEP)
    return d / "scores" / "eap.json"


DEEP_FILES = {
    "shard manifest": (_deep_manifest, lambda p: open_activations(p.parent), ["score", "{dir}", "{concepts}"]),
    "report.json": (_deep_report_info, lambda p: _report(p.parent), ["report", "{dir}"]),
    "inputs/meta.json": (_deep_inputs_meta, lambda p: _report(p.parent.parent), ["report", "{root}"]),
    "inputs texts": (_deep_inputs_texts, lambda p: _report(p.parent.parent), ["report", "{root}"]),
    "comparison.json": (_deep_comparison, lambda p: _report(p.parent), ["report", "{dir}"]),
    "circuit_run.json": (_deep_circuit_run, lambda p: _circuit(p.parent), ["circuits", "table", "{dir}"]),
    "scores/<method>.json": (_deep_edge_scores, lambda p: _circuit(p.parent.parent), ["circuits", "table", "{root}"]),
}


def _report(d: Path) -> Any:
    from neuroneval.report.read import read_results

    return read_results(d)


def _circuit(d: Path) -> Any:
    from neuroneval.circuits import read_circuit_run

    return read_circuit_run(d)


@pytest.mark.parametrize("which", list(DEEP_FILES))
def test_deep_json_is_one_source_error_naming_the_file(
    tmp_path: Path, which: str, capfd: pytest.CaptureFixture[str]
) -> None:
    make, read, argv = DEEP_FILES[which]
    path = make(tmp_path)
    with pytest.raises(errors.SourceError, match="nests deeper than") as info:
        read(path)
    assert str(path) in str(info.value)
    np.save(tmp_path / "concepts.npy", np.zeros((4, 1)))
    words = {"{dir}": path.parent, "{root}": path.parent.parent, "{concepts}": tmp_path / "concepts.npy"}
    argv = [words.get(a, a) for a in argv]
    if argv[0] == "score":
        argv += ["--out", tmp_path / "s.parquet"]
    if argv[0] == "report":
        argv += ["-o", tmp_path / "page.html"]
    code, out, err = run(argv, capfd)
    assert_one_line_error(code, err, 2, "nests deeper than", path.name)


def test_deep_json_in_a_clip_config_and_a_store(tmp_path: Path, extraction: Path) -> None:
    pytest.importorskip("open_clip")
    from neuroneval.label import ClipJudge

    (tmp_path / "open_clip_config.json").write_text(DEEP)
    (tmp_path / "tiny.pt").write_bytes(b"not read: the config is read first")
    with pytest.raises(errors.SourceError, match="nests deeper than"):
        ClipJudge("tiny", tmp_path / "tiny.pt", config=tmp_path / "open_clip_config.json")
    from neuroneval.torch import ActivationStore

    store = tmp_path / "store"
    shutil.copytree(extraction, store)
    (store / "extract.json").write_text(DEEP)
    with pytest.raises(errors.SourceError, match="holds no neuroneval extraction"):
        ActivationStore.open(store)


# --------------------------------------------------------------------------- sizes and indices beyond any matrix


def test_a_circuit_run_claiming_thousands_of_layers_is_refused_before_building(tmp_path: Path) -> None:
    from neuroneval.circuits import read_circuit_run
    from neuroneval.circuits.graph import MAX_EDGES, transformer_edge_count, transformer_graph

    d = _circuit_run(tmp_path)
    doc = json.loads((d / "circuit_run.json").read_text())
    doc["n_layers"] = 3000
    (d / "circuit_run.json").write_text(json.dumps(doc))
    with pytest.raises(errors.SourceError, match="3,000 layers of 1 heads has .* edges") as info:
        read_circuit_run(d)
    assert "circuit_run.json" in str(info.value)
    assert transformer_edge_count(3000, 1) > MAX_EDGES
    with pytest.raises(errors.ParameterError, match="at most"):
        transformer_graph(3000, 12)
    for layers, heads in [(1, 1), (2, 3), (5, 7), (12, 12)]:  # the closed form against the graph built
        assert transformer_edge_count(layers, heads) == transformer_graph(layers, heads).n_edges


@pytest.mark.parametrize(
    "pairs",
    [
        np.array([[2**64 - 1, 0]], dtype=np.uint64),
        np.array([[0, 2**63]], dtype=np.uint64),
        np.array([[2.0**64, 0]]),
        [[2**64 - 1, 0]],
    ],
)
def test_pairs_beyond_int64_are_pair_index_errors(pairs: Any) -> None:
    a = np.arange(12.0).reshape(4, 3)
    c = np.array([[1.0], [0.0], [1.0], [0.0]])
    with pytest.raises(errors.PairIndexError, match="beyond any matrix"):
        neuroneval.score(a, c, ["correlation"], pairs=pairs)


def test_a_pairs_file_beyond_int64_is_a_pair_index_error(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from neuroneval.indices import read_pairs

    np.save(tmp_path / "pairs.npy", np.array([[2**64 - 1, 0]], dtype=np.uint64))
    with pytest.raises(errors.PairIndexError, match="beyond any matrix"):
        read_pairs(tmp_path / "pairs.npy", n_units=3, n_concepts=1)
    np.save(tmp_path / "acts.npy", np.arange(12.0).reshape(4, 3))
    np.save(tmp_path / "concepts.npy", np.array([[1.0], [0.0], [1.0], [0.0]]))
    argv = ["score", tmp_path / "acts.npy", tmp_path / "concepts.npy", "--pairs", tmp_path / "pairs.npy"]
    code, out, err = run([*argv, "--out", tmp_path / "s.parquet"], capfd)
    assert_one_line_error(code, err, 2, "beyond any matrix")


# --------------------------------------------------------------------------- outputs that cannot be written


@pytest.fixture(scope="module")
def read_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder this process cannot write into: a read-only tmpfs (root ignores permissions),
    else a folder without write permission."""
    mount = tmp_path_factory.mktemp("ro")
    if os.geteuid() == 0:
        with tmpfs(mount, "ro,size=1m"):
            yield mount
        return
    mount.chmod(0o555)
    try:
        if os.access(mount, os.W_OK):
            pytest.skip("this process can write into a folder without write permission")
        yield mount
    finally:
        mount.chmod(0o755)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small real inputs for every command: what a command reads is checked after its outputs."""
    d = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(0)
    np.save(d / "acts.npy", rng.normal(size=(40, 3)))
    np.save(d / "concepts.npy", (rng.random((40, 3)) < 0.3).astype(np.float64))
    np.save(d / "model.npy", rng.random((40, 3)))
    np.save(d / "truth.npy", np.arange(3))
    pl.DataFrame({"unit": [0, 1], "concept": [0, 1]}).write_csv(d / "pairs.csv")
    for name in ("plan.parquet", "labels.csv", "ratings.csv", "texts.txt", "explanations.txt", "y.npy"):
        (d / name).write_text("x\n")
    pl.DataFrame({"unit": [0], "explainer": ["a"], "explanation": ["dogs"]}).write_csv(d / "explanations.csv")
    return d


COMMANDS: dict[tuple[str, str], list[str]] = {
    ("score", "--out"): ["score", "{acts}", "{concepts}", "--out", "{ro}/s.parquet"],
    ("sanity", "--out"): ["sanity", "--theoretical", "--n", "10000", "--seeds", "2", "--out", "{ro}/sanity"],
    ("meta", "--out"): ["meta", "{acts}", "{concepts}", "--truth", "{truth}", "--out", "{ro}/m.csv"],
    ("crowd plan", "--out"): ["crowd", "plan", "{acts}", "{model}", "--pairs", "{pairs}", "--budget", "9",
                              "--out", "{ro}/plan.parquet"],
    ("crowd plan", "--tasks"): ["crowd", "plan", "{acts}", "{model}", "--pairs", "{pairs}", "--budget", "9",
                                "--out", "{rw}/plan.parquet", "--tasks", "{ro}/tasks.csv"],
    ("crowd next", "--tasks"): ["crowd", "next", "{ratings}", "--plan", "{plan}", "--tasks", "{ro}/t.csv"],
    ("crowd rate", "--out"): ["crowd", "rate", "{ratings}", "{y}", "--out", "{ro}/v.csv"],
    ("crowd aggregate", "--out"): ["crowd", "aggregate", "{ratings}", "--plan", "{plan}", "--out", "{ro}/l.csv"],
    ("crowd aggregate", "--rater-rates"): ["crowd", "aggregate", "{ratings}", "--plan", "{plan}", "--out",
                                           "{rw}/l.csv", "--eta", "estimate", "--rater-rates", "{ro}/r.csv"],
    ("crowd estimate", "--out"): ["crowd", "estimate", "--plan", "{plan}", "--labels", "{labels}",
                                  "--out", "{ro}/e.csv"],
    ("crowd simulate", "--out"): ["crowd", "simulate", "{acts}", "{concepts}", "{model}", "--pairs", "{pairs}",
                                  "--budgets", "10", "--out", "{ro}/sim"],
    ("crowd judge", "--out"): ["crowd", "judge", "{acts}", "{texts}", "{explanations}", "--pairs", "{pairs}", "--judge",
                               "minilm", "--budget", "4", "--no-cache", "--out", "{ro}/j.csv"],
    ("label", "--out"): ["label", "{texts}", "{explanations}", "--judge", "minilm", "--no-cache",
                         "--out", "{ro}/l.parquet"],
    ("calibrate", "--out"): ["calibrate", "{texts}", "{explanations}", "{y}", "--judge", "minilm", "--no-cache",
                             "--out", "{ro}/c.json"],
    ("compare", "--out"): ["compare", "{acts}", "{explanations_table}", "--concepts", "{concepts}",
                           "--out", "{ro}/cmp"],
    ("circuits run", "--out"): ["circuits", "run", "--model", "digit-pair", "--out", "{ro}/run"],
    ("causal run", "--out"): ["causal", "run", "--model", "planted", "--out", "{ro}/run"],
    ("report", "-o"): ["report", "{results}", "-o", "{ro}/page.html"],
    ("demo", "--out"): ["demo", "--out", "{ro}/demo"],
}  # fmt: skip


def output_options() -> set[tuple[str, str]]:
    """Every (command, option) of the parser whose value is an output path."""
    found: set[tuple[str, str]] = set()

    def walk(p: argparse.ArgumentParser, words: list[str]) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*words, name])
            elif callable(action.type) and action.option_strings:
                for suffix in (".parquet", ".csv", ".json", ".html", ""):
                    try:
                        value = action.type(f"/tmp/out{suffix}")
                    except (argparse.ArgumentTypeError, ValueError, TypeError):
                        continue
                    if isinstance(value, OutputPath):
                        found.add((" ".join(words), action.option_strings[0]))
                    break

    walk(parser(), [])
    return found


def test_every_output_option_has_a_read_only_case() -> None:
    assert output_options() == set(COMMANDS)


@pytest.mark.parametrize("case", list(COMMANDS), ids=" ".join)
def test_an_output_that_cannot_be_written_is_exit_1_before_any_work(
    case: tuple[str, str], read_only: Path, inputs: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    results = _results(tmp_path, {"kind": "text", "file": "texts.json"})
    (results / "inputs" / "texts.json").write_text('["a", "b"]')
    words = {
        "{ro}": str(read_only),
        "{rw}": str(tmp_path),
        "{results}": str(results),
        "{explanations_table}": str(inputs / "explanations.csv"),
        **{f"{{{p.stem}}}": str(p) for p in inputs.iterdir()},
    }
    argv = []
    for a in COMMANDS[case]:
        for key, value in words.items():
            a = a.replace(key, value)
        argv.append(a)
    code, out, err = run(argv, capfd)
    assert_one_line_error(code, err, 1, "is not writable", str(read_only))
    assert sorted(tmp_path.iterdir()) == [results]  # nothing written beside


CACHE_COMMANDS = {
    "label": ["label", "{texts}", "{explanations}", "--judge", "minilm", "--out", "{rw}/l.parquet"],
    "calibrate": ["calibrate", "{texts}", "{explanations}", "{y}", "--judge", "minilm", "--out", "{rw}/c.json"],
    "compare": ["compare", "{acts}", "{explanations_table}", "--judge", "minilm", "--inputs", "{texts}",
                "--out", "{rw}/cmp"],
    "crowd judge": ["crowd", "judge", "{acts}", "{texts}", "{explanations}", "--pairs", "{pairs}", "--judge",
                    "minilm", "--budget", "4", "--out", "{rw}/j.csv"],
}  # fmt: skip


@pytest.mark.parametrize("command", list(CACHE_COMMANDS))
def test_a_judgement_cache_that_cannot_be_written_is_exit_1(
    command: str, read_only: Path, inputs: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The cache (SQLite and its companions) is written beside itself: a read-only folder is an I/O
    failure, as an output's is, and no model is loaded for it."""
    given = tmp_path.parent / f"{tmp_path.name}-inputs"
    given.mkdir()
    (given / "texts.txt").write_text("a dog\na cat\n")
    (given / "explanations.txt").write_text("dogs\n")
    np.save(given / "y.npy", np.array([[1.0], [0.0]]))
    np.save(given / "acts.npy", np.array([[0.5, 1.0, 0.0], [0.1, -1.0, 2.0]]))
    pl.DataFrame({"unit": [0], "concept": [0]}).write_csv(given / "pairs.csv")
    words = {"{rw}": str(tmp_path), "{explanations_table}": str(inputs / "explanations.csv")}
    words |= {f"{{{p.stem}}}": str(p) for p in [*inputs.iterdir(), *given.iterdir()]}
    argv = []
    for a in [*CACHE_COMMANDS[command], "--cache", f"{read_only}/cache.sqlite"]:
        for key, value in words.items():
            a = a.replace(key, value)
        argv.append(a)
    code, out, err = run(argv, capfd)
    assert_one_line_error(code, err, 1, "is not writable", str(read_only))
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- Ctrl-C at once


def test_the_command_lines_module_imports_nothing_before_its_handler() -> None:
    """The console script imports `neuroneval.cli` before `main` can watch Ctrl-C: that import
    must stay a few milliseconds (typing alone took 16 ms, and a Ctrl-C 50 ms after the start
    under load printed Python's traceback), so it loads only these small modules."""
    code = (
        "import sys; before = set(sys.modules); import neuroneval.cli; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    small = {
        "__future__",
        "importlib",
        "importlib._bootstrap",
        "importlib._bootstrap_external",
        "importlib.machinery",
        "warnings",
    }
    assert set(child.stdout.split()) - small == {"neuroneval", "neuroneval.cli"}, child.stdout


_INTERRUPTED_IMPORT = """
import os, signal, sys, time

class Interrupted:
    def find_spec(self, name, path=None, target=None):
        if name == "neuroneval.cli.app":
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
            except KeyboardInterrupt:  # what numpy's C import makes of Ctrl-C
                raise ImportError("numpy: PyCapsule_Import could not import module 'datetime'")
        return None

sys.meta_path.insert(0, Interrupted())
from neuroneval.cli import main
sys.exit(main(["--version"]))
"""


def test_ctrl_c_that_an_import_turns_into_an_import_error_is_exit_130() -> None:
    """A C extension's import swallows Ctrl-C and raises ImportError (numpy does): still one
    line and exit 130; an ImportError without Ctrl-C is not taken for one."""
    child = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=60)
    assert (child.returncode, child.stderr) == (130, "neuroneval: interrupted\n")
    broken = _INTERRUPTED_IMPORT.replace("os.kill(os.getpid(), signal.SIGINT)", 'raise ImportError("a broken install")')
    child = subprocess.run([sys.executable, "-c", broken], capture_output=True, text=True, timeout=60)
    assert child.returncode == 1 and "ImportError: a broken install" in child.stderr


_INTERRUPTED_CLASS_STATEMENT = """
import os, signal, sys, time

class Field:
    def __set_name__(self, owner, name):  # as a dataclass field's does
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)

class Interrupted:
    def find_spec(self, name, path=None, target=None):
        if name == "neuroneval.cli.app":
            class Comparison:
                settings = Field()
        return None

sys.meta_path.insert(0, Interrupted())
from neuroneval.cli import main
sys.exit(main(["--version"]))
"""


def test_ctrl_c_inside_a_class_statement_is_exit_130() -> None:
    """Ctrl-C inside a descriptor's __set_name__ while a module defines a class reaches us as
    Python 3.11's RuntimeError("Error calling __set_name__ ..."): one line and exit 130. Without
    Ctrl-C, that RuntimeError is not taken for one."""
    child = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_CLASS_STATEMENT], capture_output=True, text=True, timeout=60
    )
    assert (child.returncode, child.stderr) == (130, "neuroneval: interrupted\n")
    broken = _INTERRUPTED_CLASS_STATEMENT.replace("os.kill(os.getpid(), signal.SIGINT)", 'raise LookupError("a bug")')
    child = subprocess.run([sys.executable, "-c", broken], capture_output=True, text=True, timeout=60)
    assert child.returncode == 1 and "LookupError: a bug" in child.stderr, child.stderr


_INTERRUPTED_CALLBACK = """
import os, signal, sys, time, weakref

class Interrupted:
    def find_spec(self, name, path=None, target=None):
        if name == "neuroneval.cli.app":
            # Ctrl-C inside a weakref callback (as an import's module lock runs one): Python
            # prints it as an ignored exception and goes on
            thing = type("Thing", (), {})()
            ref = weakref.ref(thing, lambda _: (os.kill(os.getpid(), signal.SIGINT), time.sleep(1)))
            del thing
        return None

sys.meta_path.insert(0, Interrupted())
from neuroneval.cli import main
sys.exit(main(["--version"]))
"""


def test_ctrl_c_that_python_ignores_in_a_callback_is_still_exit_130() -> None:
    """Ctrl-C that lands in a weakref callback during the command's imports (Python reports it
    as an "Exception ignored" and runs on) stops the command: one line and exit 130."""
    child = subprocess.run([sys.executable, "-c", _INTERRUPTED_CALLBACK], capture_output=True, text=True, timeout=60)
    assert (child.returncode, child.stderr) == (130, "neuroneval: interrupted\n")


_CTRL_C_IN_TORCH_INITIALISER = """
import os, signal, sys
target, nth, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
from neuroneval.cli import main
callers = []  # the C function calling each Python frame, None for a Python caller
calls = []  # the target's calls into Python so far

def interrupt_in_target(frame, event, arg):
    if event == "c_call":
        callers.append(arg)
    elif event in ("c_return", "c_exception", "return"):
        if callers:
            callers.pop()
    elif event == "call":
        caller = callers[-1] if callers else None
        callers.append(None)
        if getattr(caller, "__module__", None) == "torch._C" and caller.__name__ == target:
            calls.append(frame.f_code.co_name)
            if len(calls) == nth:
                sys.setprofile(None)
                print("SIGINT inside", target, "call", nth, flush=True)
                os.kill(os.getpid(), signal.SIGINT)

sys.setprofile(interrupt_in_target)
sys.exit(main(["demo", "--out", out]))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("initialiser", "nth"),
    [
        # where Ctrl-C aborted the process (the first three) or crashed it (SIGSEGV, the fourth)
        ("_c10d_init", 1),
        ("_dist_autograd_init", 1),
        ("_multiprocessing_init", 1),
        ("_autograd_init", 4),
        # the others, which survived it
        ("_initExtension", 1),
        ("_rpc_init", 1),
    ],
)
def test_ctrl_c_inside_torchs_module_initialisers_is_exit_130(tmp_path: Path, initialiser: str, nth: int) -> None:
    """torch's C++ module initialisers import Python modules and cannot unwind an exception
    from them: Ctrl-C at their `nth` call into Python aborted the process ("terminate called
    after throwing an instance of 'pybind11::error_already_set'") or crashed it. It is held
    until torch's import returns, then one line and exit 130."""
    pytest.importorskip("torch")
    child = subprocess.run(
        [sys.executable, "-c", _CTRL_C_IN_TORCH_INITIALISER, initialiser, str(nth), str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert f"SIGINT inside {initialiser} call {nth}" in child.stdout, child.stdout[-2000:]
    assert (child.returncode, child.stderr) == (130, "neuroneval: interrupted\n")


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.1, 0.2, 0.4, 0.8, 1.5])
def test_ctrl_c_in_a_commands_first_instant_is_one_line_and_exit_130(tmp_path: Path, delay: float) -> None:
    """The digits demo imports torch and trains for half a minute: Ctrl-C lands in its imports
    (the first 0.7 s: the command's modules, then torch's), then in its setup. Not earlier: with
    both CPUs busy, Python's own start (site, before any of our code) ran past 45 ms here; the
    command's first import is interrupted from inside by the tests above."""
    pytest.importorskip("torch")
    exe = Path(sys.executable).with_name("neuroneval")
    if not exe.is_file():
        pytest.skip("the neuroneval script is not installed beside this Python")
    child = subprocess.Popen(
        [str(exe), "demo", "--out", str(tmp_path / "demo")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(delay)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130, (child.returncode, err)
    assert err.splitlines() == ["neuroneval: interrupted"], err
