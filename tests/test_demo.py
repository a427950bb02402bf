"""neuroneval.torch.capture against direct forward passes, and one real run of the demo."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

import neuroneval  # noqa: E402
import polars as pl  # noqa: E402
import torch  # noqa: E402
from neuroneval.errors import EmptyInputError, InvalidInputError, ParameterError, ShapeError  # noqa: E402
from neuroneval.experiments import digits as demo  # noqa: E402
from neuroneval.torch import capture  # noqa: E402
from torch import nn  # noqa: E402

pytestmark = pytest.mark.slow  # the digits demo trained end to end


def tiny_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(2, 3, 3, padding=1),  # "0": (N, 3, 5, 5)
        nn.ReLU(),  # "1"
        nn.Dropout(0.5),  # "2": random in training mode, identity in eval mode
        nn.Flatten(),  # "3": (N, 75)
        nn.Linear(75, 4),  # "4"
    )


def no_hooks(model: nn.Module) -> bool:
    return all(not m._forward_hooks for m in model.modules())


@pytest.fixture
def data() -> torch.Tensor:
    return torch.randn(11, 2, 5, 5, generator=torch.Generator().manual_seed(1))


def test_capture_matches_a_direct_forward_pass(data: torch.Tensor) -> None:
    model = tiny_model()
    model.train()
    # batch_size 4 over 11 inputs: three batches, the last one short.
    got = capture(model, data, ["0", "1", "3", "4"], batch_size=4)
    assert model.training, "the training flag must be restored"
    assert no_hooks(model)
    model.eval()
    with torch.no_grad():
        conv = model[0](data)
        relu = torch.relu(conv)
        out = model(data)
    assert list(got) == ["0", "1", "3", "4"]
    for a in got.values():
        assert a.dtype == np.float32 and a.flags.c_contiguous and a.shape[0] == 11
    np.testing.assert_allclose(got["0"], conv.mean(dim=(2, 3)).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["1"], relu.mean(dim=(2, 3)).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["3"], relu.reshape(11, -1).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["4"], out.numpy(), rtol=1e-6, atol=1e-6)


def test_capture_max_reduction_and_numpy_inputs(data: torch.Tensor) -> None:
    model = tiny_model()
    got = capture(model, data.numpy(), "0", reduce="max", batch_size=100)
    with torch.no_grad():
        expected = model[0](data).amax(dim=(2, 3)).numpy()
    np.testing.assert_allclose(got["0"], expected, rtol=1e-6, atol=1e-6)
    assert got["0"].shape == (11, 3)


def test_capture_is_independent_of_batch_size(data: torch.Tensor) -> None:
    model = tiny_model()
    one = capture(model, data, ["1", "4"], batch_size=1)
    all_ = capture(model, data, ["1", "4"], batch_size=256)
    for name in one:
        np.testing.assert_allclose(one[name], all_[name], rtol=1e-5, atol=1e-6)


def test_capture_errors_name_the_problem_and_remove_hooks(data: torch.Tensor) -> None:
    model = tiny_model()
    with pytest.raises(ParameterError, match="no module named 'nope'"):
        capture(model, data, ["0", "nope"])
    with pytest.raises(ParameterError, match="reduce"):
        capture(model, data, "0", reduce="median")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="batch_size"):
        capture(model, data, "0", batch_size=0)
    with pytest.raises(EmptyInputError):
        capture(model, data, [])
    with pytest.raises(EmptyInputError):
        capture(model, data[:0], "0")
    assert issubclass(ParameterError, InvalidInputError) and issubclass(ShapeError, InvalidInputError)
    # A failure inside the forward pass (wrong channel count): hooks still removed, mode restored.
    model.train()
    with pytest.raises(RuntimeError):
        capture(model, torch.randn(3, 5, 5, 5), ["0", "4"])
    assert no_hooks(model) and model.training


def test_capture_rejects_a_layer_that_runs_twice() -> None:
    relu = nn.ReLU()
    model = nn.Sequential(relu, nn.Linear(3, 3), relu)
    with pytest.raises(ParameterError, match="ran 2 times"):
        capture(model, torch.randn(4, 3), "0")
    assert no_hooks(model)


def test_importing_neuroneval_does_not_import_torch() -> None:
    code = "import sys, neuroneval, neuroneval.metrics; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture(scope="module")
def probe() -> demo.DigitsProbe:
    return demo.probe_digits(0)


def test_superclass_units_sum_their_members(probe: demo.DigitsProbe) -> None:
    probs = probe.activations["class"].astype(np.float64)
    units = probe.superclass_units()
    assert units.shape == (probe.labels.size, len(demo.DERIVED))
    for j, members in enumerate(demo.DERIVED.values()):
        expected = sum(probs[:, d] for d in members)
        np.testing.assert_allclose(units[:, j], expected, rtol=1e-12)
    # The derived concept of each superclass unit is the concept column of its members.
    for name, members in demo.DERIVED.items():
        column = probe.concepts[:, demo.CONCEPT_NAMES.index(name)]
        np.testing.assert_array_equal(column, np.isin(probe.labels, members))
    # The probe set is every held-out image under every transform, labels tiled transform-major.
    n_images = probe.labels.size // probe.copies
    assert probe.copies == len(demo.ANGLES) * len(demo.SHIFTS) ** 2
    np.testing.assert_array_equal(probe.labels, np.tile(probe.labels[:n_images], probe.copies))


def test_hidden_setting_leaves_out_dead_units(probe: demo.DigitsProbe) -> None:
    name, hidden, truth = demo.sanity_settings(probe)[2]
    assert truth is None and "hidden" in name
    every = np.concatenate([probe.activations[layer] for layer in ("conv1", "conv2", "fc1")], axis=1)
    alive = every.max(axis=0) > every.min(axis=0)
    np.testing.assert_array_equal(hidden, every[:, alive])


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("demo")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert demo.main(["--out", str(out)]) == 0
    return out, buffer.getvalue()


def test_demo_writes_one_row_per_unit_and_concept(demo_run: tuple[Path, str]) -> None:
    out, printed = demo_run
    path = out / "scores.parquet"
    assert path.is_file()
    expected = [
        "activations",
        "crowd",
        "inputs",
        "report.html",
        "report.json",
        "sanity",
        "scores.parquet",
        "top_inputs.parquet",
    ]
    assert sorted(p.name for p in out.iterdir()) == expected, "temporary files left behind"
    table = pl.read_parquet(path)
    assert table.columns == ["layer", "unit", "concept", *neuroneval.METRICS]
    for metric in neuroneval.METRICS:
        assert table.schema[metric] == pl.Float64
    units = {"conv1": 16, "conv2": 32, "fc1": 64, "class": 10}
    per_layer = dict(table.group_by("layer").len().iter_rows())
    assert per_layer == {layer: k * len(demo.CONCEPT_NAMES) for layer, k in units.items()}
    for layer in units:
        pairs = table.filter(pl.col("layer") == layer).select("unit", "concept")
        assert pairs.n_unique() == pairs.height
        assert set(pairs["concept"]) == set(demo.CONCEPT_NAMES)
    assert f"{table.height} rows" in printed
    assert len(printed.splitlines()) < 110


def test_demo_extracts_to_a_store_equal_to_the_captured_activations(
    demo_run: tuple[Path, str], probe: demo.DigitsProbe
) -> None:
    from neuroneval.torch import ActivationStore

    out, printed = demo_run
    store = ActivationStore.open(out / "activations")
    assert f"extracted the 4 layers to {out / 'activations'}" in printed
    for layer, (module, _) in demo.LAYERS.items():
        stored = np.concatenate(list(store[module].source.row_chunks(1 << 16)))
        np.testing.assert_array_equal(stored, probe.activations[layer])  # float32 store, same forward pass


def test_demo_writes_a_report_with_every_layer_and_top_inputs(
    demo_run: tuple[Path, str], probe: demo.DigitsProbe
) -> None:
    out, printed = demo_run
    page = (out / "report.html").read_text()
    assert f"wrote {out / 'report.html'}" in printed
    for i, layer in enumerate(demo.LAYERS):
        assert f'<section class="layer" id="layer-{i}-{layer}"' in page
    tops = pl.read_parquet(out / "top_inputs.parquet")
    # The top input of each class unit is an input where that unit is largest (exact argmax).
    for k in range(10):
        row = tops.filter(pl.col("unit") == f"class[{k}]", pl.col("rank") == 0)
        column = probe.activations["class"][:, k]
        assert row["activation"][0] == pytest.approx(float(column.max()))
        assert column[row["input"][0]] == column.max()


def test_demo_prints_the_paper_like_crowd_table(demo_run: tuple[Path, str]) -> None:
    from neuroneval.experiments import numbers

    out, printed = demo_run
    assert sorted(p.name for p in (out / "crowd").iterdir()) == [
        "pairs.csv", "rce-sequential-pairs.csv", "rce-sequential.csv", "rce-sequential.png", "rce.csv", "rce.png"
    ]  # fmt: skip
    assert (out / "crowd" / "rce.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rce = pl.read_csv(out / "crowd" / "rce.csv")
    pairs = pl.read_csv(out / "crowd" / "pairs.csv")
    configurations = rce.select("sampling", "aggregation").unique(maintain_order=True).rows()
    assert configurations == list(numbers.CONFIGURATIONS)
    assert sorted(set(rce["budget"])) == list(numbers.BUDGETS)
    assert sorted(set(rce["raters"])) == list(numbers.RATERS)
    assert pairs["rho"].is_between(0.1, 0.35).all() and pairs.height == 20
    # The printed table is the written RCE curves' cheapest crossing of the target.
    simulation = neuroneval.crowd.Simulation(rce, pairs, demo.CROWD_TARGET, 0.23, 20, numbers.BUDGETS, numbers.RATERS)
    lines = demo.crowd_summary(simulation)
    for line in lines:
        assert line in printed
    names = ["concept model alone", *(neuroneval.crowd.configuration_name(*c) for c in numbers.CONFIGURATIONS)]
    assert [ln.strip().split("  ")[0] for ln in lines[1:8]] == names
    assert f"RCE {simulation.model_rce:.3f}" in lines[1]
    cheapest = {(r["sampling"], r["aggregation"]): r for r in simulation.cheapest().iter_rows(named=True)}
    base, best = cheapest[("uniform", "majority")], cheapest[("mgis", "bragg")]
    assert best["needed"] is not None
    for line, key in zip(lines[2:8], numbers.CONFIGURATIONS, strict=True):
        row = cheapest[key]
        if row["needed"] is None:  # never reached: no ratio, named below the table
            assert "> " in line and "x " not in line and neuroneval.crowd.configuration_name(*key) in lines[-1]
        else:
            assert f"{row['needed']:,.0f}" in line and f" {row['raters']} " in line
            if base["needed"] is not None:
                assert f"{base['needed'] / row['needed']:.1f}x" in line


def test_demo_prints_the_sequential_crowd_table(demo_run: tuple[Path, str]) -> None:
    """The sequential table is its written curves' cheapest crossings, each against the fixed
    table's uniform + majority, with the bias and coverage of the grid budget above it."""
    from neuroneval.experiments import numbers

    out, printed = demo_run
    read = {name: pl.read_csv(out / "crowd" / name) for name in ("rce.csv", "rce-sequential.csv", "pairs.csv")}
    fixed = neuroneval.crowd.Simulation(
        read["rce.csv"], read["pairs.csv"], demo.CROWD_TARGET, 0.23, 20, numbers.BUDGETS, numbers.RATERS
    )
    sequential = neuroneval.crowd.Simulation(
        read["rce-sequential.csv"], read["pairs.csv"], demo.CROWD_TARGET, 0.23, 20, numbers.BUDGETS,
        numbers.SEQUENTIAL_RATERS, rating="sequential",
    )  # fmt: skip
    assert sorted(set(read["rce-sequential.csv"]["raters"])) == list(numbers.SEQUENTIAL_RATERS)
    lines = demo.sequential_summary(sequential, fixed)
    for line in lines:
        assert line in printed
    base = fixed.cheapest().filter(sampling="uniform", aggregation="majority")["needed"][0]
    for line, row in zip(lines[1:], sequential.cheapest().iter_rows(named=True), strict=True):
        assert line.split()[:3] == neuroneval.crowd.configuration_name(row["sampling"], row["aggregation"]).split()
        if row["needed"] is not None:
            assert f"{row['needed']:,.0f}" in line and f"{base / row['needed']:.1f}x" in line
            grid = sequential.rce.filter(sampling=row["sampling"], aggregation=row["aggregation"])
            at = grid.filter(pl.col("budget") >= row["needed"]).sort("budget").row(0, named=True)
            assert f"{at['bias']:+.3f} ({at['bias_se']:.3f}), {at['coverage']:.2f} at {at['budget']:,}" in line


def test_numbers_setting_is_paper_like(probe: demo.DigitsProbe) -> None:
    from neuroneval.experiments import numbers

    setting = demo.numbers_setting(probe, n_inputs=20_000, count=12)
    n = setting.units.shape[0]
    assert setting.concepts.shape == (n, 100) and (setting.concepts.sum(axis=1) == 1).all()
    prevalence = setting.concepts.mean(axis=0)
    assert prevalence.max() / prevalence.min() < 2 * numbers.PREVALENCE_RANGE
    for (k, t), rho, p, auc in zip(setting.pairs, setting.rho, setting.prevalence, setting.auc, strict=True):
        r = [np.corrcoef(setting.units[:, j], setting.concepts[:, t])[0, 1] for j in range(setting.units.shape[1])]
        assert int(np.nanargmax(r)) == k and r[k] == pytest.approx(rho)  # the explainer's best unit
        assert 0.1 <= rho <= 0.35 and 0.001 <= p <= 0.02 and p == prevalence[t]
        assert 0.75 < auc < 0.99  # good, not perfect: another model than the truth
    assert len(setting.pairs) == 12


def test_digits_concept_model_is_good_but_imperfect(probe: demo.DigitsProbe) -> None:
    from sklearn.metrics import roc_auc_score

    model = demo.digits_concept_model(probe)
    assert model.shape == probe.concepts.shape
    assert ((model >= 0) & (model <= 1)).all()
    auc = [roc_auc_score(probe.concepts[:, t], model[:, t]) for t in range(model.shape[1])]
    digits = auc[:10]
    assert min(auc) > 0.6 and max(digits) < 0.99, auc  # informative, yet far from the true labels


def test_crowd_pairs_have_realistic_correlations(probe: demo.DigitsProbe) -> None:
    hidden, pairs = demo.crowd_pairs(probe, count=12)
    assert pairs.shape == (12, 2) and len({int(k) for k in pairs[:, 0]}) == 12
    for k, t in pairs:
        r = [abs(np.corrcoef(hidden[:, k], probe.concepts[:, j])[0, 1]) for j in range(probe.concepts.shape[1])]
        assert int(np.nanargmax(r)) == t
        assert r[t] >= 0.25


def test_demo_runs_the_sanity_checks_and_writes_table_3(demo_run: tuple[Path, str], probe: demo.DigitsProbe) -> None:
    out, printed = demo_run
    files = sorted(p.name for p in (out / "sanity").iterdir())
    assert files == ["chart.png", "records.csv", "table.csv", "table.md"], files
    assert (out / "sanity" / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (out / "sanity" / "table.md").read_text()
    assert markdown in printed, "the printed table is the written one"
    table = pl.read_csv(out / "sanity" / "table.csv")
    assert table["metric"].to_list() == list(neuroneval.METRICS)
    records = pl.read_csv(out / "sanity" / "records.csv")
    settings = set(records["setting"])
    assert settings == {name for name, _, _ in demo.sanity_settings(probe)} | {"theoretical"}
    # Every experimental cell is the mean of its settings' records, as Table 3 averages them.
    experimental = records.filter(pl.col("kind") == "experimental")
    mean_f1 = experimental.filter(metric="f1", perturbation="missing")["decrease_acc"].mean()
    assert table.filter(metric="f1")["missing_experimental"][0] == pytest.approx(mean_f1)
    # Each test unit is counted once per setting: 95% of the units of the setting.
    for name, units, _ in demo.sanity_settings(probe):
        counted = experimental.filter(setting=name, metric="correlation", perturbation="missing")["units"][0]
        assert counted == units.shape[1] - max(1, round(0.05 * units.shape[1]))


def test_demo_class_units_find_their_digit(demo_run: tuple[Path, str]) -> None:
    out, printed = demo_run
    table = pl.read_parquet(out / "scores.parquet").filter(pl.col("layer") == "class")
    assert table.height == 10 * len(demo.CONCEPT_NAMES)
    # Rows come unit-major in CONCEPT_NAMES order; check that rather than assume it.
    assert table["concept"].to_list() == list(demo.CONCEPT_NAMES) * 10
    assert table["unit"].to_list() == [f"class[{k}]" for k in range(10) for _ in demo.CONCEPT_NAMES]
    corr = table["correlation"].to_numpy().reshape(10, len(demo.CONCEPT_NAMES))
    best = np.argmax(np.where(np.isnan(corr), -np.inf, corr), axis=1)
    assert (best == np.arange(10)).sum() >= 9, best
    assert "probe accuracy" in printed
    accuracy = float(printed.split("probe accuracy ")[1].split("%")[0])
    assert accuracy > 90.0
    # The printed meta-AUPRC lines agree with meta_auprc on the written scores.
    meta = neuroneval.meta_auprc(corr, np.arange(10)).value
    lines = {}
    for ln in printed.splitlines():
        tokens = ln.split()
        passing = tokens[:1] == ["*"]
        tokens = tokens[1:] if passing else tokens
        if tokens and tokens[0] in neuroneval.METRICS:
            lines[tokens[0]] = (passing, tokens)
    assert set(lines) == set(neuroneval.METRICS)
    assert {m for m, (passing, _) in lines.items() if passing} == set(neuroneval.PASSING_METRICS)
    assert float(lines["correlation"][1][1]) == pytest.approx(meta, abs=5e-4)
    assert lines["correlation"][1][2] == f"{(best == np.arange(10)).sum()}/10"


def test_concepts_for_and_own_concept_first() -> None:
    c = demo.concepts_for([2, 7, 8, 1], [1.0, 4.0, 3.0, 2.0])
    names = demo.CONCEPT_NAMES
    assert c.dtype == np.float64 and c.shape == (4, len(names))
    row = dict(zip(names, c[0], strict=True))
    assert row["digit 2"] == 1 and row["small (0-2)"] == 1 and row["prime"] == 1 and row["closed loop"] == 0
    assert c[:, names.index("heavy ink")].tolist() == [0, 1, 0, 0]  # above the 75th percentile, 3.25
    assert c[:, :10].sum(axis=1).tolist() == [1, 1, 1, 1]
    s = np.array([[np.nan, 0.1], [0.2, 0.2], [0.0, np.nan]])
    assert demo.own_concept_first(s, [0, 1, 0]) == (1, 1)
